"""The precision each layer of a built engine runs in, read from the engine: a plan asked for as FP16 can still
run mostly in FP32 (weakly typed builds take the precision flags as permissions, and TensorRT keeps an FP32 kernel
where it is faster), so the request is not the fact.

The engine inspector's JSON (`IEngineInspector::getEngineInformation(kJSON)`, also what `trtexec
--profilingVerbosity=detailed --exportLayerInfo=FILE` writes) has, for an engine built with DETAILED profiling
verbosity, per layer its Name and its Outputs with a "Format/Datatype" such as "Row major linear FP16 format"
(NVIDIA/TensorRT python/docstrings/infer/pyCoreDoc.h; Polygraphy reads the data type from it by substring,
polygraphy/backend/trt/util.py). Below DETAILED a layer is its name only: the precisions are then unknown.
The inspector's names are the same in TensorRT 8.6, 10.x and 11.x (EngineInspector: get_engine_information,
get_layer_information, execution_context; tests/data/tensorrt_api/); ProfilingVerbosity.DETAILED exists in all
(8.6's DEFAULT/VERBOSE aliases were removed in 10.0).
"""

from __future__ import annotations

import json

from tritonize.manifest import LayerPrecisions

# Substrings of "Format/Datatype" (upper case), most specific first -> the precision recorded.
_DATATYPES = (("BFLOAT16", "BF16"), ("FP8", "FP8"), ("FP16", "FP16"), ("HALF", "FP16"), ("INT8", "INT8"),
              ("FP32", "FP32"), ("FLOAT", "FP32"), ("INT32", "INT32"), ("INT64", "INT64"), ("BOOL", "BOOL"))
COMPUTE = ("FP32", "FP16", "BF16", "FP8", "INT8")  # the precisions math runs in; integer/bool layers move shapes
SHOWN = 10  # FP32 layers named in the manifest beyond the counts


def precision_of(format_datatype: str) -> str:
    text = format_datatype.upper()
    return next((name for key, name in _DATATYPES if key in text), "OTHER")


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
        outputs = layer.get("Outputs") or []
        described = (outputs[0].get("Format/Datatype") or outputs[0].get("Datatype") or "") if outputs else ""
        precision = precision_of(described)
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
