"""STAND-IN for torch-tensorrt's TorchScript frontend, for tritonize's tests only: it runs on the emulated
TensorRT (../tensorrt) and loads only where that does (TRITONIZE_EMULATED_TENSORRT set).

It enforces what tritonize relies on, from pytorch/TensorRT's sources (tests/data/torch_tensorrt_ts_signature.json
names tag, file and lines):
- `ts.convert_method_to_trt_engine` takes exactly its real parameters (no **kwargs: any other keyword
  is a TypeError, as in Python), a torch.jit.ScriptModule that has the method, and Input specs;
- the engine names its tensors input_0 / output_0 (core/conversion/conversion.cpp);
- FP16 in enabled_precisions sets the FP16 builder flag up to TensorRT 10 and is ignored from 11, whose
  networks are strongly typed (core/conversion/conversionctx/ConversionCtx.cpp); disable_tf32 clears TF32.
It converts the TorchScript to ONNX (torch's TorchScript exporter) and builds that with the emulated
TensorRT, which is how its plan carries the model. STANDIN_TORCH_TENSORRT_MODE=raise makes the
conversion fail with a RuntimeError, as the real one does on a graph it cannot convert.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from pathlib import Path

if not os.environ.get("TRITONIZE_EMULATED_TENSORRT"):
    raise ImportError("this `torch_tensorrt` is tritonize's test stand-in (tests/standins/emulated), not torch-tensorrt: "
                      "it loads only in tritonize's tests, with the emulated TensorRT")

import tensorrt as _trt  # noqa: E402 - the emulated TensorRT it is built against

SIGNATURE = json.loads((Path(__file__).resolve().parents[3] / "data" / "torch_tensorrt_ts_signature.json").read_text())
__version__ = "0.0.0+emulated"


class Input:
    """torch_tensorrt.Input: a dynamic-shape input spec (min, opt, max) of one dtype."""

    def __init__(self, *, min_shape, opt_shape, max_shape, dtype):
        self.min_shape, self.opt_shape, self.max_shape, self.dtype = tuple(min_shape), tuple(opt_shape), tuple(max_shape), dtype


class _TorchScript:
    """The `torch_tensorrt.ts` module."""

    @staticmethod
    def convert_method_to_trt_engine(*args, **kwargs) -> bytes:
        names = SIGNATURE["parameters"]
        if len(args) > len(names):
            raise TypeError(f"convert_method_to_trt_engine() takes at most {len(names)} positional arguments")
        for key in kwargs:
            if key not in names:
                raise TypeError(f"convert_method_to_trt_engine() got an unexpected keyword argument '{key}'")
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key in bound:
                raise TypeError(f"convert_method_to_trt_engine() got multiple values for argument '{key}'")
            bound[key] = value
        return _convert(**bound)


ts = _TorchScript()


def _convert(module, method_name="forward", inputs=None, enabled_precisions=None, disable_tf32=False,
             workspace_size=0, **_ignored) -> bytes:
    import torch

    if not isinstance(module, torch.jit.ScriptModule) or not hasattr(module, method_name):
        raise TypeError(f"convert_method_to_trt_engine: a torch.jit.ScriptModule with a '{method_name}' method is needed")
    if not inputs or not all(isinstance(i, Input) for i in inputs) or len(inputs) != 1:
        raise ValueError("convert_method_to_trt_engine: one torch_tensorrt.Input is needed here")
    if os.environ.get("STANDIN_TORCH_TENSORRT_MODE") == "raise":
        raise RuntimeError("[Error thrown at core/conversion/conversion.cpp:230] stand-in: unable to convert the graph")
    spec = inputs[0]
    onnx = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and signature notes
        torch.onnx.export(module, (torch.zeros(spec.opt_shape, dtype=spec.dtype),), onnx, dynamo=False, opset_version=17,
                          input_names=["input_0"], output_names=["output_0"],
                          dynamic_axes={"input_0": {0: "batch"}, "output_0": {0: "batch"}})
    major = int(_trt.__version__.split(".")[0])
    builder = _trt.Builder(_trt.Logger(_trt.Logger.ERROR))
    flags = 1 << int(_trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH) if major < 10 else 0
    if major >= 11:
        flags |= 1 << int(_trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = _trt.OnnxParser(network, builder.logger)
    if not parser.parse(onnx.getvalue()):
        raise RuntimeError(f"stand-in: the TorchScript did not convert: {parser.get_error(0)}")
    config = builder.create_builder_config()
    if torch.float16 in (enabled_precisions or ()) and major < 11:
        config.set_flag(_trt.BuilderFlag.FP16)
    if disable_tf32:
        config.clear_flag(_trt.BuilderFlag.TF32)
    if workspace_size:
        config.set_memory_pool_limit(_trt.MemoryPoolType.WORKSPACE, int(workspace_size))
    profile = builder.create_optimization_profile()
    profile.set_shape("input_0", spec.min_shape, spec.opt_shape, spec.max_shape)
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise RuntimeError("[Error thrown at core/conversion/conversionctx/ConversionCtx.cpp] Building serialized network failed")
    return bytes(engine)
