"""The builder settings of a TensorRT plan (besides profile and precision), as one record: parsed from the CLI once
(`from_cli`), written back out (`to_argv`: the GPU box's command), recorded as the manifest's plan `options`, carried
by the build job to every builder, and gated by one table of the TensorRT version each needs (`NEEDS`), which every
builder reads through `needs()` (Polygraphy's TrtConfigArgs is the model: one group that declares, parses and writes
itself out).

It lives beside the manifest, whose plans record it. A new setting is a field and its NEEDS entry here, its option
in convert/cli.py, and its use in each builder:
trtexec.py (the flag), builders.py (Polygraphy's CreateConfig), torch_trt.py (its argument, or a refusal).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tritonize.errors import TritonizeError

# trtexec's --hardwareCompatibilityLevel values (8.6+): "ampere+" runs on any Ampere-or-newer GPU.
HARDWARE_COMPATIBILITY = ("none", "ampere+")


@dataclass(frozen=True)
class Setting:
    option: str  # the `convert trt` option
    tensorrt: tuple[int, int] | None = None  # the TensorRT that first has it (None: every supported one)


# field -> its option and the TensorRT it needs away from its default (trtexec's sampleOptions.cpp, v8.6.1:
# --builderOptimizationLevel, --versionCompatible and --hardwareCompatibilityLevel are new in 8.6).
NEEDS = {
    "workspace_mib": Setting("--workspace"),
    "timing_cache": Setting("--timing-cache"),
    "opt_level": Setting("--opt-level", (8, 6)),
    "version_compatible": Setting("--version-compatible", (8, 6)),
    "hardware_compatibility": Setting("--hardware-compatibility", (8, 6)),
}


@dataclass(frozen=True)
class BuildSettings:
    """Builder settings that change the engine; the manifest records them as the plan's `options`."""

    workspace_mib: int = 4096
    # As the user named it (None: timing.cache in the artifacts); the build job's and the manifest's: relative to the
    # artifacts directory, or absolute (shared across builds).
    timing_cache: str | None = None
    opt_level: int = 3  # TensorRT's own default builder optimization level
    version_compatible: bool = False
    hardware_compatibility: str = "none"

    def __post_init__(self):
        if not 0 <= self.opt_level <= 5:
            raise TritonizeError(f"--opt-level must be 0..5 (TensorRT builder optimization level), got {self.opt_level}")
        if self.hardware_compatibility not in HARDWARE_COMPATIBILITY:
            raise TritonizeError(f"--hardware-compatibility {self.hardware_compatibility!r} is not a TensorRT level: "
                                 f"choose {', '.join(HARDWARE_COMPATIBILITY)}")
        if self.workspace_mib < 1:
            raise TritonizeError(f"the builder workspace must be at least 1 MiB, got {self.workspace_mib}")

    @classmethod
    def from_cli(cls, workspace_gib: float = 4.0, timing_cache=None, opt_level: int = 3,
                 version_compatible: bool = False, hardware_compatibility: str = "none") -> "BuildSettings":
        """The settings `convert trt`'s options ask for (--workspace in GiB; --timing-cache a path, or None)."""
        if not 0 < workspace_gib <= 1024:
            raise TritonizeError(f"--workspace must be a size in GiB between 0 and 1024, got {workspace_gib}")
        return cls(workspace_mib=max(1, int(round(workspace_gib * 1024))),
                   timing_cache=None if timing_cache is None else str(timing_cache), opt_level=opt_level,
                   version_compatible=version_compatible, hardware_compatibility=hardware_compatibility)

    @property
    def workspace_gib(self) -> float:
        return self.workspace_mib / 1024

    def changed(self) -> list[str]:
        """The fields set away from their defaults."""
        default = BuildSettings()
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)]

    def to_argv(self) -> list[str]:
        """The `convert trt` options that ask for these settings (only those away from their defaults)."""
        text = {"workspace_mib": f"{self.workspace_gib:g}", "timing_cache": self.timing_cache,
                "opt_level": str(self.opt_level), "hardware_compatibility": self.hardware_compatibility}
        argv = []
        for name in self.changed():
            argv += [NEEDS[name].option] if name == "version_compatible" else [NEEDS[name].option, text[name]]
        return argv

    def needs(self, tensorrt_version: str) -> str | None:
        """Why TensorRT `tensorrt_version` cannot build with these settings (NEEDS), or None."""
        have = tuple(int(p) for p in str(tensorrt_version).split(".")[:2])
        missing = [name for name in self.changed() if NEEDS[name].tensorrt and have < NEEDS[name].tensorrt]
        if not missing:
            return None
        first = ".".join(map(str, max(NEEDS[name].tensorrt for name in missing)))
        return (f"{'/'.join(NEEDS[name].option for name in missing)} need{'s' if len(missing) == 1 else ''} "
                f"TensorRT {first} or newer, the build has {tensorrt_version}")
