"""preprocessing.py: the contract written into config.pbtxt parameters reads back identically."""

from __future__ import annotations

import json

import pytest

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.spec import resolve_spec


@pytest.mark.parametrize("arch", ["resnet18", "wide_resnet101_2"])
def test_parameters_round_trip_exactly(arch):
    contract = resolve_spec(arch, "none").preprocessing
    params = contract.to_parameters()
    assert set(params) == set(Preprocessing.parameter_keys())
    assert all(isinstance(v, str) for v in params.values())
    assert Preprocessing.from_parameters(params) == contract


def test_odd_values_round_trip_too():
    contract = Preprocessing(300, 299, (0.1, 1 / 3, 0.7), (0.2, 2 / 7, 0.5), "bicubic", False, "BGR", "NHWC", 1 / 65535)
    assert Preprocessing.from_parameters(contract.to_parameters()) == contract
    assert contract.input_shape == (299, 299, 3)
    # The manifest's form: plain JSON types, every field, read back equal.
    data = contract.to_dict()
    assert data == {"resize": 300, "crop": 299, "mean": [0.1, 1 / 3, 0.7], "std": [0.2, 2 / 7, 0.5], "interpolation": "bicubic",
                    "antialias": False, "channel_order": "BGR", "layout": "NHWC", "scale": 1 / 65535}
    assert Preprocessing.from_dict(json.loads(json.dumps(data))) == contract


def test_a_missing_contract_says_how_to_get_one():
    with pytest.raises(TritonizeError, match="onnx_model carries no preprocessing contract .*preprocess.std.*tritonize repo build"):
        Preprocessing.from_parameters({"preprocess.resize": "256", "preprocess.crop": "224", "preprocess.mean": "0,0,0"}, "onnx_model")


def test_a_missing_contract_lists_every_missing_parameter():
    with pytest.raises(TritonizeError, match=r"^model carries no preprocessing contract \(missing parameters: "
                                             r"preprocess.mean, preprocess.std\); rebuild the repository with "
                                             r"`tritonize repo build`$"):
        Preprocessing.from_parameters({"preprocess.resize": "256", "preprocess.crop": "224"})


@pytest.mark.parametrize("text, antialias", [("1", True), ("true", True), ("Yes", True), ("false", False), ("0", False)])
def test_antialias_reads_the_usual_spellings(text, antialias):
    params = {**Preprocessing(256, 224, (0, 0, 0), (1, 1, 1)).to_parameters(), "preprocess.antialias": text}
    assert Preprocessing.from_parameters(params).antialias is antialias


GOOD = dict(resize=256, crop=224, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


@pytest.mark.parametrize("change, message", [
    ({"interpolation": "fancy"}, "unknown interpolation 'fancy' in the preprocessing contract; expected one of nearest, "
                                 "nearest-exact, lanczos, bilinear, bicubic, box, hamming"),
    ({"channel_order": "RBG"}, "unsupported channel order/layout RBG/NCHW in the preprocessing contract (RGB|BGR, NCHW|NHWC)"),
    ({"layout": "CHW"}, "unsupported channel order/layout RGB/CHW in the preprocessing contract (RGB|BGR, NCHW|NHWC)"),
    ({"crop": 0}, "preprocessing contract has crop 0 and resize 256; the crop must be positive and not larger than the resize"),
    ({"crop": 257}, "preprocessing contract has crop 257 and resize 256; the crop must be positive and not larger than the resize"),
    ({"mean": (0.5, 0.5)}, "preprocessing contract needs 3 means and 3 positive stds, got mean=(0.5, 0.5) std=(0.25, 0.25, 0.25)"),
    ({"std": (0.25, 0.25)}, "preprocessing contract needs 3 means and 3 positive stds, got mean=(0.5, 0.5, 0.5) std=(0.25, 0.25)"),
    ({"std": (0.25, 0.0, 0.25)}, "preprocessing contract needs 3 means and 3 positive stds, got mean=(0.5, 0.5, 0.5) std=(0.25, 0.0, 0.25)"),
])
def test_each_broken_contract_is_refused_with_its_reason(change, message):
    with pytest.raises(TritonizeError) as e:
        Preprocessing(**{**GOOD, **change})
    assert str(e.value) == message


def test_the_smallest_contract_is_allowed():
    assert Preprocessing(1, 1, (0, 0, 0), (1, 1, 1)).input_shape == (3, 1, 1)


@pytest.mark.parametrize("width, height, resized", [
    (613, 409, (383, 256)),  # wide: 256 * 613 / 409 = 383.69, rounded down as torchvision does
    (409, 613, (256, 383)),  # tall
    (300, 300, (256, 256)),  # square
    (256, 600, (256, 600)),  # the short side already at the size
])
def test_resized_size_scales_the_short_side_and_keeps_the_aspect(width, height, resized):
    pre = Preprocessing(resize=256, crop=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert pre.resized_size(width, height) == resized
