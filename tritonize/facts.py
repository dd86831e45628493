"""What every stage records beside its outputs: a file's name, size and sha256, the time, and the versions of
tritonize and the tools that made it."""

from __future__ import annotations

from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tritonize.files import sha256_file


def file_facts(path: Path) -> dict[str, Any]:
    """Name, size and sha256 of a published file, as every artifact entry records them."""
    path = Path(path)
    return {"file": path.name, "size_bytes": path.stat().st_size, "sha256": sha256_file(path)}


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def tritonize_version() -> str:
    try:
        return version("tritonize")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def tool_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named distributions (missing ones are left out)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found
