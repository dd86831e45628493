"""`repo check` reads an ONNX graph as Triton's onnxruntime backend does: through onnxruntime's own view of it (the
session's inputs and outputs, after its shape inference), for graphs as real exporters write them (torch.onnx's dynamo
and legacy exporters at several opsets, onnx's own test models) and for generated ones.

The backend (onnxruntime_backend src/onnxruntime.cc ValidateInputs/ValidateOutputs) compares the config with the
session's shapes through the backend library's CompareDimsSupported: with batching the first axis must be variable;
then the ranks are equal and a fixed model axis equals the config's dim. Inputs take any config dim on a variable
model axis; outputs are compared exactly (`compare_exact`: a variable axis wants -1, a fixed one its size).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import given, strategies as st
from tritonclient.grpc import model_config_pb2 as pb

from tests.onnx_exports import EXPORTS, ONNX_TEST_MODELS, exported, onnx_test_model
from tritonize.repository_builder.checker import check_repository

TRITON_TYPES = {"tensor(float)": pb.TYPE_FP32, "tensor(int64)": pb.TYPE_INT64, "tensor(float16)": pb.TYPE_FP16,
                "tensor(int32)": pb.TYPE_INT32, "tensor(uint8)": pb.TYPE_UINT8, "tensor(bool)": pb.TYPE_BOOL}


def session_view(data: bytes):
    """{role: [(name, triton type, dims with -1 for a variable axis)]} as onnxruntime's session sees the graph."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # (an initializer listed as an input draws a warning)
    session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    dims = lambda shape: [d if isinstance(d, int) else -1 for d in shape]  # noqa: E731
    return {role: [(t.name, TRITON_TYPES[t.type], dims(t.shape)) for t in tensors]
            for role, tensors in (("input", session.get_inputs()), ("output", session.get_outputs()))}


def accepted(model: list[int], config: list[int], max_batch: int, exact: bool) -> bool:
    """The backend library's CompareDimsSupported (model: the session's dims, -1 variable)."""
    if max_batch > 0:
        if not model or model[0] != -1:
            return False
        config = [-1, *config]
    return len(model) == len(config) and all(m == c if exact or m != -1 else True for m, c in zip(model, config))


def lint(data: bytes, max_batch: int, tensors: dict[str, list[tuple[str, int, list[int]]]]):
    """The errors `repo check` finds in an onnx_model of this graph and config."""
    cfg = pb.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=max_batch)
    for role, declared in tensors.items():
        for name, dtype, dims in declared:
            getattr(cfg, role).add(name=name, data_type=dtype, dims=dims or [1])
    cfg.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "m"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(text_format.MessageToString(cfg))
        (model / "1" / "model.onnx").write_bytes(data)
        return [f.message for f in check_repository(model.parent) if f.severity == "error"]


def config_from_view(view, max_batch: int):
    """The config that says what the session says (the batch axis left out when batching)."""
    return {role: [(name, dtype, dims[1:] if max_batch else dims) for name, dtype, dims in tensors]
            for role, tensors in view.items()}


# --------------------------------------------------------------------------------------------- generated graphs
AXIS = st.one_of(st.integers(1, 4), st.sampled_from(["N", "K", None]))  # fixed, named symbolic, unknown
DECLARED = st.sampled_from(["as inferred", "renamed symbolic", "unknown dims"])


@st.composite
def graphs(draw):
    """x -> Identity -> y, and x -> MatMul(w) -> z with w an initializer (also listed as an input for an old IR), each
    output's shape declared as an exporter may: as inferred, with a symbolic name for a known size, or unknown."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = draw(st.lists(AXIS, min_size=2, max_size=3))
    cols = draw(st.integers(1, 3))
    w = numpy_helper.from_array(np.ones((shape[-1] if isinstance(shape[-1], int) else 2, cols), np.float32), "w")
    if not isinstance(shape[-1], int):
        shape[-1] = 2  # MatMul needs the inner size
    ir = draw(st.sampled_from([4, 7, 8, 10]))
    initializer_input = draw(st.booleans())

    def value(name, dims):
        info = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
        if dims is not None:
            info.type.tensor_type.shape.SetInParent()
            for d in dims:
                dim = info.type.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif d:
                    dim.dim_param = d
        return info

    def declared(dims):
        how = draw(DECLARED)
        if how == "renamed symbolic":
            return [f"s{i}" if isinstance(d, int) else d for i, d in enumerate(dims)]
        if how == "unknown dims":
            return [None for _ in dims]
        return dims

    z_dims = [*shape[:-1], cols]
    inputs = [value("x", shape)] + ([value("w", [w.dims[0], cols])] if initializer_input else [])
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("MatMul", ["x", "w"], ["z"])]
    graph = helper.make_graph(nodes, "g", inputs, [value("y", declared(shape)), value("z", declared(z_dims))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir
    onnx.checker.check_model(model)
    return model.SerializeToString()


@given(data=graphs(), max_batch=st.sampled_from([0, 4]), change=st.tuples(st.sampled_from(["none", "to -1", "to 3"]),
                                                                          st.integers(0, 5)))
def test_a_generated_graph_is_read_as_onnxruntimes_session_reads_it(data, max_batch, change):
    view = session_view(data)
    tensors = config_from_view(view, max_batch)
    how, pick = change
    flat = [(role, i, k) for role in tensors for i, (_, _, dims) in enumerate(tensors[role]) for k in range(len(dims))]
    if how != "none" and flat:
        role, i, k = flat[pick % len(flat)]
        name, dtype, dims = tensors[role][i]
        tensors[role][i] = (name, dtype, [*dims[:k], -1 if how == "to -1" else 3, *dims[k + 1:]])
    errors = lint(data, max_batch, tensors)
    for role, declared in tensors.items():
        model = {name: dims for name, _, dims in view[role]}
        for name, _, dims in declared:
            expected = accepted(model[name], dims or [1], max_batch, exact=role == "output")
            found = [e for e in errors if f"{role} {name!r}" in e]
            assert (not found) == expected, (role, name, model[name], dims, max_batch, errors)


# ----------------------------------------------------------------------------------- graphs from real exporters
def _agrees(data: bytes, max_batch: int) -> None:
    """The config that says what the session says passes; one dim changed as a person might (an input's or an
    output's last dim to -1, or to another size) is refused exactly when the backend refuses it."""
    view = session_view(data)
    assert lint(data, max_batch, config_from_view(view, max_batch)) == []
    for role in ("input", "output"):
        for new in (-1, 7):
            tensors = config_from_view(view, max_batch)
            name, dtype, dims = tensors[role][0]
            if not dims:
                continue
            tensors[role][0] = (name, dtype, [*dims[:-1], new])
            model = dict((n, d) for n, _, d in view[role])[name]
            errors = [e for e in lint(data, max_batch, tensors) if f"{role} {name!r}" in e]
            assert (not errors) == accepted(model, tensors[role][0][2], max_batch, exact=role == "output"), (role, new, errors)


@pytest.mark.parametrize("export", EXPORTS)
def test_an_export_of_torch_onnx_is_read_as_onnxruntimes_session_reads_it(export):
    data = exported(export)
    batching = "fixed-batch" not in export
    _agrees(data, MAX_BATCH if batching else 0)
    if batching:
        _agrees(data, 0)  # without a batch axis: the batch is one of the dims, variable
    else:
        view = config_from_view(session_view(data), 0)
        errors = lint(data, MAX_BATCH, {role: [(n, t, d[1:]) for n, t, d in tensors] for role, tensors in view.items()})
        assert errors == ["input 'input': the graph's batch axis is fixed at 2, but max_batch_size is 4",
                          "output 'output': the graph's batch axis is fixed at 2, but max_batch_size is 4"]


@pytest.mark.parametrize("name", ONNX_TEST_MODELS)
def test_an_onnx_test_model_is_read_as_onnxruntimes_session_reads_it(name):
    _agrees(onnx_test_model(name).read_bytes(), 0)


MAX_BATCH = 4


def _matmul_with_a_large_weight(declared) -> bytes:
    """x [N, 2] -> MatMul with a [2, 1100] weight (too large to keep its values for the inference) -> y."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)
    w = numpy_helper.from_array(np.zeros((2, 1100), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def _through_a_local_function(declared) -> bytes:
    """x [N, 4] -> a model-local function (Add(x, x), as exporters write functions) -> y."""
    from onnx import TensorProto, helper

    twice = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 13)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)
    graph = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="local")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
                              functions=[twice])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("graph, sizes", [(_matmul_with_a_large_weight, [2, 1100]), (_through_a_local_function, [4, 4])])
def test_an_output_named_symbolically_is_read_with_the_size_onnxruntime_infers(graph, sizes):
    """Through a large weight (whose values the inference leaves out, not its type) and through a local function."""
    data = graph(["N", "K"])
    size = sizes[1]
    assert session_view(data)["output"] == [("y", pb.TYPE_FP32, [-1, size])]
    tensors = {"input": [("x", pb.TYPE_FP32, [sizes[0]])], "output": [("y", pb.TYPE_FP32, [size])]}
    assert lint(data, MAX_BATCH, tensors) == []
    tensors["output"] = [("y", pb.TYPE_FP32, [-1])]
    assert lint(data, MAX_BATCH, tensors) == [f"output 'y': config dims [-1] do not match the graph's [{size}] "
                                              "(batch axis excluded)"]


def _scalar() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_scalar_tensor_takes_dims_of_one_without_batching_and_no_batch_axis():
    """onnxruntime_backend: a scalar graph tensor takes config dims that are all 1; with batching every request of a
    batch above 1 would fail (its batch axis has nowhere to go)."""
    data = _scalar()
    ones = {role: [(name, pb.TYPE_FP32, [1])] for role, name in (("input", "x"), ("output", "y"))}
    assert lint(data, 0, ones) == []
    assert lint(data, 0, {"input": [("x", pb.TYPE_FP32, [2])], "output": [("y", pb.TYPE_FP32, [1])]}) == [
        "input 'x': config dims [2] do not match the graph's [] (batch axis excluded)"]
    cfg = pb.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=MAX_BATCH)
    cfg.input.add(name="x", data_type=pb.TYPE_FP32, dims=[1])
    cfg.output.add(name="y", data_type=pb.TYPE_FP32, dims=[1])
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "m"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(text_format.MessageToString(cfg))
        (model / "1" / "model.onnx").write_bytes(data)
        found = [(f.message, f.fix) for f in check_repository(model.parent) if f.severity == "error"]
    assert found == [(f"{role} {name!r}: the graph's tensor is a scalar (no batch axis), but max_batch_size is 4",
                      "set max_batch_size: 0") for role, name in (("input", "x"), ("output", "y"))]


def _reshaped(declared) -> bytes:
    """x [N, 2, 3] -> Reshape to [-1, 6] -> y, y's shape declared as `declared` (None: not at all), with weights too large
    to keep their values for the inference and one a Reshape reads its shape from."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)
    big = numpy_helper.from_array(np.zeros((40, 40), np.float32), "unused_weight")  # 1600 values: left out
    shape = numpy_helper.from_array(np.array([-1, 6], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g", [x], [y], [shape, big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("declared, session", [
    (["N", 6], [-1, 6]),  # as inferred
    (["N", "K"], [-1, 6]),  # a symbolic name for the size the Reshape gives
    (None, [-1, 6]),  # no shape at all (onnx's checker wants one; onnxruntime reads it without)
    (["N", 5], [-1, -1]),  # declared otherwise than inferred: onnxruntime leaves the dim unknown
    (["N", 6, 1], []),  # another rank: onnxruntime keeps no shape
])
def test_an_output_shape_is_read_as_onnxruntime_merges_it_with_its_inference(declared, session):
    data = _reshaped(declared)
    assert session_view(data)["output"] == [("y", pb.TYPE_FP32, session)]
    for dims in ([6], [-1], [5], [6, 1]):
        errors = [e for e in lint(data, MAX_BATCH, {"input": [("x", pb.TYPE_FP32, [2, 3])],
                                                    "output": [("y", pb.TYPE_FP32, dims)]}) if "output 'y'" in e]
        assert (not errors) == accepted(session, dims, MAX_BATCH, exact=True), (dims, errors)
