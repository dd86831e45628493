"""The engine inspector's JSON as real TensorRT writes it, for the tests of its readers: our fixtures, written here
from what NVIDIA's recorded engines show (tests/data/nvidia_facts/README.md), and NVIDIA's recorded engines
themselves where a copy of NVIDIA/TensorRT is at hand. Those are not committed here (README.md there says why):
$TRITONIZE_NVIDIA_TENSORRT names a checkout or git directory of NVIDIA/TensorRT holding COMMIT; without it, the
tests that read them skip, saying so."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

FACTS = Path(__file__).resolve().parent / "data" / "nvidia_facts"
ENV = "TRITONIZE_NVIDIA_TENSORRT"
DEFAULT = Path("/work/.mirror/NVIDIA+TensorRT/repo")  # a bare git directory, where one workplace keeps a snapshot
# The last commit with trex's examples in the repository (its engine files unchanged since 7a07608d, 2022-06-08).
COMMIT = "b8b46f213c3f57759f4fbb46f27dced8894945c8"
_RESNET = "tools/experimental/trt-engine-explorer/examples/pytorch/resnet/A100"
# ResNet-18, batch 32, built on an A100 (TensorRT 8.x, 2022) FP32, with FP16 allowed, and quantization-aware (Q/DQ) INT8.
ENGINES = {"fp32": f"{_RESNET}/fp32/resnet.onnx.engine.graph.json", "fp16": f"{_RESNET}/fp16/resnet.onnx.engine.graph.json",
           "qat": f"{_RESNET}/qat/resnet-qat.onnx.engine.graph.json"}


def fixture(name: str) -> str:
    """Our inspector JSON `tests/data/nvidia_facts/inspector_<name>.json`."""
    return (FACTS / f"inspector_{name}.json").read_text()


@functools.cache
def nvidia_engine(name: str) -> str:
    """NVIDIA's recorded inspector JSON of the ResNet-18 engine `name` (a key of ENGINES), read from the copy of
    NVIDIA/TensorRT that $TRITONIZE_NVIDIA_TENSORRT names (else DEFAULT, where it exists). No copy: the test skips;
    a named copy that cannot give the file fails the test."""
    named = os.environ.get(ENV)
    where = Path(named) if named else DEFAULT
    if not named and not where.exists():
        pytest.skip(f"NVIDIA's recorded engines are not committed: set {ENV} to a checkout or git directory of "
                    f"NVIDIA/TensorRT holding commit {COMMIT[:7]} to test on them")
    bare = (where / "HEAD").is_file() and (where / "objects").is_dir()
    git = ["git", f"--git-dir={where}"] if bare else ["git", "-C", str(where)]
    try:
        shown = subprocess.run([*git, "show", f"{COMMIT}:{ENGINES[name]}"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        shown = subprocess.CompletedProcess([], 1, "", str(error))
    if shown.returncode != 0:
        problem = f"{where} gives no {COMMIT[:7]}:{ENGINES[name]}: {shown.stderr.strip()[:200]}"
        (pytest.fail if named else pytest.skip)(problem)
    return shown.stdout
