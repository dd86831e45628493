"""What the user asked the convert stage for, validated once, with string-valued enums."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.manifest import Profile
from tritonize.options import Precision, int_items  # fp16: mixed; int8: explicit Q/DQ calibrated on images
from tritonize.plan_settings import BuildSettings


class BuilderName(str, Enum):
    auto = "auto"
    trtexec = "trtexec"
    tensorrt = "tensorrt"
    torch_tensorrt = "torch-tensorrt"
    container = "container"


SYNTHETIC = "synthetic"  # --calib-images value that opts into noise calibration
AUTO_RELEASE = "auto"  # --triton-release auto: the release whose TensorRT is this machine's
_RELEASE = re.compile(r"^\d{2}\.\d{2}$")


@dataclass(frozen=True)
class ConvertOptions:
    profile: Profile = Profile()
    latency: Profile | None = None  # a second optimization profile (index 1) for small batches
    precision: Precision = Precision.fp16
    builder: BuilderName = BuilderName.auto
    settings: BuildSettings = BuildSettings()  # what changes the engine besides profile and precision (settings.py)
    triton_release: str | None = None  # None: the release this machine's TensorRT serves, else the newest
    calib_images: Path | None = None
    calib_count: int = 32
    onnx: Path | None = None  # default: the manifest's ONNX export
    dry_run: bool = False
    force: bool = False  # redo precision preparation and the build even when the manifest says they are current
    build_timeout_s: int = 3600

    def __post_init__(self):
        object.__setattr__(self, "precision", _enum(Precision, self.precision, "--precision"))
        object.__setattr__(self, "builder", _enum(BuilderName, self.builder, "--builder"))
        if self.triton_release not in (None, AUTO_RELEASE) and not _RELEASE.match(self.triton_release):
            raise TritonizeError(f"--triton-release must look like YY.MM (e.g. 24.10) or be `auto`, got {self.triton_release!r}")
        if self.calib_count < 1:
            raise TritonizeError(f"--calib-count must be >= 1, got {self.calib_count}")
        if self.precision is Precision.int8 and self.calib_images is None:
            raise TritonizeError(
                "--precision int8 needs --calib-images DIR (real images of the kind the model will see; "
                f"`--calib-images {SYNTHETIC}` calibrates on noise and leaves INT8 accuracy unknown)"
            )
        if self.calib_images is not None and not self.synthetic_calibration and not Path(self.calib_images).is_dir():
            raise TritonizeError(f"--calib-images {self.calib_images} is not a directory of images")
        if self.latency is not None and self.latency == self.profile:
            raise TritonizeError(f"--latency-profile {latency_text(self.latency)} is the plan's first profile: give a "
                                 "different one for small batches (e.g. 1,2,4), or leave it out")
        if self.build_timeout_s < 1:
            raise TritonizeError(f"build timeout must be >= 1 s, got {self.build_timeout_s}")

    @property
    def synthetic_calibration(self) -> bool:
        return self.calib_images is not None and str(self.calib_images) == SYNTHETIC

    def to_argv(self) -> list[str]:
        """The `tritonize convert trt` options that ask for these settings: the profile, the precision and the
        target release always, every other setting where it differs from its default above (the one place
        the defaults are stated; the CLI takes its defaults from here too). --dry-run and --force are the
        caller's business."""
        p, default = self.profile, ConvertOptions()
        argv = ["--min-batch", str(p.min), "--opt-batch", str(p.opt), "--max-batch", str(p.max), "--precision", self.precision.value]
        if self.latency is not None:
            argv += ["--latency-profile", latency_text(self.latency)]
        if self.triton_release is not None:
            argv += ["--triton-release", self.triton_release]
        if self.calib_images is not None:
            argv += ["--calib-images", SYNTHETIC if self.synthetic_calibration else str(self.calib_images)]
        changed = {
            "--calib-count": (self.calib_count, default.calib_count, str(self.calib_count)),
            "--builder": (self.builder, default.builder, self.builder.value),
            "--onnx": (self.onnx, default.onnx, str(self.onnx)),
        }
        for flag, (value, default_value, text) in changed.items():
            if value != default_value:
                argv += [flag, text]
        argv += self.settings.to_argv()
        return argv


def latency_profile(text: str | None) -> Profile | None:
    """`--latency-profile MIN,OPT,MAX` -> Profile (None when not given)."""
    if text is None:
        return None
    values = int_items(text, "--latency-profile")
    if len(values) != 3:
        raise TritonizeError(f"--latency-profile takes MIN,OPT,MAX (e.g. 1,2,4), got {text!r}")
    try:
        return Profile(*values)
    except TritonizeError:
        raise TritonizeError(f"--latency-profile must satisfy 1 <= MIN <= OPT <= MAX, got {text!r}") from None


def latency_text(profile: Profile) -> str:
    return f"{profile.min},{profile.opt},{profile.max}"


def _enum(kind, value, option: str):
    try:
        return kind(value.value if isinstance(value, Enum) else value)
    except ValueError:
        choices = "|".join(m.value for m in kind)
        raise TritonizeError(f"unknown {option} {value!r}: choose {choices}") from None
