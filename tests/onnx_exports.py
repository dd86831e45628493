"""ONNX graphs as real exporters write them, for the tests of every ONNX reader: a tiny classifier through torch.onnx's
legacy exporter (dynamo=False) and its dynamo exporter at several opsets, and onnx's own test models. Exported once per
process."""

from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path

# (exporter, opset, what else): the legacy exporter at opsets TensorRT 8.6 reads (<= 17), also with the weights listed
# as graph inputs (keep_initializers_as_inputs, as older exports are) and without a dynamic batch axis; the dynamo
# exporter at 18 (its lowest: asked for less, it gives 18) and 20.
EXPORTS = ("legacy-11-weights-as-inputs", "legacy-13", "legacy-17", "legacy-17-fixed-batch", "dynamo-18", "dynamo-20")


def _tiny():
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4, 5)

        def forward(self, x):
            pooled = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
            return self.fc(pooled.flatten(1))

    torch.manual_seed(0)
    return Tiny().eval(), torch.randn(2, 3, 8, 8)


@functools.cache
def exported(name: str) -> bytes:
    """The ONNX bytes of export `name` (one of EXPORTS): input `input` [batch, 3, 8, 8] -> output `output` [batch, 5]."""
    import torch

    exporter, opset, *extra = name.split("-", 2)
    model, x = _tiny()
    with warnings.catch_warnings():  # (the legacy exporter is deprecated, and still what many exports come from)
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            buffer = io.BytesIO()
            axes = None if extra == ["fixed-batch"] else {"input": {0: "batch"}, "output": {0: "batch"}}
            torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=int(opset), input_names=["input"],
                              output_names=["output"], dynamic_axes=axes,
                              keep_initializers_as_inputs=extra == ["weights-as-inputs"])
            return buffer.getvalue()
        program = torch.onnx.export(model, (x,), dynamo=True, opset_version=int(opset), input_names=["input"],
                                    output_names=["output"], dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
                                    verbose=False)
        return program.model_proto.SerializeToString()


def write(name: str, directory: Path) -> Path:
    path = Path(directory) / f"{name}.onnx"
    path.write_bytes(exported(name))
    return path


# Models the `onnx` package ships for its backend tests (onnx/backend/test/data) that onnxruntime loads: PyTorch's
# exports of 2017 (IR 3, weights listed as graph inputs, tensors named by numbers, an int64 input) and hand-made graphs
# (outputs with a dim left unknown, several inputs).
ONNX_TEST_MODELS = ("pytorch-converted/test_Conv2d", "pytorch-converted/test_Conv1d_stride", "pytorch-converted/test_Embedding",
                    "pytorch-converted/test_Linear_no_bias", "pytorch-converted/test_ConvTranspose2d_no_bias",
                    "pytorch-converted/test_MaxPool2d", "simple/test_expand_shape_model2", "simple/test_sequence_model1",
                    "simple/test_sequence_model4")


def onnx_test_model(name: str) -> Path:
    import onnx

    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / name / "model.onnx"
