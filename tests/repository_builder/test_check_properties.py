"""`repo check` by property: generated configs are refused exactly when Triton's own rules refuse them, and
ONNX graphs in every input layout (any rank, each axis fixed, named or unnamed symbolic) are matched against
config dims as Triton's onnxruntime backend matches them.

The rules below are read from Triton's source (triton-inference-server/core src/model_config_utils.cc:
ValidateModelConfig, ValidateIOShape, NormalizeInstanceGroup; the backends' CompareDimsSupported), written
here independently of checker.py. Triton stops at its first error; the checker reports them all, so what is
compared: refused or not, no finding Triton has no rule for, and Triton's first error among the findings.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import given, strategies as st
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.repository_builder.checker import check_repository

TYPED = {"tensorrt": "tensorrt_plan", "onnxruntime": "onnxruntime_onnx", "pytorch": "pytorch_libtorch",
         "tensorflow": "tensorflow_graphdef"}  # the backends Triton's core knows by type, and a platform of each
KNOWN_PLATFORMS = {"tensorrt_plan", "onnxruntime_onnx", "pytorch_libtorch", "tensorflow_graphdef", "tensorflow_savedmodel"}
BACKEND_LIBRARIES = {*TYPED, "python", "openvino", "fil", "dali", "identity"}  # backends Triton ships


def triton_refusal(cfg: pb.ModelConfig) -> list[str]:
    """Triton's rules, in its order: the kinds of error it has for this config (it reports the first)."""
    errors = []
    platform_type = {p: b for b, p in TYPED.items()} | {"tensorflow_savedmodel": "tensorflow"}
    if not cfg.platform and not cfg.backend:
        errors.append("platform")
    elif not cfg.backend and cfg.platform not in KNOWN_PLATFORMS:  # nothing to load it with
        errors.append("platform")
    elif cfg.backend in TYPED and cfg.platform and platform_type.get(cfg.platform) != cfg.backend:
        errors.append("platform")  # "unexpected 'platform' and 'backend' pair"
    elif cfg.backend and cfg.backend not in BACKEND_LIBRARIES:
        errors.append("platform")  # no such backend library to load
    if cfg.max_batch_size < 0:
        errors.append("max_batch_size")
    if cfg.HasField("dynamic_batching") and any(p <= 0 or p > cfg.max_batch_size
                                                for p in cfg.dynamic_batching.preferred_batch_size):
        errors.append("preferred")
    for t in [*cfg.input, *cfg.output]:
        if not t.dims or any(d < 1 and d != -1 for d in t.dims):
            errors.append("dims")
    backend = cfg.backend or platform_type.get(cfg.platform)
    if backend == "tensorrt" and any(g.kind == pb.ModelInstanceGroup.KIND_CPU for g in cfg.instance_group):
        errors.append("kind")  # the TensorRT backend runs on GPUs only
    return errors  # (an instance count < 1 is normalized to 1: never an error)


KEYWORDS = {"platform": ("platform", "backend"), "max_batch_size": ("max_batch_size is",),
            "preferred": ("preferred_batch_size", "dynamic_batching with max_batch_size 0"), "dims": ("has dims",),
            "kind": ("KIND_CPU",)}


def _kind_of(message: str) -> str | None:
    return next((kind for kind, words in KEYWORDS.items() if any(w in message for w in words)), None)


dims = st.lists(st.sampled_from([-2, -1, 0, 1, 3, 224]), max_size=3)


@st.composite
def configs(draw):
    cfg = pb.ModelConfig(name="m")
    cfg.platform = draw(st.sampled_from(["", *KNOWN_PLATFORMS, "onnx", "tensorrt"]))
    cfg.backend = draw(st.sampled_from(["", *TYPED, "python", "openvino", "onnxruntimee"]))
    cfg.max_batch_size = draw(st.sampled_from([-1, 0, 1, 8]))
    if draw(st.booleans()):
        cfg.dynamic_batching.SetInParent()
        preferred = draw(st.lists(st.sampled_from([-1, 0, 1, 4, 8, 9]), max_size=2))
        if cfg.max_batch_size == 0 and not preferred:
            preferred = [1]  # (no rule of Triton's read for a preferred-less batcher at 0)
        cfg.dynamic_batching.preferred_batch_size.extend(preferred)
    for role, n in (("input", draw(st.integers(1, 2))), ("output", 1)):
        for i in range(n):
            tensor = getattr(cfg, role).add(name=f"{role}{i}", data_type=pb.TYPE_FP32)
            tensor.dims.extend(draw(dims))
    for _ in range(draw(st.integers(0, 2))):
        cfg.instance_group.add(count=draw(st.sampled_from([-1, 0, 1, 2])),
                               kind=draw(st.sampled_from([pb.ModelInstanceGroup.KIND_CPU, pb.ModelInstanceGroup.KIND_GPU])))
    return cfg


def _check(cfg: pb.ModelConfig, files: dict[str, bytes] | None = None):
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "models" / cfg.name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(text_format.MessageToString(cfg))
        for name, data in (files or {}).items():
            (model / "1" / name).write_bytes(data)
        return check_repository(model.parent)


@given(cfg=configs())
def test_a_generated_config_is_refused_exactly_when_triton_refuses_it(cfg):
    expected = triton_refusal(cfg)
    errors = [f.message.removeprefix("config.pbtxt: ") for f in _check(cfg)
              if f.severity == "error" and f.message.startswith("config.pbtxt: ")]
    kinds = [_kind_of(m) for m in errors]
    assert None not in kinds, errors  # every finding of these rules names a rule
    assert set(kinds) <= set(expected), (errors, expected, str(cfg))  # no refusal that Triton does not make
    assert bool(errors) == bool(expected), (errors, expected, str(cfg))
    if expected:
        assert expected[0] in kinds or expected[0] == "preferred" and cfg.max_batch_size < 0, (errors, expected)


# --------------------------------------------------------------------------------------------- ONNX layouts

axis = st.one_of(st.integers(1, 4), st.sampled_from(["batch", "N", None]))  # fixed, named symbolic, unnamed symbolic


@st.composite
def graphs_and_configs(draw):
    shape = draw(st.lists(axis, max_size=4))
    max_batch = draw(st.sampled_from([0, 4]))
    dims = [-1 if not isinstance(d, int) else d for d in (shape[1:] if max_batch and shape else shape)]
    change = draw(st.sampled_from(["same", "one to -1", "one to another size", "drop one", "add one", "batch fixed"]))
    if change == "one to -1" and dims:
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    elif change == "one to another size" and dims:
        i = draw(st.integers(0, len(dims) - 1))
        dims[i] = (dims[i] % 4) + 1 if dims[i] > 0 else draw(st.integers(1, 4))
    elif change == "drop one" and dims:
        dims.pop(draw(st.integers(0, len(dims) - 1)))
    elif change == "add one":
        dims.append(draw(st.sampled_from([-1, 2])))
    elif change == "batch fixed" and shape:
        shape[0] = draw(st.integers(1, 4))
    return shape, max_batch, dims or [1]


def _onnx(shape) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    def value(name):
        info = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
        tensor_shape = info.type.tensor_type.shape
        tensor_shape.SetInParent()
        for d in shape:
            dim = tensor_shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif d is not None:
                dim.dim_param = d
        return info

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [value("x")], [value("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _triton_onnx_dims_ok(graph_shape, max_batch: int, dims: list[int]) -> bool:
    """The onnxruntime backend's CompareDimsSupported: with batching the graph's first axis is variable; then the
    ranks are equal and each fixed graph axis equals the config's dim (a variable one takes any). A scalar tensor
    (ValidateInputs) takes config dims that are all 1."""
    model = [-1 if not isinstance(d, int) else d for d in graph_shape]
    if not model and max_batch == 0:  # a scalar: only config dims of 1 (its dims are not compared)
        return all(d == 1 for d in dims)
    if max_batch > 0:
        if not model or model[0] != -1:
            return False
        model = model[1:]
    return len(model) == len(dims) and all(m == -1 or m == d for m, d in zip(model, dims))


@given(case=graphs_and_configs())
def test_onnx_dims_in_any_layout_are_accepted_exactly_as_tritons_onnxruntime_backend_accepts_them(case):
    shape, max_batch, dims = case
    data = _onnx(shape)
    cfg = pb.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=max_batch)
    cfg.input.add(name="x", data_type=pb.TYPE_FP32, dims=dims)
    cfg.output.add(name="y", data_type=pb.TYPE_FP32, dims=dims)
    cfg.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    findings = [f for f in _check(cfg, {"model.onnx": data}) if f.severity == "error" and "input 'x'" in f.message]
    accepted = _triton_onnx_dims_ok(shape, max_batch, dims)
    assert (not findings) == accepted, (shape, max_batch, dims, [f.message for f in findings])
    if accepted:  # and onnxruntime itself runs a request of the configured shape
        import onnxruntime

        session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        request = ([2] if max_batch else []) + [d if d > 0 else 3 for d in dims]
        request = [g if isinstance(g, int) else r for g, r in zip(shape, request)] if len(shape) == len(request) else request
        x = np.ones(request, np.float32)
        assert session.run(None, {"x": x})[0].shape == x.shape


@pytest.mark.parametrize("platform, backend", [("pytorch_libtorch", "onnxruntime"), ("ensemble", "python"),
                                               ("tensorrt_plan", "onnxruntime")])
def test_a_platform_with_another_backend_is_refused_by_name(platform, backend):
    cfg = pb.ModelConfig(name="m", platform=platform, backend=backend, max_batch_size=1)
    cfg.input.add(name="x", data_type=pb.TYPE_FP32, dims=[1])
    cfg.output.add(name="y", data_type=pb.TYPE_FP32, dims=[1])
    messages = [f.message for f in _check(cfg)]
    assert f"config.pbtxt: platform {platform!r} with backend {backend!r} (Triton refuses the pair)" in messages


def test_a_config_that_declares_no_dims_is_refused():
    cfg = pb.ModelConfig(name="m", backend="python", max_batch_size=0)
    cfg.input.add(name="x", data_type=pb.TYPE_FP32)
    cfg.output.add(name="y", data_type=pb.TYPE_FP32, dims=[0])
    messages = [f.message for f in _check(cfg) if f.severity == "error"]
    assert "config.pbtxt: input 'x' has dims []; Triton wants at least one, each >= 1 or -1 (variable)" in messages
    assert "config.pbtxt: output 'y' has dims [0]; Triton wants at least one, each >= 1 or -1 (variable)" in messages
