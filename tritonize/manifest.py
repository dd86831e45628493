"""The artifact manifest: the one file through which the stages talk, and its schema.

`<artifacts>/manifest.json` holds the model spec and one entry per artifact:

    key              entry type         written by                      read by
    torchscript      ExportedArtifact   export                          convert (torch-tensorrt < 2.5), repo build/check
    onnx             ExportedArtifact   export                          convert, repo build/check
    exported_program ExportedArtifact   export (asked for: .pt2)        convert trt (torch-tensorrt's dynamo frontend), convert aoti
    onnx_opset17     PrecisionVariant   convert (TensorRT 8.x targets)  convert (up-to-date check)
    onnx_fp16        PrecisionVariant   convert (--precision fp16)      convert (up-to-date check)
    onnx_int8        PrecisionVariant   convert (--precision int8)      convert (up-to-date check)
    onnx_int8_cpu    PrecisionVariant   convert cpu (with cpu_serving)  repo build/check (onnx_int8_model)
    tensorrt         Plan               convert                         repo build/check
    aoti             Package            convert aoti                    repo build/check

`model` is null when `convert trt --onnx FILE` converted an ONNX from elsewhere into a directory
without a manifest: its entries take tensor names and shape from the graph (the plan's `input_shape`
detail), and `repo build` refuses it, having no labels or preprocessing to serve.

Every reader goes through `Manifest.load(dir)` and the typed entries (entries.py); nothing else indexes
the JSON. The fields other stages read are typed; what a stage measured for people (timings,
tool versions, per-node notes) travels in each entry's `details` and is written at the entry's
top level, so the file stays flat and readable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tritonize.entries import (  # noqa: F401 - the schema's names, imported from here by every reader
    ENTRY_TYPES,
    MOSTLY_FP32,
    Entry,
    ExportedArtifact,
    FileRef,
    Gate,
    LayerPrecisions,
    Package,
    Plan,
    PlanOptions,
    PrecisionVariant,
    Profile,
    ServingGates,
    Status,
    Target,
)
from tritonize.errors import TritonizeError
from tritonize.facts import now_iso, tritonize_version
from tritonize.files import atomic_path, sha256_file
from tritonize.spec import ModelSpec

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1


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
    aoti = property(lambda self: self.artifacts.get("aoti"))  # the AOTInductor package

    def variant(self, precision: str) -> PrecisionVariant | None:
        return self.artifacts.get(variant_key(precision))  # type: ignore[return-value]

    def path(self, entry: Entry) -> Path:
        """Where an entry's file is."""
        return self.directory / entry.file  # type: ignore[attr-defined]


def variant_key(precision: str) -> str:
    return f"onnx_{precision}"


def manifest_path(artifacts_dir: Path) -> Path:
    return Path(artifacts_dir) / MANIFEST_NAME
