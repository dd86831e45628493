"""The emulated GPU half for the tests: the emulated `tensorrt` (and `torch_tensorrt`) packages in
tests/standins/emulated, and the CUDA runtime stand-in tests/standins/cudart.c, built here.

`environment(version, cudart)` is what a process needs to see them: the version to emulate, the
stand-in library (on LD_LIBRARY_PATH, where Polygraphy's CUDA wrapper searches first) and the packages
(on PYTHONPATH, with the repository root for `tests.emulation.rules`). Subprocesses (the trtexec and
docker stand-ins, Triton's backend stubs) inherit it. `activate` does the same for this process and
resets what Polygraphy caches per process (its lazily imported `tensorrt`, TRT_LOGGER, the CUDA wrapper).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EMULATED = ROOT / "tests" / "standins" / "emulated"
CUDART_SOURCE = ROOT / "tests" / "standins" / "cudart.c"
CUDART_NAME = "libcudart.so.emulated"  # found by Polygraphy's `libcudart.so*`; no binary links this soname
VERSION_ENV = "TRITONIZE_EMULATED_TENSORRT"
CUDART_ENV = "TRITONIZE_EMULATED_CUDART"
REPORT_ENV = "TRITONIZE_EMULATED_CUDA_REPORT"
# What the tests run under: TensorRT 8.6 (Triton 24.02-24.04), 10.x (24.10) and 11.x (no release in the table yet).
VERSIONS = ("8.6.3.1", "10.5.0.18", "11.4.0.106")
RELEASES = {"8.6.3.1": "24.04", "10.5.0.18": "24.10", "11.4.0.106": None}


def build_cudart(dest: Path, device_count_error: int | None = None) -> Path:
    """Compile the CUDA runtime stand-in into `dest`; RuntimeError when there is no C compiler. With
    `device_count_error`, a runtime whose cudaGetDeviceCount answers that code (35: the driver is too old for it)."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc/gcc) to build the CUDA runtime stand-in")
    dest.mkdir(parents=True, exist_ok=True)
    library = dest / CUDART_NAME
    defines = [] if device_count_error is None else [f"-DEMU_DEVICE_COUNT_ERROR={int(device_count_error)}"]
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", *defines, "-o", str(library), str(CUDART_SOURCE), "-lpthread"],
                   check=True, capture_output=True, text=True)
    return library


def environment(version: str, cudart: Path, base: dict | None = None) -> dict[str, str]:
    """The variables a process needs to run on the emulation of TensorRT `version`."""
    base = dict(os.environ if base is None else base)

    def first(name: str, path: Path) -> str:
        return os.pathsep.join(p for p in (str(path), base.get(name, "")) if p)

    return {
        VERSION_ENV: version,
        CUDART_ENV: str(cudart),
        "LD_LIBRARY_PATH": first("LD_LIBRARY_PATH", cudart.parent),
        "PYTHONPATH": os.pathsep.join(p for p in (str(EMULATED), str(ROOT), base.get("PYTHONPATH", "")) if p),
    }


def purge() -> None:
    """Forget the emulated packages in this process, and Polygraphy's caches of them."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("tensorrt", "torch_tensorrt")]:
        del sys.modules[name]
    for name, module in list(sys.modules.items()):
        if not name.startswith("polygraphy") or module is None:
            continue
        for value in list(vars(module).values()):
            if type(value).__name__ == "LazyModule" and value.__dict__.get("module") is not None:
                object.__setattr__(value, "module", None)
    if "polygraphy.backend.trt.util" in sys.modules:
        sys.modules["polygraphy.backend.trt.util"].TRT_LOGGER = None
    if "polygraphy.cuda.cuda" in sys.modules:
        sys.modules["polygraphy.cuda.cuda"].G_CUDA = None


def live_cuda() -> tuple[int, int, int, int]:
    """(allocations, bytes, streams, errors) the CUDA stand-in of this process holds."""
    import importlib

    return importlib.import_module("tensorrt._cuda").live()


def tiny_classifier(path: Path, opset: int = 17, batch: str | int = "N") -> Path:
    """A small ONNX classifier: input `images` [batch, 3, 16, 16] -> `logits` [batch, 10], fixed weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv_w"),
               numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fc_w")]
    nodes = [helper.make_node("Conv", ["images", "conv_w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc_w"], ["logits"], name="fc")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    return path
