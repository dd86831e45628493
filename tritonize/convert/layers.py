"""The precision each layer of a built engine runs in, read from the engine: a plan asked for as FP16 can still
run mostly in FP32 (weakly typed builds take the precision flags as permissions, and TensorRT keeps an FP32 kernel
where it is faster), so the request is not the fact.

The engine inspector's JSON (`IEngineInspector::getEngineInformation(kJSON)`, also what `trtexec
--profilingVerbosity=detailed --exportLayerInfo=FILE` writes) has, for an engine built with DETAILED profiling
verbosity, per layer its Name, LayerType and Inputs/Outputs, each tensor with its data type: in "Format/Datatype"
("Channel major FP16 format where channel % 8 == 0") on 8.x and 10.x, in a "Datatype" key of its own ("Half")
beside "Format" on 11.x. Below DETAILED a layer is its name only: the precisions are then unknown.

What real engines list (NVIDIA's recorded ones; tests/data/nvidia_facts/README.md names them) decides the reading:
- layers that only move or convert data (the "Reformatting CopyNode ..." TensorRT inserts between formats, NoOp,
  Shuffle, Constant, Cast; a QuantizeLinear runs as a Reformat) are not counted: their output type is the next
  layer's, or the engine output's;
- a layer runs in the type of its first input, as NVIDIA's engine explorer (trex, Layer.precision) reads it: an
  INT8 convolution may write FP32 (`conv1.weight + QuantizeLinear_7 + Conv_9`), a fused layer (`Conv_3 + Relu_4`)
  is one layer;
- TensorRT 8.x lists every layer once per optimization profile, the copies named "... [profile N]" (trex,
  parser.py import_graph_file): profile 0's layers are counted.
"""

from __future__ import annotations

import json
import re

from tritonize.manifest import LayerPrecisions

# Substrings of a tensor's data type (upper case), most specific first -> the precision recorded.
_DATATYPES = (("BFLOAT16", "BF16"), ("FP8", "FP8"), ("FP16", "FP16"), ("HALF", "FP16"), ("UINT8", "UINT8"),
              ("INT8", "INT8"), ("FP4", "FP4"), ("INT4", "INT4"), ("FP32", "FP32"), ("FLOAT", "FP32"),
              ("INT32", "INT32"), ("INT64", "INT64"), ("BOOL", "BOOL"))
COMPUTE = ("FP32", "FP16", "BF16", "FP8", "INT8", "FP4", "INT4")  # the precisions math runs in
MOVES_DATA = ("Reformat", "NoOp", "Shuffle", "Constant", "Cast", "Identity")  # LayerTypes that compute nothing
_OTHER_PROFILE = re.compile(r"\[profile +\d+\]")
SHOWN = 10  # FP32 layers named in the manifest beyond the counts


def precision_of(datatype: str) -> str:
    text = datatype.upper()
    return next((name for key, name in _DATATYPES if key in text), "OTHER")


def tensor_precision(tensor: dict) -> str:
    """A tensor's precision: 11.x's "Datatype", else 8.x/10.x's "Format/Datatype"."""
    return precision_of(str(tensor.get("Datatype") or tensor.get("Format/Datatype") or ""))


def layer_precision(layer: dict) -> str | None:
    """The precision a layer computes in (its first input's, else its first output's), or None for a layer that
    moves or converts data, or one of another optimization profile's copies."""
    name = str(layer.get("Name", ""))
    if layer.get("LayerType") in MOVES_DATA or name.startswith("Reformatting CopyNode") or _OTHER_PROFILE.search(name):
        return None
    tensors = layer.get("Inputs") or layer.get("Outputs") or []
    return tensor_precision(tensors[0]) if tensors and isinstance(tensors[0], dict) else None


def from_engine_information(text: str | None, source: str) -> LayerPrecisions | None:
    """The layer precisions in the inspector's JSON, or None when it names the layers only (the engine was not
    built with DETAILED profiling verbosity) or is not such JSON."""
    try:
        layers = json.loads(text).get("Layers", []) if text and text.strip() else []
    except (ValueError, AttributeError):
        return None
    if not isinstance(layers, list) or not layers or not all(isinstance(layer, dict) for layer in layers):
        return None
    counts: dict[str, int] = {}
    fp32: list[str] = []
    for layer in layers:
        precision = layer_precision(layer)
        if precision not in COMPUTE:
            continue
        counts[precision] = counts.get(precision, 0) + 1
        if precision == "FP32":
            fp32.append(str(layer.get("Name", "?")))
    return LayerPrecisions(counts, tuple(fp32[:SHOWN]), source)


def read_engine(plan: bytes, trt) -> str | None:
    """The engine inspector's JSON of a serialized engine, with this process's TensorRT `trt`; None when it cannot
    be read (reading the layers never fails a build: the precisions are then recorded as unknown)."""
    try:
        return _inspect(plan, trt)
    except Exception:  # noqa: BLE001 - TensorRT's errors, or an inspector this TensorRT lacks
        return None


def _inspect(plan: bytes, trt) -> str:
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    runtime.engine_host_code_allowed = True  # the plan was just built by this user
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise RuntimeError(f"TensorRT {trt.__version__} could not load the plan to read its layers")
    inspector = engine.create_engine_inspector()
    return inspector.get_engine_information(trt.LayerInformationFormat.JSON)
