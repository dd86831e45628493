"""What the serve stage needs to know about a model repository before a server sees it."""

from __future__ import annotations

import os
from pathlib import Path

from tritonize.errors import TritonizeError

CPU_CONFIG_NAME = "cpu"
DEFAULT_CONFIG_NAME = "config"  # names config.pbtxt itself: no --model-config-name


def validate_repository(repository: Path) -> list[str]:
    """Model names of `repository`, after checking it exists and every config parses.

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
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    for model in models:
        if not (model / "config.pbtxt").is_file():
            raise TritonizeError(f"invalid model repository {repository}: {model.name}/ has no config.pbtxt")
        for config_file in [model / "config.pbtxt", *sorted((model / "configs").glob("*.pbtxt"))]:
            try:
                text_format.Parse(config_file.read_text(), model_config_pb2.ModelConfig())
            except text_format.ParseError as e:
                raise TritonizeError(f"invalid model config {config_file}: {e}; fix it or rebuild the repository") from None
    return [m.name for m in models]


def has_config_variant(repository: Path, name: str) -> bool:
    """True when some model has `configs/<name>.pbtxt` (Triton's --model-config-name)."""
    return any(Path(repository).glob(f"*/configs/{name}.pbtxt"))


def gpu_visible() -> bool:
    """Whether a CUDA GPU is visible to processes started from here (cheap: no CUDA, no torch)."""
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    if devices is not None and devices.strip() in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))
