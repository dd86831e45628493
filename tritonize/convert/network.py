"""What the convert stage needs to know about the network it converts.

Usually the manifest's ModelSpec (`tritonize export` wrote it). An ONNX from elsewhere has none: its
tensor names and shape come from the graph itself, and without preprocessing there is nothing to
turn calibration images into inputs, so its checks use synthetic [0, 1) inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonize.convert.precision import ort_session
from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.spec import ModelSpec
from tritonize.verify import verification_inputs


@dataclass(frozen=True)
class Network:
    input_name: str
    output_name: str
    input_shape: tuple[int, ...]  # without the batch axis
    preprocessing: Preprocessing | None  # None: an ONNX from elsewhere
    pretrained: bool  # False: random-init weights, whose INT8 top-1 is reported, not gated
    described: str  # for the reproducer's header

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> "Network":
        return cls(spec.input_name, spec.output_name, tuple(spec.input_shape), spec.preprocessing, spec.pretrained,
                   f"Model {spec.arch} (weights {spec.weights})")

    def synthetic(self, count: int, seed: int) -> np.ndarray:
        """Deterministic inputs in the model's input domain: uniform pixels, normalized as the model expects."""
        pre = self.preprocessing
        if pre is None:
            return np.random.default_rng(seed).random((count, *self.input_shape), dtype=np.float32)
        return verification_inputs(self.input_shape, count, pre.mean, pre.std, seed=seed, layout=pre.layout)


def network_from_onnx(path: Path) -> Network:
    """The network of an ONNX from elsewhere: one FP32 input with a dynamic batch axis, one output."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as e:  # noqa: BLE001 - DecodeError, OSError: not an ONNX file
        raise TritonizeError(f"cannot read {path} as ONNX: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    weights = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in weights]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise TritonizeError(f"{path} has inputs {[i.name for i in inputs]} and outputs {[o.name for o in graph.output]}: "
                             "tritonize converts networks with one input and one output")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        raise TritonizeError(f"{path}: input {inputs[0].name!r} is {onnx.TensorProto.DataType.Name(tensor.elem_type)}; "
                             "tritonize converts networks with an FP32 input")
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tensor.shape.dim]
    if not dims or isinstance(dims[0], int):
        raise TritonizeError(f"{path} has a static batch axis (input {inputs[0].name!r} is {dims}): TensorRT builds a "
                             "batch profile only for a dynamic first dimension; re-export it with a dynamic batch axis")
    if not all(isinstance(d, int) and d > 0 for d in dims[1:]):
        raise TritonizeError(f"{path}: input {inputs[0].name!r} is {dims}; only the batch axis (the first) may be dynamic")
    try:
        ort_session(path)  # the CPU checks compare everything with it
    except Exception as e:  # noqa: BLE001 - onnxruntime's Fail / InvalidGraph / NotImplemented
        raise TritonizeError(f"onnxruntime cannot run {path}: {str(e).strip().splitlines()[0]}") from None
    return Network(inputs[0].name, graph.output[0].name, tuple(dims[1:]), None, True,
                   f"ONNX {Path(path).name} from outside tritonize (names and shape read from its graph)")
