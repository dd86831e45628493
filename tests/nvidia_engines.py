"""The engine inspector's JSON as real TensorRT writes it, for the tests of its readers: our fixtures, written here
from what NVIDIA's recorded engines show (tests/data/nvidia_facts/README.md), and NVIDIA's recorded engines
themselves where a copy of them is at hand. Those are not committed here (README.md there says why).

$TRITONIZE_NVIDIA_TREX names a folder laid out as trt-engine-explorer's ResNet examples (NVIDIA/TensorRT at COMMIT,
tools/experimental/trt-engine-explorer/examples/pytorch/resnet/A100/): `make test` names the project's shared copy,
../shared/data/nvidia-trex beside the checkout, when it is there. Unnamed, the tests that read them skip, saying so;
named, a folder that lacks one fails the test."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

FACTS = Path(__file__).resolve().parent / "data" / "nvidia_facts"
ENV = "TRITONIZE_NVIDIA_TREX"
# The last commit with trex's examples in NVIDIA/TensorRT (its engine files unchanged since 7a07608d, 2022-06-08).
COMMIT = "b8b46f213c3f57759f4fbb46f27dced8894945c8"
# ResNet-18, batch 32, built on an A100 (TensorRT 8.x, 2022) FP32, with FP16 allowed, quantization-aware (Q/DQ) INT8,
# and Q/DQ INT8 with the residual adds and the global pooling quantized too.
ENGINES = {"fp32": "fp32/resnet.onnx.engine.graph.json", "fp16": "fp16/resnet.onnx.engine.graph.json",
           "qat": "qat/resnet-qat.onnx.engine.graph.json",
           "qat-residual": "qat-residual-qgap/resnet-qat-residual-qgap.onnx.engine.graph.json"}


def fixture(name: str) -> str:
    """Our inspector JSON `tests/data/nvidia_facts/inspector_<name>.json`."""
    return (FACTS / f"inspector_{name}.json").read_text()


@functools.cache
def nvidia_engine(name: str) -> str:
    """NVIDIA's recorded inspector JSON of the ResNet-18 engine `name` (a key of ENGINES), read from the folder
    $TRITONIZE_NVIDIA_TREX names. Unnamed: the test skips; named, a folder without the file fails it."""
    named = os.environ.get(ENV)
    if not named:
        pytest.skip(f"NVIDIA's recorded engines are not committed: set {ENV} to a folder holding trex's ResNet "
                    f"examples (NVIDIA/TensorRT {COMMIT[:7]}; `make test` names ../shared/data/nvidia-trex)")
    path = Path(named) / ENGINES[name]
    if not path.is_file():
        pytest.fail(f"{ENV}={named} has no {ENGINES[name]}")
    return path.read_text()
