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
