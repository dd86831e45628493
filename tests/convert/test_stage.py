"""The convert stage's rules around a build: which TensorRT may build for a target release, what the plan
is checked on (INT8: held-out real images), and with which batches and tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.convert.engine import check_target, plan_batches, plan_tolerance, timing_cache_file
from tritonize.convert.network import Network
from tritonize.convert.options import ConvertOptions
from tritonize.convert.prepare import FP16_TOLERANCE, INT8_TOLERANCE, check_inputs
from tritonize.errors import TritonizeError
from tritonize.manifest import Profile
from tritonize.releases import Release

NETWORK = Network("input", "output", (3, 8, 8), None, pretrained=False, described="test network")


def release(tensorrt):
    return Release("26.01", "2.65.0", tensorrt, None, None, None)


@pytest.mark.parametrize("built,served,compatible,ok", [
    ("10.8.0.43", "10.8.0.43", False, True),
    ("10.5.0.18", "10.8.0.43", False, False),
    ("10.5.0.18", "10.8.0.43", True, True),     # later runtime, same major
    ("8.6.1.6", "10.8.0.43", True, True),       # 8 -> 10 is documented
    ("10.16.1.11", "11.0.0.114", True, True),   # 10 -> 11 is documented
    ("8.6.1.6", "11.0.0.114", True, False),     # "a TensorRT 8 engine cannot run with a TensorRT 11 runtime"
    ("8.5.3.1", "8.6.3.1", True, False),        # version compatibility starts at 8.6
    ("10.8.0.43", "10.5.0.18", True, False),    # never an older runtime
])
def test_target_rule(built, served, compatible, ok):
    if ok:
        check_target("trtexec", built, release(served), compatible)
    else:
        with pytest.raises(TritonizeError, match="would not deserialize there"):
            check_target("trtexec", built, release(served), compatible)


def test_unknown_target_tensorrt_is_a_warning(capsys):
    check_target("trtexec", "10.8.0.43", release(None), False)
    assert "does not know Triton 26.01's TensorRT" in capsys.readouterr().err


def test_int8_plans_are_checked_on_held_out_images_up_to_the_max_batch():
    """Five held-out photos and a profile max of 8: the photos repeat to 8, so the max batch runs (N18)."""
    held_out = np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1) * np.ones((5, 3, 8, 8), np.float32)
    options = ConvertOptions(profile=Profile(1, 4, 8), precision="int8", calib_images="synthetic")
    inputs, described = check_inputs(NETWORK, held_out, options)
    assert inputs.shape == (8, 3, 8, 8) and described == "held-out real images (5, repeated to 8)"
    assert [float(x[0, 0, 0]) for x in inputs] == [0, 1, 2, 3, 4, 0, 1, 2]
    assert plan_batches(options.profile, len(inputs)) == [1, 3, 8]
    few = ConvertOptions(profile=Profile(1, 2, 4), precision="int8", calib_images="synthetic")
    assert check_inputs(NETWORK, held_out, few)[0].shape[0] == 4 and check_inputs(NETWORK, held_out, few)[1] == "held-out real images"
    fp16 = ConvertOptions(profile=Profile(1, 4, 8), precision="fp16")
    inputs, described = check_inputs(NETWORK, held_out, fp16)
    assert inputs.shape == (8, 3, 8, 8) and described.startswith("synthetic")
    assert plan_batches(fp16.profile, len(inputs)) == [1, 3, 8]


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_random_init_plans_report_top1_without_gating_it(precision):
    """Random-init logits are near ties: FP16 reorders them as INT8 does (N10: FP16 had no such rule)."""
    assert plan_tolerance(precision, NETWORK).min_top1_agreement == 0.0
    pretrained = Network("input", "output", (3, 8, 8), None, pretrained=True, described="trained")
    assert plan_tolerance(precision, pretrained) == {"fp16": FP16_TOLERANCE, "int8": INT8_TOLERANCE}[precision]
    assert plan_tolerance("fp32", NETWORK).min_top1_agreement == 1.0


@pytest.mark.parametrize("base,cc,name", [
    ("timing.cache", "8.6", "timing-trt10.5.0.18-sm86.cache"),
    ("caches/resnet.cache", "9.0", "caches/resnet-trt10.5.0.18-sm90.cache"),
    ("/shared/t.cache", None, "/shared/t-trt10.5.0.18.cache"),
])
def test_timing_caches_are_named_by_tensorrt_and_gpu(base, cc, name):
    """A timing cache holds one TensorRT version's entries for one GPU (N14)."""
    assert timing_cache_file(base, "10.5.0.18", cc) == name


def test_a_failure_without_a_message_still_says_something():
    from tritonize.convert.plan_check import last_line

    assert last_line(OSError()) == "(no message)"
    assert last_line(RuntimeError("first\n\n  last line  \n")) == "last line"


@pytest.mark.parametrize("profile,available,batches", [((1, 4, 8), 8, [1, 3, 8]), ((2, 4, 8), 8, [2, 3, 8]),
                                                       ((1, 1, 2), 2, [1, 2]), ((1, 4, 8), 5, [1, 3, 5])])
def test_plan_batches(profile, available, batches):
    assert plan_batches(Profile(*profile), available) == batches


def test_fp32_plans_are_held_to_a_little_more_than_the_exports():
    from tritonize.verify import Tolerance

    assert plan_tolerance("fp32", NETWORK) == Tolerance(1e-3, 1.0)


def test_a_refused_target_names_the_rule_and_the_pins(capsys):
    from tritonize.releases import release_info

    with pytest.raises(TritonizeError) as error:
        check_target("trtexec", "10.5.0.18", release_info("24.08"), False)
    assert str(error.value) == (
        "trtexec has TensorRT 10.5.0.18 but Triton 24.08 runs TensorRT 10.3.0.26: the plan would not deserialize there; "
        "use --builder container, or a TensorRT that matches (Triton 24.08 (TensorRT 10.3.0.26; CPython 3.10-3.12, "
        "Linux x86_64): pip install -e '.[gpu,dev]' 'tensorrt-cu12==10.3.0' 'tensorrt-cu12-bindings==10.3.0' "
        "'tensorrt-cu12-libs==10.3.0' 'torch-tensorrt==2.5.0' 'torch==2.5.0' 'torchvision==0.20.0'), or "
        "--version-compatible with a TensorRT of 8.6 or newer and "
        "not newer than 10.3.0.26 (across majors only 8 -> 10, 10 -> 11)")
    check_target("trtexec", "10.4.0.26", release(None), True)  # version-compatible: 24.10 and later run it
    said = capsys.readouterr().err
    assert "tritonize does not know Triton 26.01's TensorRT; building with TensorRT 10.4.0.26 (--builder container " \
           "matches the server by construction)" in said and "no release in tritonize's table" not in said
    check_target("trtexec", "10.4.0.26", release(None), False)
    assert "no release in tritonize's table runs TensorRT 10.4.0.26; the pins of the releases it knows:" in capsys.readouterr().err


@pytest.mark.parametrize("domain", ["", "ai.onnx"])
def test_tensorrt_8_refuses_an_onnx_newer_than_17_in_either_spelling_of_the_domain(tmp_path, domain):
    import onnx

    from tests.emulation import tiny_classifier
    from tritonize.convert.engine import check_opset

    model = onnx.load(str(tiny_classifier(tmp_path / "tiny.onnx", opset=18)))
    model.opset_import[0].domain = domain
    onnx.save(model, str(tmp_path / "tiny.onnx"))
    check_opset("trtexec", "10.5.0.18", tmp_path / "tiny.onnx")
    with pytest.raises(TritonizeError, match=r"^trtexec has TensorRT 8\.6\.3\.1, whose ONNX parser reads opsets up to 17"):
        check_opset("trtexec", "8.6.3.1", tmp_path / "tiny.onnx")
    tiny_classifier(tmp_path / "tiny17.onnx", opset=17)
    check_opset("trtexec", "8.6.3.1", tmp_path / "tiny17.onnx")
