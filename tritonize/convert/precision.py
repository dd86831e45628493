"""Precision prepared in the ONNX graph, on the CPU, before any GPU is involved.

TensorRT 10 builds strongly typed networks and TensorRT 11 knows no other kind: the precision must be
in the graph. Two variants are made here and checked against the FP32 export:

- FP16 mixed precision (`mixed_fp16`): FP32 activations are measured on real (or, without images,
  synthetic) inputs; every node that reads or writes a value beyond `DATA_MAX`, or holds a weight
  FP16 cannot represent, stays FP32 and onnxconverter-common converts the rest. This is the rule
  NVIDIA ModelOpt's AutoCast applies (its `data_max` default is 512, `init_max` 65504); when
  ModelOpt is installed its AutoCast is used instead.
- INT8 (`quantized_int8`): explicit Q/DQ from onnxruntime's `quantize_static` after
  `quant_pre_process`: per-channel symmetric int8 weights, symmetric int8 activations (zero point 0),
  biases left FP32 (int32 bias DQ nodes trouble older TensorRT). That is what TensorRT's explicit
  quantization accepts. onnxruntime's CPU kernels gain little from that graph: with symmetric int8
  activations every Relu stays a float op between Q/DQ pairs and only some convolutions fuse into
  QLinearConv (resnet18: 9 of 20; measured ~1.0x FP32). `for_cpu=True` quantizes as onnxruntime
  recommends for the CPU instead: uint8 activations with a zero point (the Relu folds into the
  quantization range), int8 per-channel weights, int32 biases: every convolution fuses (20 of 20) and
  it runs 2.5-3.5x faster than FP32 on AVX512-VNNI.

onnxruntime's CPU kernels run most FP16 ops in FP32 and never round between them, so an FP16
overflow does not show there. `run_true_fp16` executes the graph one node at a time, which forces
every intermediate tensor through its declared type, as on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.machine import compute_threads

FP16_MAX = 65504.0
# Activations above this stay FP32: sums and products of values this large overflow FP16 inside
# the next layers (the same threshold as ModelOpt AutoCast's data_max default).
DATA_MAX = 512.0
RANGE_BATCH = 4  # images per pass when every activation is exposed (keeps memory bounded)


def ort_session(model, optimize: bool = True):
    """An onnxruntime CPU session for a path or a ModelProto."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = compute_threads()
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def run_onnx(session, inputs: np.ndarray, input_name: str, output_name: str, batch: int = 8) -> np.ndarray:
    return np.concatenate(
        [session.run([output_name], {input_name: inputs[i : i + batch]})[0] for i in range(0, len(inputs), batch)]
    )


# ---------------------------------------------------------------------------------------------- FP16


def activation_ranges(model, inputs: np.ndarray, input_name: str) -> dict[str, float]:
    """max |value| of every float tensor a node produces, over `inputs`, computed in FP32."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    produced = [o for node in probe.graph.node for o in node.output if o]
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=name) for name in produced)
    session = ort_session(probe, optimize=False)  # unfused, so every ONNX tensor is really computed
    ranges: dict[str, float] = {}
    for i in range(0, len(inputs), RANGE_BATCH):
        for name, value in zip(produced, session.run(produced, {input_name: inputs[i : i + RANGE_BATCH]})):
            if value.dtype.kind == "f" and value.size:
                ranges[name] = max(ranges.get(name, 0.0), float(np.abs(value).max()))
    return ranges


def fp32_nodes(model, ranges: dict[str, float], data_max: float = DATA_MAX) -> list[str]:
    """Names of the nodes that must stay FP32: an input or output beyond `data_max`, or a weight FP16 cannot hold."""
    from onnx import numpy_helper

    big_weights = {
        init.name
        for init in model.graph.initializer
        if init.data_type == 1 and numpy_helper.to_array(init).size and np.abs(numpy_helper.to_array(init)).max() > FP16_MAX
    }
    keep = []
    for node in model.graph.node:
        values = [ranges.get(n, 0.0) for n in (*node.input, *node.output) if n]
        if max(values, default=0.0) > data_max or big_weights.intersection(node.input):
            keep.append(node.name)
    return keep


@dataclass
class MixedPrecision:
    model: object  # onnx.ModelProto
    tool: str
    fp32_nodes: list[str] = field(default_factory=list)
    nodes_total: int = 0
    max_activation: float = 0.0


def mixed_fp16(model, range_inputs: np.ndarray, input_name: str, use_modelopt: bool | None = None,
               source_path: Path | None = None) -> MixedPrecision:
    """FP16 with FP32 kept where FP16 would overflow; inputs and outputs stay FP32."""
    ranges = activation_ranges(model, range_inputs, input_name)
    keep = fp32_nodes(model, ranges)
    total = len(model.graph.node)
    peak = max(ranges.values(), default=0.0)
    if use_modelopt is None:
        use_modelopt = modelopt_available()
    if use_modelopt and source_path is not None:
        from modelopt.onnx.autocast import convert_to_mixed_precision

        converted = convert_to_mixed_precision(
            onnx_path=str(source_path), low_precision_type="fp16", keep_io_types=True,
            data_max=DATA_MAX, init_max=FP16_MAX, providers=["cpu"],
        )
        return MixedPrecision(converted, "modelopt.onnx.autocast " + _version("nvidia-modelopt"), keep, total, peak)
    from onnxconverter_common import float16

    converted = float16.convert_float_to_float16(
        model,
        keep_io_types=True,
        node_block_list=keep,
        max_finite_val=FP16_MAX,  # the default (1e4) would clip legitimate weights
    )
    converted = drop_fp16_round_trips(_restore_fp32_outputs(converted))
    return MixedPrecision(converted, "onnxconverter-common " + _version("onnxconverter-common"), keep, total, peak)


def _restore_fp32_outputs(model):
    """keep_io_types is lost when the node producing an output is blocked: onnxconverter-common then
    ends the graph with Cast(FP32->FP16) and declares the output FP16. Undo that cast."""
    import onnx

    for output in model.graph.output:
        if output.type.tensor_type.elem_type != onnx.TensorProto.FLOAT16:
            continue
        for node in model.graph.node:
            if node.op_type == "Cast" and node.output[0] == output.name:
                node.op_type = "Identity"
                del node.attribute[:]
                output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def drop_fp16_round_trips(model):
    """Remove Cast(FP32->FP16) -> Cast(FP16->FP32) pairs between two FP32 nodes.

    onnxconverter-common wraps every blocked node in casts, also between two blocked neighbours, so
    the very values that had to stay FP32 would pass through FP16 and overflow on a GPU.
    """
    import onnx

    FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    inferred = onnx.shape_inference.infer_shapes(model)
    elem = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.input)}
    outputs = {o.name for o in model.graph.output}

    def cast_to(node, dtype):
        return node.op_type == "Cast" and any(a.name == "to" and a.i == dtype for a in node.attribute)

    nodes = list(model.graph.node)
    users: dict[str, list] = {}
    for node in nodes:
        for name in node.input:
            users.setdefault(name, []).append(node)
    rename, dropped = {}, set()
    for down in nodes:
        if not cast_to(down, FLOAT16) or elem.get(down.input[0]) != FLOAT or down.output[0] in outputs:
            continue
        ups = [u for u in users.get(down.output[0], []) if cast_to(u, FLOAT)]
        for up in ups:
            if up.output[0] in outputs:  # keep the graph output's name: copy the FP32 value instead
                up.op_type, up.input[0] = "Identity", down.input[0]
                del up.attribute[:]
            else:
                rename[up.output[0]] = down.input[0]
                dropped.add(id(up))
        if len(ups) == len(users.get(down.output[0], [])):
            dropped.add(id(down))
    kept = [n for n in nodes if id(n) not in dropped]
    for node in kept:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def all_fp16(model):
    """Every node in FP16 (what a plain `--fp16` build risks), for the comparison that justifies mixing."""
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(model, keep_io_types=True, max_finite_val=FP16_MAX)


def run_true_fp16(model, inputs: np.ndarray, input_name: str, output_name: str) -> np.ndarray:
    """Run the graph node by node so each tensor is stored in its declared type (FP16 overflows to inf).

    Inside one node onnxruntime may compute in FP32, like a GPU kernel accumulating in FP32; between
    nodes the values are rounded to FP16, which onnxruntime's fused CPU execution skips.
    """
    import onnx
    from onnx import helper

    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in model.graph.node for attr in n.attribute):
        raise TritonizeError("the true-FP16 check does not support graphs with control flow (If/Loop/Scan)")
    inferred = onnx.shape_inference.infer_shapes(model)
    elem_type = {
        v.name: v.type.tensor_type.elem_type
        for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
    }
    initializers = {init.name: init for init in model.graph.initializer}
    last_use = {name: i for i, node in enumerate(model.graph.node) for name in node.input}
    values = {input_name: inputs}
    for i, node in enumerate(model.graph.node):
        feeds = [n for n in dict.fromkeys(node.input) if n and n not in initializers]
        missing = [n for n in (*feeds, *node.output) if n and n not in elem_type]
        if missing:
            raise TritonizeError(f"shape inference gave no type for {missing[0]}; cannot run the true-FP16 check")
        graph = helper.make_graph(
            [node],
            f"node_{i}",
            [helper.make_tensor_value_info(n, elem_type[n], None) for n in feeds],
            [helper.make_tensor_value_info(n, elem_type[n], None) for n in node.output if n],
            initializer=[initializers[n] for n in dict.fromkeys(node.input) if n in initializers],
        )
        single = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
        outputs = [n for n in node.output if n]
        results = ort_session(single, optimize=False).run(outputs, {n: values[n] for n in feeds})
        values.update(zip(outputs, results))
        for n in feeds:  # free what no later node reads
            if last_use.get(n, -1) <= i and n != output_name:
                values.pop(n, None)
    return np.asarray(values[output_name], dtype=np.float32)


def modelopt_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("modelopt") is not None and importlib.util.find_spec("modelopt.onnx") is not None


# ---------------------------------------------------------------------------------------------- INT8


def quantized_int8(source: Path, destination: Path, calibration: np.ndarray, input_name: str, work_dir: Path,
                   for_cpu: bool = False) -> str:
    """Write a Q/DQ INT8 model of `source` to `destination` (for TensorRT, or for onnxruntime's CPU
    kernels); returns the tool description."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    class Batches(CalibrationDataReader):
        def __init__(self, data: np.ndarray, batch: int = 8):
            self._batches: Iterable = iter([{input_name: data[i : i + batch]} for i in range(0, len(data), batch)])

        def get_next(self):
            return next(self._batches, None)

    prepared = work_dir / f".{destination.stem}.preprocessed.onnx"
    try:
        # Shape inference only: onnxruntime's graph optimizations would fold in CPU-specific fusions.
        quant_pre_process(str(source), str(prepared), skip_optimization=True)
        quantize_static(
            str(prepared),
            str(destination),
            Batches(calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8 if for_cpu else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"WeightSymmetric": True} if for_cpu else
                          {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
        )
    finally:
        prepared.unlink(missing_ok=True)
        for leftover in work_dir.glob("augmented_model*.onnx"):  # calibration scratch files of older releases
            leftover.unlink(missing_ok=True)
    return "onnxruntime.quantization.quantize_static " + _version("onnxruntime")


def qdq_facts(model) -> dict:
    """What the Q/DQ graph holds: counts, zero points all 0, per-channel weights (TensorRT's requirements)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    q = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    zero_points = [numpy_helper.to_array(inits[n.input[2]]) for n in (*q, *dq) if len(n.input) > 2 and n.input[2] in inits]
    per_channel = sum(1 for n in dq if n.input[0] in inits and numpy_helper.to_array(inits[n.input[1]]).size > 1)
    return {
        "quantize_nodes": len(q),
        "dequantize_nodes": len(dq),
        "per_channel_weight_dq": per_channel,
        "zero_points_all_zero": all(not np.any(z) for z in zero_points),
        "zero_point_dtypes": sorted({str(z.dtype) for z in zero_points}),
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


# --------------------------------------------------------------------------------------------- opset

# Reduce ops whose `axes` became an input in opset 18 (ReduceSum's in 13): converted down, they get it
# back as an attribute, and lose `noop_with_empty_axes`, which they did not have before 18.
_AXES_INPUT_FROM_18 = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                       "ReduceLogSumExp", "ReduceSumSquare"}


def opset_converted(model, opset: int):
    """`model` in ONNX `opset` (onnx.version_converter), checked by onnx.checker.

    onnx 1.23's 18 -> 17 adapters move a Reduce node's `axes` input into the attribute but keep
    `noop_with_empty_axes`, which opset 17 does not know: 0 (the exporter's value) is opset 17's only
    behaviour and is dropped; 1 cannot be said in opset 17 and is refused.
    """
    import onnx
    from onnx import version_converter

    converted = version_converter.convert_version(model, opset)
    for node in converted.graph.node:
        if node.op_type not in _AXES_INPUT_FROM_18 or opset >= 18:
            continue
        for attribute in [a for a in node.attribute if a.name == "noop_with_empty_axes"]:
            if attribute.i:
                raise TritonizeError(f"{node.name} ({node.op_type}) reduces nothing when its axes are empty, which "
                                     f"ONNX opset {opset} cannot express")
            node.attribute.remove(attribute)
    onnx.checker.check_model(converted)
    return converted
