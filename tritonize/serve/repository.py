"""What the serve stage needs to know about a model repository before a server sees it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tritonize.errors import TritonizeError
from tritonize.model_repository import (
    AOTI_MODEL,
    CONFIG_NAME,
    REQUIREMENTS_NAME,
    TRT_MODEL,
    missing_plan,
    parse_config,
    serving_cc,
)

CPU_CONFIG_NAME = "cpu"
DEFAULT_CONFIG_NAME = "config"  # names config.pbtxt itself: no --model-config-name


def validate_repository(repository: Path, to_load: Sequence[str] = ()) -> list[str]:
    """Model names of `repository`, after checking it exists, every config parses and it has the
    models `to_load` at start.

    Triton would report a config with a typo only as an UNAVAILABLE model deep in its log; parsing
    with the real ModelConfig proto here gives the file and the protobuf's precise message instead.
    """
    repository = Path(repository)
    if not repository.exists():
        raise TritonizeError(f"model repository {repository} does not exist; build it with `tritonize repo build`")
    if not repository.is_dir():
        raise TritonizeError(f"model repository {repository} is not a directory")
    models = sorted(d for d in repository.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not any((d / "config.pbtxt").is_file() for d in models):
        raise TritonizeError(
            f"invalid model repository {repository}: no <model>/config.pbtxt inside; "
            "build one with `tritonize repo build`"
        )
    for model in models:
        if not (model / CONFIG_NAME).is_file():
            raise TritonizeError(f"invalid model repository {repository}: {model.name}/ has no {CONFIG_NAME}")
        for config_file in [model / CONFIG_NAME, *sorted((model / "configs").glob("*.pbtxt"))]:
            try:
                parse_config(config_file)
            except TritonizeError as e:
                raise TritonizeError(f"invalid model config {e}; fix it or rebuild the repository") from None
    names = [m.name for m in models]
    unknown = [m for m in to_load if m not in names]
    if unknown:
        raise TritonizeError(f"--models: {', '.join(unknown)} not in {repository}; it has {', '.join(names)}")
    return names


def model_control_flags(models: Sequence[str] = (), all_when_empty: bool = True) -> list[str]:
    """tritonserver flags for explicit model control: the model repository API loads and unloads
    models (`tritonize models`); `models` are loaded at start, all of them when empty (none, without
    `all_when_empty`: a server started again after a crash, which had none loaded)."""
    return ["--model-control-mode=explicit", *(f"--load-model={m}" for m in (models or ["*"] * all_when_empty))]


@dataclass(frozen=True)
class PlanProvenance:
    """What `repo build` stamped into a TensorRT model's config about its plan."""

    model: str
    tensorrt_version: str | None  # the TensorRT that built the plan
    triton_release: str | None  # the release the plan was built for
    version_compatible: bool


def tensorrt_models(repository: Path) -> list[PlanProvenance]:
    """The repository's TensorRT models and their plans' provenance, read from their config.pbtxt."""
    found = []
    for config_file in sorted(Path(repository).glob(f"*/{CONFIG_NAME}")):
        cfg = parse_config(config_file)
        if cfg.platform != TRT_MODEL.platform and cfg.backend != TRT_MODEL.backend:
            continue
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        found.append(PlanProvenance(
            model=config_file.parent.name,
            tensorrt_version=params.get("source.tensorrt_version") or None,
            triton_release=params.get("source.triton_release") or None,
            version_compatible=params.get("source.version_compatible", "false").lower() == "true",
        ))
    return found


def package_models(repository: Path) -> dict[str, str | None]:
    """The repository's PyTorch 2 (AOTInductor) models and the release each package was made for (None: unsaid)."""
    found = {}
    for config_file in sorted(Path(repository).glob(f"*/{CONFIG_NAME}")):
        cfg = parse_config(config_file)
        if cfg.platform == AOTI_MODEL.platform:
            release = cfg.parameters["source.triton_release"].string_value if "source.triton_release" in cfg.parameters else ""
            found[config_file.parent.name] = release or None
    return found


def python_requirements(repository: Path) -> list[str]:
    """The model directories' requirements.txt (relative paths): pip packages their Python models need in
    the server's Python (`repo build` writes one for the preprocessing models: Pillow)."""
    return sorted(p.relative_to(repository).as_posix() for p in Path(repository).glob(f"*/{REQUIREMENTS_NAME}"))


def models_without_python_requirements(repository: Path) -> list[str]:
    """Models that load without the pip packages of python_requirements(): neither such a model nor an
    ensemble with a step that is one (directly or through another ensemble)."""
    configs = {c.parent.name: parse_config(c) for c in sorted(Path(repository).glob(f"*/{CONFIG_NAME}"))}
    needing = {Path(r).parent.name for r in python_requirements(repository)}
    grown = True
    while grown:
        before = len(needing)
        needing |= {name for name, cfg in configs.items()
                    if any(step.model_name in needing for step in cfg.ensemble_scheduling.step)}
        grown = len(needing) > before
    return [name for name in configs if name not in needing]


def has_config_variant(repository: Path, name: str) -> bool:
    """True when some model has `configs/<name>.pbtxt` (Triton's --model-config-name)."""
    return any(Path(repository).glob(f"*/configs/{name}.pbtxt"))


def plans_missing_for_gpu(repository: Path, gpu_cc: str | None) -> list[str]:
    """One line per TensorRT model of `repository` that has no plan for the serving GPU's compute capability
    (`gpu_cc`, else this machine's GPU; nothing when neither is known)."""
    configs = [parse_config(f) for f in sorted(Path(repository).glob(f"*/{CONFIG_NAME}"))]
    configs = [c for c in configs if c.platform == TRT_MODEL.platform or c.backend == TRT_MODEL.backend]
    if not configs:
        return []
    cc, source = serving_cc(gpu_cc)
    if cc is None:
        return []
    return [f"{problem} (compute capability from {source})" for c in configs if (problem := missing_plan(c, cc))]
