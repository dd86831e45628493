"""The emulated TensorRT's version rules, as NVIDIA documents them (each rule's sources are in
tests/data/tensorrt_emulation_rules.json). Written from that documentation, not from
tritonize/releases.py; tests/emulation/test_rules.py cross-checks the two.

Pure functions of version strings, so that `make mutation` can mutate them: each returns None
when TensorRT would accept, else the reason it refuses, as one line.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "tensorrt_emulation_rules.json"


@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads(DATA.read_text())


def parts(version: str) -> tuple[int, ...]:
    """'10.5.0.18' -> (10, 5, 0, 18); leading numeric parts only."""
    found = []
    for piece in str(version).split("."):
        if not re.fullmatch(r"\d+", piece):
            break
        found.append(int(piece))
    return tuple(found)


def deserialize_problem(plan: str, runtime: str, version_compatible: bool, host_code_allowed: bool) -> str | None:
    """Why TensorRT `runtime` refuses a plan built with TensorRT `plan`, or None."""
    rule = data()["deserialize"]
    built, running = parts(plan), parts(runtime)
    if built == running:
        if version_compatible and not host_code_allowed:
            return ("the plan is version-compatible: it carries the lean runtime, which runs only with "
                    "engine_host_code_allowed = True")
        return None
    if not version_compatible:
        return f"the plan was built with TensorRT {plan}; this runtime is {runtime} (a plan loads only in the version that built it)"
    floor = tuple(rule["version_compatible_from"])
    if built[:2] < floor or running[:2] < floor:
        return f"version compatibility needs TensorRT {floor[0]}.{floor[1]} or newer on both sides (plan {plan}, runtime {runtime})"
    if running < built:
        return f"a version-compatible plan of TensorRT {plan} does not load in an older runtime ({runtime})"
    if built[0] != running[0] and [built[0], running[0]] not in rule["cross_major"]:
        return f"a version-compatible plan of TensorRT {built[0]} does not load in TensorRT {running[0]}"
    if not host_code_allowed:
        return ("the plan is version-compatible: it carries the lean runtime, which runs only with "
                "engine_host_code_allowed = True")
    return None


def max_onnx_opset(version: str) -> int | None:
    """The newest ONNX opset the parser of `version` reads (None: no entry for its major)."""
    v = parts(version)  # (8, 6) <= (8, 6, 3, 1): an entry holds for every patch of its version
    known = [(parts(k), opset) for k, opset in data()["max_onnx_opset"]["by_version"].items()]
    candidates = [(k, opset) for k, opset in known if k[0] == v[0] and k <= v]
    return max(candidates)[1] if candidates else None


def needs_explicit_batch(version: str) -> bool:
    return parts(version)[0] < data()["explicit_batch"]["required_below_major"]


def always_strongly_typed(version: str) -> bool:
    return parts(version)[0] >= data()["strong_typing"]["always_from_major"]


def precision_flag_problem(strongly_typed: bool, flags: set[str]) -> str | None:
    """Why a build with these builder flags is refused, or None."""
    wrong = sorted(set(data()["strong_typing"]["precision_flags"]) & set(flags))
    if strongly_typed and wrong:
        return f"setting {', '.join(wrong)} is not allowed if the network is strongly typed"
    return None


def input_shape_problem(shape: tuple[int, ...], network: tuple[int, ...], minimum: tuple[int, ...],
                        maximum: tuple[int, ...]) -> str | None:
    """Why set_input_shape(shape) fails for a network input of dims `network` (-1: dynamic) with the
    profile's min and max, or None."""
    if len(shape) != len(network):
        return f"shape {list(shape)} has rank {len(shape)}, the input has rank {len(network)}"
    for axis, (s, n, lo, hi) in enumerate(zip(shape, network, minimum, maximum)):
        if n != -1 and s != n:
            return f"dimension {axis} is {s}, the network fixes it at {n}"
        if not lo <= s <= hi:
            return f"dimension {axis} is {s}, outside the optimization profile's range [{lo}, {hi}]"
    return None


def profile_index_problem(index: int, count: int) -> str | None:
    """Why selecting optimization profile `index` of an engine with `count` profiles fails, or None."""
    if not 0 <= index < count:
        return f"profile index {index} is out of range: the engine has {count} profile(s), 0..{count - 1}"
    return None


def output_allocator_calls(version: str) -> list[str]:
    """The IOutputAllocator callbacks an execution makes per output, in order."""
    calls = data()["output_allocator"]["calls"]
    return list(calls[str(parts(version)[0])])


def hardware_problem(level: str, built_cc: tuple[int, int], running_cc: tuple[int, int]) -> str | None:
    """Why a plan of hardware-compatibility `level` built on `built_cc` does not run on `running_cc`."""
    floor = tuple(data()["hardware_compatibility"]["ampere_plus_min_cc"])
    if level == "AMPERE_PLUS":
        if running_cc < floor:
            return f"an AMPERE_PLUS plan needs compute capability {floor[0]}.{floor[1]} or newer, this GPU has {running_cc[0]}.{running_cc[1]}"
        return None
    if built_cc != running_cc:
        return (f"the plan was built for compute capability {built_cc[0]}.{built_cc[1]}, this GPU has "
                f"{running_cc[0]}.{running_cc[1]} (build with hardware compatibility to move plans between GPUs)")
    return None


def inventory_versions(version: str, available: list[str]) -> list[str]:
    """The inventories (by version) whose common names the emulation of `version` offers (rule in the data
    file); empty when `version` is not emulated."""
    v = parts(version)
    same_major = sorted((parts(a), a) for a in available if parts(a)[0] == v[0])
    exact = [a for p, a in same_major if p[:2] == v[:2]]
    if exact:
        return exact[:1]
    below = [a for p, a in same_major if p[:2] < v[:2]]
    above = [a for p, a in same_major if p[:2] > v[:2]]
    if below and above:
        return [below[-1], above[0]]
    return below[-1:]


def layer_precision(op_type: str, output_type: str, strongly_typed: bool, flags: set[str], pinned: str | None,
                    fed_by_dequantize: bool, fp32_kernel: bool) -> str:
    """The DataType member a built layer runs in (rules 'layer_precision'). output_type: the ONNX type of the
    layer's output as a DataType member name ("FLOAT", "HALF", "INT8", "INT64"...); pinned: the precision set on the layer."""
    if output_type not in ("FLOAT", "HALF"):  # integer and boolean tensors keep their type
        return {"INT8": "INT8", "INT32": "INT32", "INT64": "INT64", "BOOL": "BOOL"}.get(output_type, "FLOAT")
    if strongly_typed:
        if op_type == "QuantizeLinear":
            return "INT8"
        return output_type
    if pinned is not None and "OBEY_PRECISION_CONSTRAINTS" in flags:
        return pinned
    if fp32_kernel:
        return "FLOAT"
    if "INT8" in flags and fed_by_dequantize and op_type in ("Conv", "Gemm", "MatMul"):
        return "INT8"
    if "FP16" in flags:
        return "HALF"
    return output_type


def inspector() -> dict:
    """How the engine inspector presents a built engine (rules 'inspector'): layer types, formats, data types."""
    return data()["inspector"]
