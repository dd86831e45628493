"""The Triton release table: which container release serves which TensorRT / ONNX Runtime / PyTorch / CUDA versions.

The table is data (`tritonize/data/triton_releases.json`), with the source of each column named in
the file. Figures no stored NVIDIA source confirmed are null: callers must treat None as "unknown",
never as "compatible".

TensorRT matching rule (`releases_for_tensorrt`): a serialized plan only deserializes in the exact
TensorRT it was built with (without version-compatible builds). Versions are compared on
major.minor.patch, and also on the build number when both sides name one: Triton refuses a plan
built with 8.6.1.6 when it runs 8.6.1.2 ("expecting library version 8.6.1.2 got 8.6.1.6",
triton-inference-server/server#5975), so "8.6.3" matches "8.6.3.1" but "8.6.1.2" does not
match "8.6.1.6".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources

from tritonize.errors import TritonizeError

DATA_FILE = "triton_releases.json"


@dataclass(frozen=True)
class Release:
    release: str  # container tag, "YY.MM": nvcr.io/nvidia/tritonserver:<release>-py3
    triton: str | None  # Triton server version, "2.51.0"
    tensorrt: str | None  # TensorRT in the -py3 container: the version a plan must be built with
    onnxruntime: str | None
    pytorch: str | None
    cuda: str | None
    trtllm_tensorrt: str | None = None  # TensorRT in the -trtllm-python-py3 container (differs!)
    trtllm_pytorch: str | None = None

    @property
    def image(self) -> str:
        return f"nvcr.io/nvidia/tritonserver:{self.release}-py3"


@lru_cache(maxsize=1)
def load_releases() -> list[Release]:
    """All known releases, oldest first."""
    text = resources.files("tritonize").joinpath("data").joinpath(DATA_FILE).read_text()
    names = {f.name for f in fields(Release)}
    rows = [Release(**{k: v for k, v in row.items() if k in names}) for row in json.loads(text)["releases"]]
    return sorted(rows, key=lambda r: r.release)


def source() -> dict:
    """Where each column of the table comes from (as written in the data file)."""
    return json.loads(resources.files("tritonize").joinpath("data").joinpath(DATA_FILE).read_text())["source"]


def release_info(release: str) -> Release:
    for r in load_releases():
        if r.release == release.strip():
            return r
    known = ", ".join(r.release for r in load_releases())
    raise TritonizeError(f"unknown Triton release {release!r}: give a container release YY.MM, one of {known}")


def latest_release() -> Release:
    return load_releases()[-1]


def _version_parts(version: str) -> tuple[int, ...]:
    """Leading numeric components: "10.5.0.18" -> (10, 5, 0, 18); "9.3.0.post12.dev1" -> (9, 3, 0)."""
    parts = []
    for piece in str(version).strip().split("."):
        m = re.match(r"\d+$", piece)
        if not m:
            break
        parts.append(int(piece))
    return tuple(parts)


def tensorrt_matches(built_with: str, served_by: str) -> bool:
    """True when a plan built with TensorRT `built_with` deserializes in TensorRT `served_by`."""
    a, b = _version_parts(built_with), _version_parts(served_by)
    if len(a) < 3 or len(b) < 3 or a[:3] != b[:3]:
        return False
    return len(a) < 4 or len(b) < 4 or a[3] == b[3]


def releases_for_tensorrt(version: str) -> list[Release]:
    """Releases whose -py3 container runs a plan built with TensorRT `version` (rule: module doc)."""
    if len(_version_parts(version)) < 3:
        raise TritonizeError(f"TensorRT version {version!r} needs at least major.minor.patch (e.g. 10.5.0)")
    return [r for r in load_releases() if r.tensorrt and tensorrt_matches(version, r.tensorrt)]
