"""The convert stage's rules around a build: which TensorRT may build for a target release, what the plan
is checked on (INT8: held-out real images), and with which batches and tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.convert.network import Network
from tritonize.convert.options import ConvertOptions
from tritonize.convert.engine import check_target, plan_batches, plan_tolerance, timing_cache_file
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
