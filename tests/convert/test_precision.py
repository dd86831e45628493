"""FP16 overflow: hidden by onnxruntime's CPU kernels, caught by the node-by-node run, avoided by mixing."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tritonize.convert import precision as prec


def overflowing_model() -> onnx.ModelProto:
    """x * 300 * 300 / 1e4: the middle value (~9e4 for x ~ 1) exceeds FP16's 65504."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("a", 300.0), ("b", 300.0), ("c", 1e4))]
    nodes = [helper.make_node("Mul", ["x", "a"], ["h1"], name="mul1"),
             helper.make_node("Mul", ["h1", "b"], ["h2"], name="mul2"),
             helper.make_node("Div", ["h2", "c"], ["y"], name="div")]
    graph = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], initializer=consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_true_fp16_catches_what_onnxruntime_hides_and_mixing_avoids_it():
    model = overflowing_model()
    x = np.linspace(0.8, 1.2, 8, dtype=np.float32).reshape(2, 4)
    exact = x * 9.0
    naive = prec.all_fp16(model)
    hidden = prec.run_onnx(prec.ort_session(naive), x, "x", "y")
    assert np.isfinite(hidden).all()  # onnxruntime CPU keeps the FP16 graph's intermediate in FP32
    assert not np.isfinite(prec.run_true_fp16(naive, x, "x", "y")).all()  # on a GPU: inf

    mixed = prec.mixed_fp16(model, x, "x", use_modelopt=False)
    assert mixed.fp32_nodes == ["mul2", "div"] and mixed.nodes_total == 3
    out = prec.run_true_fp16(mixed.model, x, "x", "y")
    assert np.isfinite(out).all() and np.allclose(out, exact, rtol=1e-2)


def test_activation_ranges_are_fp32_maxima():
    ranges = prec.activation_ranges(overflowing_model(), np.full((1, 4), 2.0, np.float32), "x")
    assert ranges == {"h1": 600.0, "h2": 180000.0, "y": 18.0}


def test_fp16_round_trips_between_fp32_nodes_are_removed():
    """onnxconverter-common casts a blocked node's output to FP16 even when every consumer is blocked
    too (seen on wide_resnet101_2: 8.6e4 -> inf); those round trips must go."""
    to16, to32 = TensorProto.FLOAT16, TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Cast", ["r"], ["r16"], to=to16, name="down"),
             helper.make_node("Cast", ["r16"], ["r32"], to=to32, name="up"),
             helper.make_node("Add", ["r32", "r32"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "trip", [helper.make_tensor_value_info("x", to32, [2])],
                              [helper.make_tensor_value_info("y", to32, [2])])
    model = prec.drop_fp16_round_trips(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))
    assert [n.name for n in model.graph.node] == ["relu", "add"] and list(model.graph.node[1].input) == ["r", "r"]
    x = np.array([9e4, 1.0], np.float32)
    assert np.allclose(prec.run_true_fp16(model, x, "x", "y"), 2 * x)


def test_blocked_last_node_keeps_an_fp32_output():
    """When the node producing the output stays FP32, the output must stay FP32 (keep_io_types)."""
    model = overflowing_model()
    x = np.full((1, 4), 30.0, np.float32)  # the output itself (8100) is beyond DATA_MAX: div stays FP32
    mixed = prec.mixed_fp16(model, x, "x", use_modelopt=False)
    assert "div" in mixed.fp32_nodes
    assert mixed.model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    big = np.full((1, 4), 1e4, np.float32)  # output 9e4: finite only if it never passes through FP16
    assert np.allclose(prec.run_true_fp16(mixed.model, big, "x", "y"), 9e4)
