"""The manifest's schema: one typed entry per kind of artifact and what the entries hold (manifest.py reads and
writes the file; every reader imports these through it)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, ClassVar, Mapping

from tritonize.errors import TritonizeError
from tritonize.plan_settings import BuildSettings
from tritonize.verify import VerificationReport

MOSTLY_FP32 = 0.5  # an fp16/int8 plan that runs more than this share of its layers in FP32 is flagged


class Status(str, Enum):
    """What an entry's artifact is worth, as the stage that wrote it judged."""

    verified = "verified"  # checked against its reference within tolerance
    unverified_synthetic_calibration = "unverified_synthetic_calibration"  # INT8 calibrated on noise
    waiting_for_gpu = "waiting_for_gpu"  # what only a GPU box can build: a plan (reproducer written), a GPU package
    built = "built"  # a TensorRT plan built and verified
    failed = "failed"  # a build that did not produce a usable artifact
    pending = "pending"  # being published (see Manifest.publish): describes no file on disk yet


@dataclass(frozen=True)
class Profile:
    """The one optimization profile on the batch axis of a TensorRT plan."""

    min: int = 1
    opt: int = 16
    max: int = 32

    def __post_init__(self):
        if self.min < 1:
            raise TritonizeError(f"--min-batch must be >= 1, got {self.min}")
        if not self.min <= self.opt <= self.max:
            raise TritonizeError(f"a batch profile must satisfy min <= opt <= max, got {self.min}/{self.opt}/{self.max}")

    def to_dict(self) -> dict:
        return {"min": self.min, "opt": self.opt, "max": self.max}


@dataclass(frozen=True)
class FileRef:
    """A file (relative to the artifacts directory) and the sha256 it had when it was used."""

    file: str
    sha256: str


@dataclass(frozen=True)
class Target:
    """The Triton release a plan or package is made for."""

    triton_release: str
    image: str
    tensorrt: str | None = None


PlanOptions = BuildSettings  # a plan's builder settings, recorded as its `options` (plan_settings.py)


@dataclass(frozen=True)
class Entry:
    """Fields every artifact entry has; subclasses add what other stages read."""

    status: Status
    details: Mapping[str, Any] = field(default_factory=dict, kw_only=True)  # figures for people, not for stages

    _nested: ClassVar[dict[str, Any]] = {}  # field name -> type with from_dict/to_dict, or a dataclass

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "details":
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = _plain(value)
        return {**out, **{k: _plain(v) for k, v in self.details.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Entry":
        known = {f.name for f in fields(cls)} - {"details"}
        values: dict[str, Any] = {}
        for name in known & set(data):
            value = data[name]
            kind = cls._nested.get(name)
            if value is not None and kind is not None:
                value = kind.from_dict(value) if hasattr(kind, "from_dict") else kind(**value)
            values[name] = value
        try:
            values["status"] = Status(values["status"])
        except (KeyError, ValueError):
            raise TritonizeError(f"manifest entry has an unknown status {data.get('status')!r}; re-run the stage that writes it") from None
        try:
            return cls(**values, details={k: v for k, v in data.items() if k not in known})
        except TypeError as e:
            raise TritonizeError(f"manifest entry is incomplete ({e}); re-run the stage that writes it") from None

    def with_details(self, **details) -> "Entry":
        return replace(self, details={**self.details, **details})


@dataclass(frozen=True)
class ExportedArtifact(Entry):
    """`torchscript` / `onnx` / `exported_program`: an export of the model, verified against PyTorch eager."""

    format: str  # "torchscript" | "onnx" | "exported_program"
    file: str
    size_bytes: int
    sha256: str
    input_name: str
    output_name: str
    verification: VerificationReport
    options: Mapping[str, Any]  # what, besides the spec, decided the content (export's up-to-date check)
    created: str
    tools: Mapping[str, str] = field(default_factory=dict)  # what exported it: torch's version (torch-tensorrt reads it)

    _nested: ClassVar[dict[str, Any]] = {"verification": VerificationReport}


@dataclass(frozen=True)
class Gate:
    """One gate a precision variant must pass to be served on the CPU in place of FP32."""

    passed: bool
    reason: str  # one line for people: what was measured, against what threshold
    figures: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServingGates:
    """`convert cpu`'s verdict: agreement with FP32 on held-out real images, and throughput through the
    server vs FP32 at the same batch and threads. `repo build` serves the variant only when both passed."""

    agreement: Gate
    speed: Gate
    fp32: FileRef  # the FP32 ONNX both gates compared with
    settings: Mapping[str, Any]  # how the speed was measured (batch, concurrency, threads, engine, ...)
    measured: str

    @property
    def passed(self) -> bool:
        return self.agreement.passed and self.speed.passed

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ServingGates":
        return cls(agreement=Gate(**data["agreement"]), speed=Gate(**data["speed"]), fp32=FileRef(**data["fp32"]),
                   settings=data["settings"], measured=data["measured"])


@dataclass(frozen=True)
class PrecisionVariant(Entry):
    """`onnx_fp16` / `onnx_int8` (for TensorRT) / `onnx_int8_cpu` (for onnxruntime on the CPU): the FP32 ONNX
    with its precision in the graph, verified on the CPU. `onnx_opset17`: the FP32 ONNX converted to the
    opset TensorRT 8.x's parser reads, verified the same way."""

    precision: str  # "fp32" (opset variant) | "fp16" | "int8"
    file: str
    size_bytes: int
    sha256: str
    input_name: str
    output_name: str
    verification: VerificationReport
    source: FileRef  # the FP32 ONNX it was made from
    inputs: Mapping[str, Any]  # what the calibration / range data were (convert's up-to-date check)
    created: str
    cpu_serving: ServingGates | None = None  # `convert cpu`'s gates, once measured
    fp32_nodes: tuple[str, ...] | None = None  # FP16: the nodes kept FP32 (FP16 would overflow there); builders pin them

    _nested: ClassVar[dict[str, Any]] = {"verification": VerificationReport, "source": FileRef, "cpu_serving": ServingGates}

    def __post_init__(self):
        if self.fp32_nodes is not None:
            object.__setattr__(self, "fp32_nodes", tuple(self.fp32_nodes))


@dataclass(frozen=True)
class LayerPrecisions:
    """How many layers of a built engine run in each precision, and which stayed FP32 (read by convert/layers.py)."""

    counts: Mapping[str, int]  # precision -> layers (math layers only: FP32, FP16, BF16, FP8, INT8)
    fp32_layers: tuple[str, ...]  # the first few of them
    source: str  # what read them: "IEngineInspector" | "trtexec --exportLayerInfo"

    total = property(lambda self: sum(self.counts.values()))
    fp32_share = property(lambda self: self.counts.get("FP32", 0) / self.total if self.total else 0.0)

    def summary(self) -> str:
        parts = ", ".join(f"{n} {p}" for p, n in sorted(self.counts.items(), key=lambda kv: -kv[1]))
        return f"{parts} ({self.fp32_share:.0%} of {self.total} layers in FP32, read with {self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "fp32_layers": list(self.fp32_layers), "source": self.source}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LayerPrecisions":
        return cls(dict(data["counts"]), tuple(data.get("fp32_layers", ())), data["source"])


@dataclass(frozen=True)
class Plan(Entry):
    """`tensorrt`: the TensorRT engine, built (file, version, verification) or waiting for a GPU box."""

    precision: str
    profile: Profile
    input_name: str
    output_name: str
    onnx: FileRef  # the precision-prepared ONNX the engine is (to be) built from
    target: Target
    options: PlanOptions
    reproducer: str
    gpu_command: str
    created: str
    builder: str | None = None
    # only once built:
    file: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    tensorrt_version: str | None = None
    verification: VerificationReport | None = None
    error: str | None = None  # why a build failed
    layers: LayerPrecisions | None = None  # what the built engine's layers run in (convert/layers.py)
    latency: Profile | None = None  # a second optimization profile (index 1) for small batches: --latency-profile
    latency_verification: VerificationReport | None = None  # the plan checked in that profile, at batches inside it

    _nested: ClassVar[dict[str, Any]] = {
        "profile": Profile, "onnx": FileRef, "target": Target, "options": PlanOptions, "verification": VerificationReport,
        "layers": LayerPrecisions, "latency": Profile, "latency_verification": VerificationReport}

    @property
    def profiles(self) -> list[Profile]:
        """The plan's optimization profiles in index order: the throughput profile 0, then the latency profile."""
        return [self.profile, *([self.latency] if self.latency else [])]


@dataclass(frozen=True)
class Package(Entry):
    """`aoti`: an AOTInductor package of the ExportedProgram, compiled for one device and one Triton release: verified
    here, or waiting for the GPU box that compiles a GPU package."""

    device: str  # "cpu" | "gpu": what it is compiled for, so where its instances run
    source: FileRef  # the ExportedProgram it is (to be) compiled from
    compiler: str  # the torch that compiles it: with source.sha256, what decides whether it is up to date
    target: Target  # the Triton release whose pytorch backend serves it
    max_batch: int  # the largest batch it is verified at
    input_name: str  # as that backend names the package's tensors (from its call spec)
    output_name: str
    gpu_command: str  # what compiles it on a GPU box
    created: str
    # only once compiled:
    file: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    verification: VerificationReport | None = None

    _nested: ClassVar[dict[str, Any]] = {"source": FileRef, "target": Target, "verification": VerificationReport}

    def same_job(self, other: "Package") -> bool:
        """Compiled (or to be) from the same program by the same compiler, for the same device, release and batch."""
        return (self.source, self.compiler, self.device, self.target.triton_release, self.max_batch) == (
            other.source, other.compiler, other.device, other.target.triton_release, other.max_batch)


ENTRY_TYPES: dict[str, type[Entry]] = {
    "torchscript": ExportedArtifact,
    "onnx": ExportedArtifact,
    "exported_program": ExportedArtifact,
    "onnx_opset17": PrecisionVariant,
    "onnx_fp16": PrecisionVariant,
    "onnx_int8": PrecisionVariant,
    "onnx_int8_cpu": PrecisionVariant,
    "tensorrt": Plan,
    "aoti": Package,
}


def _plain(value: Any) -> Any:
    """JSON-shaped values: enums by value, dataclasses by their dict."""
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
