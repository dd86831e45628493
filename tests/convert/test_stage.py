"""The convert stage's rules around a build: which TensorRT may build for a target release, what the plan
is checked on (INT8: held-out real images), and with which batches and tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.convert.network import Network
from tritonize.convert.options import ConvertOptions
from tritonize.convert.stage import INT8_TOLERANCE, _check_inputs, _check_target, _plan_batches, _plan_tolerance
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
        _check_target("trtexec", built, release(served), compatible)
    else:
        with pytest.raises(TritonizeError, match="would not deserialize there"):
            _check_target("trtexec", built, release(served), compatible)


def test_unknown_target_tensorrt_is_a_warning(capsys):
    _check_target("trtexec", "10.8.0.43", release(None), False)
    assert "does not know Triton 26.01's TensorRT" in capsys.readouterr().err


def test_int8_plans_are_checked_on_held_out_images():
    held_out = np.ones((5, 3, 8, 8), np.float32)
    options = ConvertOptions(profile=Profile(1, 4, 8), precision="int8", calib_images="synthetic")
    inputs, described = _check_inputs(NETWORK, held_out, options)
    assert inputs is held_out and described == "held-out real images"
    assert _plan_batches(options.profile, len(inputs)) == [1, 3, 5]
    # random-init weights: top-1 reported, not gated, as in the CPU check
    assert _plan_tolerance("int8", NETWORK).min_top1_agreement == 0.0 and INT8_TOLERANCE.min_top1_agreement > 0
    fp16 = ConvertOptions(profile=Profile(1, 4, 8), precision="fp16")
    inputs, described = _check_inputs(NETWORK, held_out, fp16)
    assert inputs.shape == (8, 3, 8, 8) and described.startswith("synthetic")
    assert _plan_batches(fp16.profile, len(inputs)) == [1, 3, 8]
