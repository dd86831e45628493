"""An emulated plan: a small header, then the ONNX that onnxruntime executes.

    MAGIC, 8-byte little-endian header length, header (JSON), ONNX bytes

The header holds what TensorRT's own plans carry and the rules need: the TensorRT version, whether the
plan is version-compatible, its hardware-compatibility level and the compute capability it was built
on, the optimization profiles, the precision settings and the I/O tensors.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field

MAGIC = b"TRITONIZE-EMULATED-TENSORRT-PLAN\n"


@dataclass
class Tensor:
    name: str
    dtype: str  # DataType member name, e.g. "FLOAT"
    shape: list[int]  # -1: dynamic


@dataclass
class Header:
    tensorrt_version: str
    version_compatible: bool
    hardware_compatibility: str  # HardwareCompatibilityLevel member name
    compute_capability: list[int]
    profiles: list[dict]  # per profile: input name -> [min, opt, max]
    inputs: list[Tensor]
    outputs: list[Tensor]
    precision: dict  # builder flags set, strongly typed, layer precisions
    builder: dict = field(default_factory=dict)  # optimization level, workspace, timing-cache reuse

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Header":
        raw = json.loads(data)
        raw["inputs"] = [Tensor(**t) for t in raw["inputs"]]
        raw["outputs"] = [Tensor(**t) for t in raw["outputs"]]
        return cls(**raw)


def write(header: Header, onnx: bytes) -> bytes:
    head = header.to_json()
    return MAGIC + struct.pack("<Q", len(head)) + head + onnx


def read(blob: bytes) -> tuple[Header, bytes]:
    """The header and ONNX of a plan; ValueError when `blob` is not one."""
    if not blob.startswith(MAGIC):
        raise ValueError("Serialization assertion: magic tag does not match (not a plan of this TensorRT)")
    start = len(MAGIC) + 8
    (length,) = struct.unpack("<Q", blob[len(MAGIC):start])
    try:
        header = Header.from_json(blob[start:start + length])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"Serialization assertion: corrupt plan header ({e})") from None
    return header, blob[start + length:]
