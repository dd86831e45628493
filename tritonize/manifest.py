"""The artifact manifest: the one file through which the stages talk.

`<artifacts>/manifest.json` holds
  - "model":     the ModelSpec (arch, weights, tensor names, input shape, preprocessing, labels);
  - "artifacts": one entry per artifact key ("torchscript", "onnx", "onnx_fp16", "onnx_int8",
                 "tensorrt", ...) with at least "file", "status", and what the stage measured
                 (size, sha256, tool versions, verification figures, timings).
Each stage reads what it needs from here and records what it did with `record_artifact`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, sha256_file

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1


def manifest_path(artifacts_dir: Path) -> Path:
    return Path(artifacts_dir) / MANIFEST_NAME


def load_manifest(artifacts_dir: Path) -> dict[str, Any]:
    """Read the manifest, or fail with a line telling the user which stage creates it."""
    path = manifest_path(artifacts_dir)
    if not path.is_file():
        raise TritonizeError(
            f"no manifest at {path}: run `tritonize export --out {Path(artifacts_dir)}` first"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TritonizeError(f"cannot read manifest {path}: {e}; re-run `tritonize export --force`") from None
    if not isinstance(data, dict) or "model" not in data:
        raise TritonizeError(f"{path} is not a tritonize manifest; re-run `tritonize export --force`")
    return data


def load_manifest_or_empty(artifacts_dir: Path) -> dict[str, Any]:
    path = manifest_path(artifacts_dir)
    return load_manifest(artifacts_dir) if path.exists() else {}


def save_manifest(artifacts_dir: Path, data: dict[str, Any]) -> Path:
    """Write the manifest atomically (temporary file, then rename)."""
    data = {"schema_version": SCHEMA_VERSION, **data}
    data["updated"] = now_iso()
    path = manifest_path(artifacts_dir)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def record_artifact(artifacts_dir: Path, key: str, entry: dict[str, Any], model: dict | None = None) -> None:
    """Add or replace one artifact entry (and optionally the model spec) in the manifest."""
    data = load_manifest_or_empty(artifacts_dir)
    if model is not None:
        data["model"] = model
    data.setdefault("artifacts", {})[key] = entry
    save_manifest(artifacts_dir, data)


def file_facts(path: Path) -> dict[str, Any]:
    """Name, size and sha256 of a published file, as every artifact entry records them."""
    path = Path(path)
    return {"file": path.name, "size_bytes": path.stat().st_size, "sha256": sha256_file(path)}


def manifest_sha256(artifacts_dir: Path) -> str:
    return sha256_file(manifest_path(artifacts_dir))


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def tool_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named distributions (missing ones are left out)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found

