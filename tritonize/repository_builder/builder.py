"""Artifacts directory -> Triton model repository, published atomically."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import tritonize
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, ensure_writable_dir
from tritonize.manifest import Entry, Manifest, Package, Plan, PrecisionVariant, Status
from tritonize.model_repository import (
    BACKENDS,
    COMPILED,
    CONFIG_NAME,
    CPU,
    CPU_GATES,
    GPU,
    LABELS_NAME,
    NOT_BUILT_SUFFIX,
    PLAN_BUILT,
    PREPROCESSORS,
    RELEASE,
    REQUIREMENTS_NAME,
    TRT_MODEL,
    Backend,
    batches,
    not_built_notes,
    release_problem,
)
from tritonize.progress import say
from tritonize.repository_builder.config import (
    batch_bound,
    config_text,
    ensemble_config,
    kind_name,
    model_config,
    preprocessor_config,
    served_release,
)
from tritonize.repository_builder.gpus import FleetPlan, cc_filename, gather
from tritonize.repository_builder.options import RepoOptions
from tritonize.spec import ModelSpec
from tritonize.stage import StageResult, StageStatus

VERSION = "1"
_PACKAGE = Path(tritonize.__file__).resolve().parent
# What the preprocessing models run, by its place in <model>/<VERSION>/: model.py (it runs only inside
# Triton's Python backend, never imported here) and, beside it, the modules it imports, from this tritonize.
PREPROCESS_CODE = {
    "model.py": _PACKAGE / "repository_builder" / "preprocess_model.py",
    **{f"tritonize/{name}": _PACKAGE / name for name in ("__init__.py", "errors.py", "preprocessing.py", "images.py")},
}
# What decoding needs in the server's Python beyond numpy (which Triton's Python backend has): the NGC
# container lacks Pillow; `serve --engine docker` pip-installs every model's requirements.txt.
DECODE_REQUIREMENTS = "pillow>=10\n"


@dataclass(frozen=True)
class ModelFiles:
    """Everything one model directory holds: text files by relative path, and the model file."""

    name: str
    texts: dict[str, str]
    summary: str  # one line for the user
    files: dict[str, Path] = field(default_factory=dict)  # <VERSION>/<name> -> the artifact placed there


def build_repository(artifacts: Path, repository: Path, options: RepoOptions = RepoOptions()) -> StageResult:
    """Write `repository/<model>/{config.pbtxt, configs/, labels.txt, 1/<file>}` for every model whose
    artifact exists, with one line per model built or skipped.

    `up_to_date` (nothing written) when the repository already holds exactly these files, unless
    `options.force`; a repository that differs is replaced only with `options.overwrite`.
    """
    artifacts, repository = Path(artifacts), Path(repository)
    manifest = Manifest.load(artifacts)
    spec = manifest.spec
    if len(spec.labels) != spec.num_classes:
        raise TritonizeError(
            f"manifest in {artifacts} has {len(spec.labels)} labels for {spec.num_classes} classes; "
            "re-run `tritonize export --force`"
        )
    wanted = options.models or tuple(BACKENDS)
    reasons = {name: _why_not(BACKENDS[name], manifest, options) for name in wanted}
    if all(reasons.values()):
        listing = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        raise TritonizeError(f"no model to build from {artifacts}: {listing}")
    sha = manifest.sha256()
    built = [BACKENDS[name] for name, why in reasons.items() if not why]
    if options.plans and TRT_MODEL not in built:
        raise TritonizeError(f"--plans gathers TensorRT plans into {TRT_MODEL.name}, which is not built: "
                             f"{reasons.get(TRT_MODEL.name) or '--models leaves it out'}")
    fleet = gather(manifest, options.plans) if options.plans else []
    models = [_render(backend, spec, manifest, options, sha, fleet) for backend in built]
    if options.ensembles:
        models += _render_ensembles(built, spec, manifest, options, sha, fleet)
    notes = _notes(manifest, reasons, options)
    for name, why in reasons.items():
        if why:
            say(f"skipped {name}: {why}" + (f" (note left in {repository / (name + NOT_BUILT_SUFFIX)})" if name in notes else ""))
    detail = f"{repository}/: {', '.join(m.name for m in models)}"

    if not options.force and _current(repository, models, notes):
        say(f"= {repository} is up to date (same manifest and options); --force rebuilds it")
        return StageResult("repo build", StageStatus.up_to_date, detail)
    _refuse_to_clobber(repository, options.overwrite)
    ensure_writable_dir(repository.parent, "REPOSITORY")
    with atomic_path(repository) as tmp:
        tmp.mkdir()
        _keep_loose_files(repository, tmp)
        for name, text in notes.items():
            (tmp / f"{name}{NOT_BUILT_SUFFIX}").write_text(text + "\n")
        for model in models:
            how = _write(tmp / model.name, model)
            say(f"built {model.name}: {model.summary}" + (f", {', '.join(model.files)} {how}" if how else ""))
    return StageResult("repo build", StageStatus.done, detail)


def _why_not(backend: Backend, manifest: Manifest, options: RepoOptions) -> str | None:
    """Why this model cannot be built, or None when it can."""
    entry = manifest.artifacts.get(backend.artifact)
    artifacts = manifest.directory
    if _runs(backend, entry) == GPU and options.kind == "cpu":
        return ("--kind cpu, and TensorRT plans only run on a GPU" if backend.gate == PLAN_BUILT else
                "--kind cpu, and its package was compiled for the GPU")
    if entry is None:
        if backend.gate == PLAN_BUILT:
            return f"no TensorRT plan in {artifacts} (run {backend.made_by} on a GPU box)"
        if backend.gate == CPU_GATES:
            return f"no CPU INT8 variant in {artifacts} ({backend.made_by} makes and gates one)"
        return f"no {backend.artifact} artifact in {artifacts}/manifest.json (run {backend.made_by})"
    if isinstance(entry, Plan) and entry.status is not Status.built:
        return f"TensorRT plan status is {entry.status.value!r}, not 'built' (run the convert step on a GPU box)"
    if isinstance(entry, Package) and entry.status is not Status.verified:
        return f"its {entry.device.upper()} package is {entry.status.value} (on a GPU box run `{entry.gpu_command}`)"
    if backend.gate == RELEASE:
        why = release_problem(backend, served_release(entry))
        if why:
            return why
    if backend.gate == CPU_GATES:
        why = _why_not_variant(entry, manifest)
        if why:
            return why
    path = manifest.path(entry)
    if not path.is_file():
        return f"{path} is missing (re-run the stage that writes it)"
    problem = manifest.file_problem(entry)
    if problem:
        return f"{problem} (re-run the stage that writes it)"
    return None


def _why_not_variant(entry: PrecisionVariant, manifest: Manifest) -> str | None:
    """A CPU precision variant is served only when `convert cpu` measured both gates, against this FP32 export,
    and both passed."""
    gates = entry.cpu_serving
    fp32 = manifest.onnx
    if fp32 is None or entry.source.sha256 != fp32.sha256:
        return f"{entry.file} was made from another FP32 export (run `tritonize convert cpu` again)"
    if gates is None:
        return f"{entry.file} has not passed the serving gates yet (run `tritonize convert cpu`)"
    if gates.fp32.sha256 != fp32.sha256:
        return f"{entry.file}'s gates compared it with another FP32 export (run `tritonize convert cpu` again)"
    if not gates.agreement.passed:
        return f"left out, it does not agree with FP32: {gates.agreement.reason}"
    if not gates.speed.passed:
        return f"left out, {gates.speed.reason}"
    return None


def _notes(manifest: Manifest, reasons: dict[str, str | None], options: RepoOptions) -> dict[str, str]:
    """What to tell about the models left out only because their TensorRT plan waits for a GPU box."""
    notes = {}
    for name, why in reasons.items():
        entry = manifest.artifacts.get(BACKENDS[name].artifact)
        if not why or options.kind == "cpu" or getattr(entry, "status", None) is not Status.waiting_for_gpu:
            continue
        if isinstance(entry, Plan):
            notes[name] = (
                f"{name} was not built: its TensorRT plan is waiting for a GPU (TensorRT cannot run where `tritonize "
                f"repo build` ran). On a GPU box run `{entry.gpu_command}` (or `bash {manifest.directory / entry.reproducer}`), "
                "then `tritonize repo build` again."
            )
        elif isinstance(entry, Package):
            notes[name] = (f"{name} was not built: its AOTInductor package for the GPU is compiled on a GPU box. There "
                           f"run `{entry.gpu_command}`, then `tritonize repo build` again.")
    return notes


def _render(backend: Backend, spec: ModelSpec, manifest: Manifest, options: RepoOptions, sha: str,
            fleet: list[FleetPlan]) -> ModelFiles:
    """One model directory's files, in memory. trt_model with a `fleet`: one plan per GPU kind."""
    entry: Entry = manifest.artifacts[backend.artifact]
    header = (
        f"Generated by `tritonize repo build` from {spec.arch} ({spec.weights}); manifest sha256 {sha[:12]}.\n"
        "Instance placement: configs/cpu.pbtxt and configs/gpu.pbtxt pin it; select one with\n"
        "`tritonserver --model-config-name=cpu|gpu`. An instance_group without `kind` means KIND_AUTO\n"
        "(GPU when Triton has one, else CPU)."
    )
    where = _runs(backend, entry)
    default_kind = _default_kind(where, options)
    variants = {CONFIG_NAME: default_kind, "configs/gpu.pbtxt": "gpu"}
    if where == CPU:  # gated for onnxruntime's CPU kernels, or compiled for the CPU: never placed on a GPU
        what = "An AOTInductor package compiled" if backend.runs == COMPILED else "A precision variant gated"
        header += f"\n{what} for the CPU ({backend.made_by}): KIND_CPU in every config."
        variants = {CONFIG_NAME: "cpu"}
    if where != GPU:
        variants["configs/cpu.pbtxt"] = "cpu"
    release = served_release(entry)
    if not batches(backend, release):
        header += (f"\nTriton {release}'s {backend.backend} backend does not batch {backend.platform} models (from "
                   f"{backend.batching_release}): max_batch_size 0, one image per request with its own batch axis of 1 "
                   f"({backend.why_unbatched}).")
        say(f"  ! {backend.name}: Triton {release} does not batch it (from {backend.batching_release}): max_batch_size 0, "
            f"one image per request ({backend.why_unbatched})")
    plans = _plans(backend, fleet)
    texts = {}
    for rel, kind in variants.items():
        cfg = model_config(backend, spec, entry, options, kind, sha, plans)
        texts[rel] = config_text(cfg, header)
    texts[LABELS_NAME] = "\n".join(spec.labels) + "\n"

    default = model_config(backend, spec, entry, options, default_kind, sha, plans)
    bound = batch_bound(entry)
    limit = f" ({bound.limit})" if default.max_batch_size == bound.max_batch else ""
    summary = (f"{backend.platform}, max_batch_size {default.max_batch_size}{limit}, {options.instances} x "
               f"{kind_name(default.instance_group[0].kind)}")
    if len(default.instance_group) > 1:  # the plan's latency profile (config.profile_groups)
        summary += f" + {default.instance_group[1].count} in the latency profile"
    if plans:
        summary += f", a plan per GPU kind ({', '.join(plans)})"
        return ModelFiles(backend.name, texts, summary, {cc_filename(p.cc): p.path for p in fleet})
    return ModelFiles(backend.name, texts, summary, {backend.filename: manifest.path(entry)})


def _runs(backend: Backend, entry: Entry | None) -> str:
    """Where the model's instances run: its record's ANY, GPU or CPU; a compiled package's device."""
    if backend.runs == COMPILED:
        return GPU if getattr(entry, "device", None) == "gpu" else CPU
    return backend.runs


def _default_kind(where: str, options: RepoOptions) -> str:
    """The instance kind of config.pbtxt: --kind, but a model that runs only on a GPU (a TensorRT plan, a GPU package)
    always on a GPU, one that runs only on the CPU (a CPU variant, a CPU package) on the CPU."""
    if where == CPU:
        return "cpu"
    return options.kind if options.kind != "auto" or where != GPU else "gpu"


def _plans(backend: Backend, fleet: list[FleetPlan]) -> dict[str, str]:
    """A fleet's plan file per compute capability, for the model that serves the plans."""
    return {p.cc: cc_filename(p.cc) for p in fleet} if backend is TRT_MODEL else {}


def _render_ensembles(backends: list[Backend], spec: ModelSpec, manifest: Manifest, options: RepoOptions,
                      sha: str, fleet: list[FleetPlan]) -> list[ModelFiles]:
    """The preprocessing models, and for each classifier one ensemble per preprocessing model."""
    header = (f"Generated by `tritonize repo build` from {spec.arch} ({spec.weights}); manifest sha256 {sha[:12]}.\n"
              "Preprocessing on the server: see tritonize's docs/preprocessing.md.")
    labels = "\n".join(spec.labels) + "\n"
    code = {f"{VERSION}/{rel}": source.read_text() for rel, source in PREPROCESS_CODE.items()}
    largest = max(batch_bound(manifest.artifacts[b.artifact]).max_batch for b in backends)
    models = []
    for pre in PREPROCESSORS:
        pre_cfg = preprocessor_config(pre, spec, options.max_batch or largest, options, sha)
        takes = "encoded images (BYTES)" if pre.form == "bytes" else "UINT8 pixels"
        texts = {CONFIG_NAME: config_text(pre_cfg, header), **code}
        if pre.form == "bytes":
            texts[REQUIREMENTS_NAME] = DECODE_REQUIREMENTS
        models.append(ModelFiles(pre.name, texts,
                                 f"python backend, {pre.input_name} = {takes} -> the classifiers' input, "
                                 f"{options.instances} x KIND_CPU, with this tritonize's preprocessing code"))
        for backend in backends:
            entry = manifest.artifacts[backend.artifact]
            plans = _plans(backend, fleet)
            classifier = model_config(backend, spec, entry, options, _default_kind(_runs(backend, entry), options), sha, plans)
            cfg = ensemble_config(pre.ensemble(backend), pre_cfg, classifier, spec, sha)
            models.append(ModelFiles(cfg.name, {CONFIG_NAME: config_text(cfg, header), LABELS_NAME: labels},
                                     f"ensemble {pre.name} -> {backend.name}, {pre.input_name} in, "
                                     f"{cfg.output[0].name} out, max_batch_size {cfg.max_batch_size}"))
    return models


def _current(repository: Path, models: list[ModelFiles], notes: dict[str, str]) -> bool:
    """The repository holds exactly these models, with these texts and model files, and these notes."""
    if not repository.is_dir() or not_built_notes(repository) != notes:
        return False
    present = sorted(p.name for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
    if present != sorted(m.name for m in models):
        return False
    for model in models:
        directory = repository / model.name
        for rel, text in model.texts.items():
            path = directory / rel
            if not path.is_file() or path.read_text() != text:
                return False
        if not (directory / VERSION).is_dir():
            return False
        texts = {rel.split("/")[1] for rel in model.texts if rel.startswith(f"{VERSION}/")}
        if sorted(p.name for p in (directory / VERSION).iterdir() if p.name not in texts) != sorted(model.files):
            return False  # a plan per GPU kind that is no longer wanted, or one that is new
        for name, artifact in model.files.items():
            if (directory / VERSION / name).stat().st_size != artifact.stat().st_size:
                return False
    return True


def _refuse_to_clobber(repository: Path, overwrite: bool) -> None:
    if repository.exists() and not repository.is_dir():
        raise TritonizeError(f"{repository} exists and is not a directory; choose another REPOSITORY")
    if repository.is_dir() and any(p.is_dir() for p in repository.iterdir()) and not overwrite:
        raise TritonizeError(f"{repository} already holds a different model repository; add --force to replace it")


def _keep_loose_files(old: Path, new: Path) -> None:
    """Carry top-level files (e.g. models/README.md) into the new repository; Triton only reads directories."""
    if old.is_dir():
        for p in old.iterdir():
            if p.is_file() and not p.name.endswith(NOT_BUILT_SUFFIX):  # notes are written anew
                shutil.copy2(p, new / p.name)


def _write(model_dir: Path, model: ModelFiles) -> str | None:
    """Write the model directory; says how the model files were placed (None: it has none)."""
    (model_dir / VERSION).mkdir(parents=True)  # an ensemble's stays empty: Triton needs a version
    for rel, text in model.texts.items():
        (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / rel).write_text(text)
    hows = {_place(artifact, model_dir / VERSION / name) for name, artifact in model.files.items()}
    return " and ".join(sorted(hows)) or None


def _place(src: Path, dst: Path) -> str:
    """Hard-link the model file (no copy of a 500 MB file); copy when linking is impossible."""
    try:
        os.link(src, dst)
        return "hard-linked"
    except OSError:  # another filesystem (EXDEV), or links not permitted
        shutil.copy2(src, dst)
        return "copied"
