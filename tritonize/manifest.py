"""The artifact manifest: the one file through which the stages talk, and its schema.

`<artifacts>/manifest.json` holds the model spec and one entry per artifact:

    key              entry type         written by                      read by
    torchscript      ExportedArtifact   export                          convert (torch-tensorrt < 2.5), repo build/check
    onnx             ExportedArtifact   export                          convert, repo build/check
    exported_program ExportedArtifact   export (asked for: .pt2)        convert (torch-tensorrt's dynamo frontend)
    onnx_opset17     PrecisionVariant   convert (TensorRT 8.x targets)  convert (up-to-date check)
    onnx_fp16        PrecisionVariant   convert (--precision fp16)      convert (up-to-date check)
    onnx_int8        PrecisionVariant   convert (--precision int8)      convert (up-to-date check)
    onnx_int8_cpu    PrecisionVariant   convert cpu (with cpu_serving)  repo build/check (onnx_int8_model)
    tensorrt         Plan               convert                         repo build/check

`model` is null when `convert trt --onnx FILE` converted an ONNX from elsewhere into a directory
without a manifest: its entries take tensor names and shape from the graph (the plan's `input_shape`
detail), and `repo build` refuses it, having no labels or preprocessing to serve.

Every reader goes through `Manifest.load(dir)` and the typed entries below; nothing else indexes
the JSON. The fields other stages read are typed; what a stage measured for people (timings,
tool versions, per-node notes) travels in each entry's `details` and is written at the entry's
top level, so the file stays flat and readable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Mapping

from tritonize.errors import TritonizeError
from tritonize.facts import now_iso, tritonize_version
from tritonize.files import atomic_path, sha256_file
from tritonize.plan_settings import BuildSettings
from tritonize.spec import ModelSpec
from tritonize.verify import VerificationReport

MANIFEST_NAME = "manifest.json"
MOSTLY_FP32 = 0.5  # an fp16/int8 plan that runs more than this share of its layers in FP32 is flagged
SCHEMA_VERSION = 1


class Status(str, Enum):
    """What an entry's artifact is worth, as the stage that wrote it judged."""

    verified = "verified"  # checked against its reference within tolerance
    unverified_synthetic_calibration = "unverified_synthetic_calibration"  # INT8 calibrated on noise
    waiting_for_gpu = "waiting_for_gpu"  # a plan that only a GPU box can build (reproducer written)
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
    """The Triton release a plan is built for."""

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


ENTRY_TYPES: dict[str, type[Entry]] = {
    "torchscript": ExportedArtifact,
    "onnx": ExportedArtifact,
    "exported_program": ExportedArtifact,
    "onnx_opset17": PrecisionVariant,
    "onnx_fp16": PrecisionVariant,
    "onnx_int8": PrecisionVariant,
    "onnx_int8_cpu": PrecisionVariant,
    "tensorrt": Plan,
}


@dataclass
class Manifest:
    """The manifest of one artifacts directory. `load` reads it (or fails with the stage to run);
    `record` adds an entry and saves atomically."""

    directory: Path
    model: ModelSpec | None = None
    artifacts: dict[str, Entry] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> "Manifest":
        """The manifest of `directory`, or a TritonizeError naming the command that creates it."""
        path = manifest_path(directory)
        if not path.is_file():
            raise TritonizeError(f"no manifest at {path}: run `tritonize export --artifacts {Path(directory)}` first")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise TritonizeError(f"cannot read manifest {path}: {e}; re-run `tritonize export --force`") from None
        if not isinstance(data, dict) or "model" not in data:
            raise TritonizeError(f"{path} is not a tritonize manifest; re-run `tritonize export --force`")
        return cls.from_dict(Path(directory), data)

    @classmethod
    def load_or_empty(cls, directory: Path) -> "Manifest":
        return cls.load(directory) if manifest_path(directory).exists() else cls(Path(directory))

    @classmethod
    def from_dict(cls, directory: Path, data: Mapping[str, Any]) -> "Manifest":
        found = data.get("schema_version", SCHEMA_VERSION)
        if found != SCHEMA_VERSION:
            raise TritonizeError(
                f"{manifest_path(directory)} has schema version {found}, this tritonize reads version {SCHEMA_VERSION}: "
                "re-run `tritonize export --force` to rewrite it, or use the tritonize that wrote it"
            )
        artifacts = {}
        for key, entry in (data.get("artifacts") or {}).items():
            kind = ENTRY_TYPES.get(key)
            if kind is None:
                raise TritonizeError(f"{manifest_path(directory)} has an artifact {key!r} this tritonize does not know")
            try:
                artifacts[key] = kind.from_dict(entry)
            except TritonizeError as e:
                raise TritonizeError(f"{manifest_path(directory)}, artifact {key!r}: {e}") from None
        model = None
        if data.get("model"):
            model_data = dict(data["model"])
            if "labels" in data:  # written after the artifacts, to keep the file readable
                model_data["labels"] = data["labels"]
            model = ModelSpec.from_dict(model_data)
        return cls(Path(directory), model, artifacts)

    def to_dict(self, updated: str | None = None) -> dict[str, Any]:
        """What manifest.json holds, in reading order: who wrote it, the model, the artifacts, then the labels
        (1000 lines of them would otherwise stand between the model and its artifacts)."""
        model = self.model.to_dict() if self.model else None
        labels = model.pop("labels", None) if model else None
        data = {"schema_version": SCHEMA_VERSION, "tritonize": tritonize_version()}
        if updated:
            data["updated"] = updated
        data["model"] = model
        data["artifacts"] = {key: entry.to_dict() for key, entry in self.artifacts.items()}
        if labels is not None:
            data["labels"] = labels
        return data

    def save(self) -> Path:
        """Write atomically (temporary file, then rename)."""
        data = self.to_dict(updated=now_iso())
        path = manifest_path(self.directory)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(data, indent=2) + "\n")
        return path

    def record(self, key: str, entry: Entry) -> None:
        """Add or replace one entry and save."""
        if not isinstance(entry, ENTRY_TYPES[key]):
            raise TypeError(f"manifest key {key!r} takes a {ENTRY_TYPES[key].__name__}, not a {type(entry).__name__}")
        self.artifacts[key] = entry
        self.save()

    def publish(self, key: str, entry: Entry, staged: Path) -> Path:
        """Put the `staged` file in place as the entry's file, together with the entry.

        Three steps, each atomic: the entry is recorded as `pending` (with the staged file's hash), the
        file is renamed over the previous one, the entry is recorded with its own status. Killed at any
        point, the manifest never vouches for a file it does not describe: the previous entry still goes
        with the previous file, or the entry is `pending`, which `file_problem` (and so every
        up-to-date check and `repo check`) reports until the stage runs again.
        """
        final = self.path(entry)
        self.record(key, replace(entry, status=Status.pending))
        os.replace(staged, final)
        self.record(key, entry)
        return final

    def file_problem(self, entry: Entry) -> str | None:
        """Why the entry's file on disk is not the file it describes (None when it is)."""
        path = self.path(entry)
        if entry.status is Status.pending:
            return f"{path.name} was being published when its stage was interrupted"
        if not path.is_file():
            return f"{path.name} is missing"
        found = sha256_file(path)
        if found != entry.sha256:  # type: ignore[attr-defined]
            return f"{path.name} has sha256 {found[:12]}, the manifest records {entry.sha256[:12]}"  # type: ignore[attr-defined]
        return None

    def sha256(self) -> str:
        """The hash of the manifest file as saved (the repository records which manifest it came from)."""
        return sha256_file(manifest_path(self.directory))

    @property
    def spec(self) -> ModelSpec:
        if self.model is None:
            raise TritonizeError(
                f"{manifest_path(self.directory)} describes no torchvision model (its plan comes from an ONNX from "
                "elsewhere, without labels or preprocessing): run `tritonize export` for a model tritonize can serve, "
                "or serve the plan with your own config.pbtxt"
            )
        return self.model

    # -- typed readers: the ExportedArtifact or Plan of a key, None when absent ---------------------
    torchscript = property(lambda self: self.artifacts.get("torchscript"))
    onnx = property(lambda self: self.artifacts.get("onnx"))
    exported_program = property(lambda self: self.artifacts.get("exported_program"))  # torch.export's .pt2
    plan = property(lambda self: self.artifacts.get("tensorrt"))

    def variant(self, precision: str) -> PrecisionVariant | None:
        return self.artifacts.get(variant_key(precision))  # type: ignore[return-value]

    def path(self, entry: Entry) -> Path:
        """Where an entry's file is."""
        return self.directory / entry.file  # type: ignore[attr-defined]


def variant_key(precision: str) -> str:
    return f"onnx_{precision}"


def manifest_path(artifacts_dir: Path) -> Path:
    return Path(artifacts_dir) / MANIFEST_NAME


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
