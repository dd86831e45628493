"""The emulated TensorRT's version rules (tests/emulation/rules.py, written from NVIDIA's documentation)
and their cross-check against tritonize's own (tritonize/releases.py, the convert stage): where both
speak, they must agree."""

from __future__ import annotations

import itertools

import pytest

from tests.emulation import rules
from tritonize.releases import load_releases, tensorrt_loads

VERSIONS = sorted({r.tensorrt for r in load_releases() if r.tensorrt and len(rules.parts(r.tensorrt)) == 4}
                  | {"8.5.3.1", "8.6.1.6", "10.0.1.6", "10.16.1.11", "11.0.0.114", "11.4.0.106"}, key=rules.parts)


def test_every_rule_cites_its_sources():
    for name, rule in rules.data().items():
        if name != "about":
            assert rule["rule"] and rule["sources"], name


@pytest.mark.parametrize("compatible", [False, True])
def test_deserialization_agrees_with_tritonize_releases(compatible):
    """For every pair of TensorRT versions the release table and the inventories know: the emulation
    deserializes a plan (trusted, host code allowed) exactly when tritonize says it loads."""
    for built, served in itertools.product(VERSIONS, repeat=2):
        emulated = rules.deserialize_problem(built, served, compatible, host_code_allowed=True) is None
        assert emulated == tensorrt_loads(built, served, compatible), (built, served, compatible)


LEAN = "the plan is version-compatible: it carries the lean runtime, which runs only with engine_host_code_allowed = True"


@pytest.mark.parametrize("built,runtime,compatible,allowed,problem", [
    ("10.5.0.18", "10.5.0.18", False, False, None),
    ("8.6.1.6", "8.6.1.2", False, True,  # the build number counts (server#5975)
     "the plan was built with TensorRT 8.6.1.6; this runtime is 8.6.1.2 (a plan loads only in the version that built it)"),
    ("10.5.0.18", "10.5.0.18", True, False, LEAN),
    ("10.5.0.18", "10.8.0.43", True, False, LEAN),
    ("10.5.0.18", "10.8.0.43", True, True, None),
    ("10.8.0.43", "10.5.0.18", True, True, "a version-compatible plan of TensorRT 10.8.0.43 does not load in an older runtime (10.5.0.18)"),
    ("8.5.3.1", "8.6.3.1", True, True, "version compatibility needs TensorRT 8.6 or newer on both sides (plan 8.5.3.1, runtime 8.6.3.1)"),
    ("8.6.3.1", "8.5.3.1", True, True, "version compatibility needs TensorRT 8.6 or newer on both sides (plan 8.6.3.1, runtime 8.5.3.1)"),
    ("8.6.3.1", "9.3.0.1", True, True, None),
    ("8.6.3.1", "10.5.0.18", True, True, None),
    ("8.6.3.1", "11.4.0.106", True, True, "a version-compatible plan of TensorRT 8 does not load in TensorRT 11"),
    ("10.16.1.11", "11.0.0.114", True, True, None),
    ("11.0.0.114", "11.4.0.106", True, True, None),
    ("10.3.0.26", "10.5.0.18", True, True, None),
])
def test_deserialize_rule(built, runtime, compatible, allowed, problem):
    assert rules.deserialize_problem(built, runtime, compatible, allowed) == problem


@pytest.mark.parametrize("version,opset", [("8.6.1", 17), ("8.6.3.1", 17), ("10.0.1.6", 20), ("10.5.0.18", 20),
                                           ("10.15.1", 24), ("10.16.1.11", 24), ("11.0.0.114", 24), ("11.4.0.106", 24),
                                           ("11.5.0", 25), ("9.3.0", None), ("8.5.3.1", None),
                                           ("10.15", 24), ("11.5", 25), ("8.6", 17)])  # an entry's own version too
def test_max_onnx_opset(version, opset):
    assert rules.max_onnx_opset(version) == opset


@pytest.mark.parametrize("version,explicit,strong", [("8.6.3.1", True, False), ("10.5.0.18", False, False),
                                                     ("11.0.0.114", False, True)])
def test_typing_and_batch_rules(version, explicit, strong):
    assert rules.needs_explicit_batch(version) == explicit
    assert rules.always_strongly_typed(version) == strong


def test_precision_flags():
    assert rules.precision_flag_problem(False, {"FP16", "INT8", "TF32"}) is None
    assert rules.precision_flag_problem(True, {"TF32", "VERSION_COMPATIBLE"}) is None
    assert rules.precision_flag_problem(True, {"TF32", "INT8", "FP16"}) == (
        "setting FP16, INT8 is not allowed if the network is strongly typed")


@pytest.mark.parametrize("shape,problem", [
    ((1, 3, 8, 8), None), ((4, 3, 8, 8), None), ((2, 3, 8, 8), None),
    ((5, 3, 8, 8), "dimension 0 is 5, outside the optimization profile's range [1, 4]"),
    ((0, 3, 8, 8), "dimension 0 is 0, outside"),
    ((2, 3, 8, 9), "dimension 3 is 9, the network fixes it at 8"),
    ((2, 3, 8), "has rank 3, the input has rank 4"),
])
def test_input_shape_rule(shape, problem):
    found = rules.input_shape_problem(shape, (-1, 3, 8, 8), (1, 3, 8, 8), (4, 3, 8, 8))
    assert found is None if problem is None else problem in found
    assert rules.input_shape_problem((2, 3, 8), (-1, 3, 8, 8), (1, 3, 8, 8), (4, 3, 8, 8)) == (
        "shape [2, 3, 8] has rank 3, the input has rank 4")


def test_output_allocator_order():
    assert rules.output_allocator_calls("8.6.3.1") == ["reallocate_output", "notify_shape"]
    assert rules.output_allocator_calls("10.5.0.18") == ["reallocate_output_async", "notify_shape"]
    assert rules.output_allocator_calls("11.4.0.106") == ["reallocate_output_async", "notify_shape"]


@pytest.mark.parametrize("level,built,running,problem", [
    ("NONE", (8, 6), (8, 6), None), ("NONE", (8, 6), (8, 9), "built for compute capability 8.6, this GPU has 8.9"),
    ("AMPERE_PLUS", (8, 6), (9, 0), None), ("AMPERE_PLUS", (8, 0), (8, 0), None),
    ("AMPERE_PLUS", (8, 6), (7, 5), "needs compute capability 8.0 or newer, this GPU has 7.5"),
])
def test_hardware_rule(level, built, running, problem):
    found = rules.hardware_problem(level, built, running)
    assert found is None if problem is None else problem in found
    assert rules.hardware_problem("NONE", (8, 6), (9, 0)) == (
        "the plan was built for compute capability 8.6, this GPU has 9.0 (build with hardware compatibility to move "
        "plans between GPUs)")
    assert rules.hardware_problem("AMPERE_PLUS", (8, 6), (7, 5)) == (
        "an AMPERE_PLUS plan needs compute capability 8.0 or newer, this GPU has 7.5")


@pytest.mark.parametrize("version,chosen", [
    ("8.6.3.1", ["8.6.1"]), ("8.6.1.6", ["8.6.1"]), ("10.0.1.6", ["10.0.1"]), ("10.5.0.18", ["10.0.1", "10.16.1.11"]),
    ("10.16.1.11", ["10.16.1.11"]), ("10.17.0", ["10.16.1.11"]), ("11.2.0", ["11.0.0.114", "11.4.0.106"]),
    ("11.5.0", ["11.4.0.106"]), ("8.7.0", ["8.6.1"]), ("8.5.3.1", []), ("12.0.0", []),
])
def test_inventory_choice(version, chosen):
    available = ["8.6.1", "10.0.1", "10.16.1.11", "11.0.0.114", "11.4.0.106"]
    assert rules.inventory_versions(version, available) == chosen


def test_version_parts():
    assert rules.parts("10.5.0.18") == (10, 5, 0, 18) and rules.parts("9.3.0.post12.dev1") == (9, 3, 0)


F16, I8, OBEY = {"FP16"}, {"FP16", "INT8"}, {"FP16", "OBEY_PRECISION_CONSTRAINTS"}


@pytest.mark.parametrize("op,out,strong,flags,pinned,dq,fp32,runs", [
    # integer and boolean tensors keep their type, whatever the flags; other types read as FLOAT
    ("Relu", "INT8", False, F16, None, False, False, "INT8"), ("Cast", "INT32", False, F16, None, False, False, "INT32"),
    ("Shape", "INT64", True, set(), None, False, False, "INT64"), ("Equal", "BOOL", False, I8, "HALF", True, True, "BOOL"),
    ("Cast", "UINT8", False, F16, None, False, False, "FLOAT"),
    # strongly typed: the ONNX type, INT8 after a QuantizeLinear; pins and flags are not consulted
    ("QuantizeLinear", "FLOAT", True, set(), None, False, False, "INT8"),
    ("Conv", "FLOAT", True, OBEY, "HALF", True, False, "FLOAT"), ("Conv", "HALF", True, set(), "FLOAT", False, True, "HALF"),
    # weakly typed: a pin binds only with OBEY_PRECISION_CONSTRAINTS, and before an FP32 kernel
    ("Conv", "FLOAT", False, OBEY, "FLOAT", False, False, "FLOAT"), ("Conv", "FLOAT", False, F16, "FLOAT", False, False, "HALF"),
    ("Softmax", "FLOAT", False, OBEY, "HALF", False, True, "HALF"), ("Softmax", "FLOAT", False, F16, None, False, True, "FLOAT"),
    # INT8: only convolutions and matrix multiplies fed by a DequantizeLinear
    ("Conv", "FLOAT", False, I8, None, True, False, "INT8"), ("Gemm", "FLOAT", False, I8, None, True, False, "INT8"),
    ("MatMul", "FLOAT", False, {"INT8"}, None, True, False, "INT8"), ("Relu", "FLOAT", False, I8, None, True, False, "HALF"),
    ("Conv", "FLOAT", False, I8, None, False, False, "HALF"), ("Conv", "FLOAT", False, {"INT8"}, None, False, False, "FLOAT"),
    ("Conv", "FLOAT", False, I8, None, True, True, "FLOAT"),
    # no precision flag: the output's own type
    ("Relu", "FLOAT", False, set(), None, False, False, "FLOAT"), ("Relu", "HALF", False, set(), None, False, False, "HALF"),
])
def test_layer_precision_rule(op, out, strong, flags, pinned, dq, fp32, runs):
    assert rules.layer_precision(op, out, strong, flags, pinned, dq, fp32) == runs


@pytest.mark.parametrize("source", ["fixtures", "nvidia"])
def test_the_inspectors_formats_and_layer_types_are_those_of_real_engines(source):
    """The emulated inspector writes the formats and layer types real engines show: those of our fixtures
    (tests/data/nvidia_facts/), and of NVIDIA's recorded engines where a copy is at hand (tests/nvidia_engines.py)."""
    import json

    from tests.nvidia_engines import ENGINES, fixture, nvidia_engine

    texts = [fixture(n) for n in ("fp32", "fp16", "qat")] if source == "fixtures" else [nvidia_engine(n) for n in ENGINES]
    layers = [layer for text in texts for layer in json.loads(text)["Layers"]]
    formats = {t["Format/Datatype"] for layer in layers for t in layer["Inputs"] + layer["Outputs"]}
    types = {layer["LayerType"] for layer in layers}
    inspector = rules.inspector()
    assert {inspector["formats"][p] for p in ("FLOAT", "HALF", "INT8")} <= formats
    assert set(inspector["layer_types"].values()) - types == {"PointWiseV2", "Constant"}  # #66683, #4535 (sources)


@pytest.mark.parametrize("index, count, problem", [
    (0, 1, None), (1, 2, None), (2, 2, "profile index 2 is out of range: the engine has 2 profile(s), 0..1"),
    (-1, 3, "profile index -1 is out of range: the engine has 3 profile(s), 0..2"),
])
def test_profile_index_rule(index, count, problem):
    assert rules.profile_index_problem(index, count) == problem
