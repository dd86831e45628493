"""STAND-IN for torch-tensorrt, for tritonize's tests only: it runs on the emulated TensorRT (../tensorrt) and
loads only where that does (TRITONIZE_EMULATED_TENSORRT set).

Its version is $STANDIN_TORCH_TENSORRT_VERSION, else the release that pins the emulated TensorRT
(tests/data/torch_tensorrt_pins.json, from each tag's requirements: 2.2.0 pins 8.6, 2.5.0 10.3.0, 2.9.0 10.13,
2.13.0 11.0), else by major (2.2.0, 2.9.0, 2.13.0). It pairs only with a TensorRT its version pins, as pip installs
them; a test that pairs it otherwise says why in $STANDIN_TORCH_TENSORRT_PAIRING, else it does not import. From 2.5
it has the dynamo frontend's `dynamo.convert_exported_program_to_serialized_trt_engine` (./dynamo.py); every
version has the TorchScript frontend. It enforces what tritonize relies on, from pytorch/TensorRT's sources (the signature
files in tests/data name tag, file and lines):
- `ts.convert_method_to_trt_engine` takes exactly its real parameters (no **kwargs: any other keyword
  is a TypeError, as in Python), a torch.jit.ScriptModule that has the method, and Input specs;
- the TorchScript engine names its tensors input_0 / output_0 (core/conversion/conversion.cpp);
- FP16 in enabled_precisions sets the FP16 builder flag up to TensorRT 10 and is ignored from 11, whose
  networks are strongly typed (core/conversion/conversionctx/ConversionCtx.cpp); disable_tf32 clears TF32.
Each frontend converts its program to ONNX (torch's exporters) and builds that with the emulated TensorRT,
which is how its plan carries the model. STANDIN_TORCH_TENSORRT_MODE=raise makes a conversion fail as the
real one does on a graph it cannot convert.
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

import tensorrt as _trt

DATA = Path(__file__).resolve().parents[3] / "data"
SIGNATURE = json.loads((DATA / "torch_tensorrt_ts_signature.json").read_text())
PINS = json.loads((DATA / "torch_tensorrt_pins.json").read_text())["versions"]
VERSION_ENV = "STANDIN_TORCH_TENSORRT_VERSION"
PAIRING_ENV = "STANDIN_TORCH_TENSORRT_PAIRING"  # why a test pairs it with a TensorRT its version does not pin


def pins(version: str, tensorrt: str) -> bool:
    """Whether torch-tensorrt `version` pins TensorRT `tensorrt` (tests/data/torch_tensorrt_pins.json)."""
    from packaging.specifiers import SpecifierSet

    pin = PINS.get(version)
    return pin is not None and SpecifierSet(pin["tensorrt"]).contains(".".join(tensorrt.split(".")[:3]))


_MAJOR = int(_trt.__version__.split(".")[0])
__version__ = (os.environ.get(VERSION_ENV) or next((v for v in PINS if pins(v, _trt.__version__)), None)
               or {8: "2.2.0", 10: "2.9.0"}.get(_MAJOR, "2.13.0"))
VERSION = tuple(int(p) for p in __version__.split("+")[0].split(".")[:2])
if not pins(__version__, _trt.__version__) and not os.environ.get(PAIRING_ENV):
    _pin = PINS.get(__version__, {"tensorrt": "(no recorded pin)", "where": "tests/data/torch_tensorrt_pins.json"})
    raise ImportError(f"stand-in: torch-tensorrt {__version__} pins tensorrt{_pin['tensorrt']} (pytorch/TensorRT "
                      f"{_pin['where']}), and pip would never install it beside the emulated TensorRT {_trt.__version__}: "
                      f"emulate the TensorRT it pins, or say in ${PAIRING_ENV} why the test pairs them otherwise")


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
    spec = one_input(inputs, "convert_method_to_trt_engine")
    if os.environ.get("STANDIN_TORCH_TENSORRT_MODE") == "raise":
        raise RuntimeError("[Error thrown at core/conversion/conversion.cpp:230] stand-in: unable to convert the graph")
    onnx = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and signature notes
        torch.onnx.export(module, (torch.zeros(spec.opt_shape, dtype=spec.dtype),), onnx, dynamo=False, opset_version=17,
                          input_names=["input_0"], output_names=["output_0"],
                          dynamic_axes={"input_0": {0: "batch"}, "output_0": {0: "batch"}})
    flags = 1 << int(_trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH) if _MAJOR < 10 else 0
    if _MAJOR >= 11:
        flags |= 1 << int(_trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)

    def configure(config):
        if torch.float16 in (enabled_precisions or ()) and _MAJOR < 11:
            config.set_flag(_trt.BuilderFlag.FP16)
        if disable_tf32:
            config.clear_flag(_trt.BuilderFlag.TF32)
        if workspace_size:
            config.set_memory_pool_limit(_trt.MemoryPoolType.WORKSPACE, int(workspace_size))

    engine = build_engine(onnx.getvalue(), "input_0", spec, flags, configure)
    if engine is None:
        raise RuntimeError("[Error thrown at core/conversion/conversionctx/ConversionCtx.cpp] Building serialized network failed")
    return bytes(engine)


def one_input(inputs, function: str) -> Input:
    if not inputs or not all(isinstance(i, Input) for i in inputs) or len(inputs) != 1:
        raise ValueError(f"{function}: one torch_tensorrt.Input is needed here")
    return inputs[0]


def build_engine(onnx: bytes, input_name: str, spec: Input, network_flags: int, configure):
    """Parse the ONNX into a network of `network_flags`, let `configure` set the builder config, add the one
    profile of `spec` and build: the serialized engine, or None when TensorRT could not build it."""
    builder = _trt.Builder(_trt.Logger(_trt.Logger.ERROR))
    network = builder.create_network(network_flags)
    parser = _trt.OnnxParser(network, builder.logger)
    if not parser.parse(onnx):
        raise RuntimeError(f"stand-in: the program did not convert: {parser.get_error(0)}")
    config = builder.create_builder_config()
    configure(config)
    profile = builder.create_optimization_profile()
    profile.set_shape(input_name, spec.min_shape, spec.opt_shape, spec.max_shape)
    config.add_optimization_profile(profile)
    return builder.build_serialized_network(network, config)


from . import dynamo  # noqa: E402,F401 - `torch_tensorrt.dynamo`, imported as the real package does
