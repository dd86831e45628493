"""preprocessing.py: the contract written into config.pbtxt parameters reads back identically."""

from __future__ import annotations

import json

import pytest

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.sources import resolve_spec


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
                    "antialias": False, "channel_order": "BGR", "layout": "NHWC", "scale": 1 / 65535,
                    "crop_offset": "round"}
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
    ({"channel_order": "RBG"}, "unsupported channel order/layout RBG/NCHW in the preprocessing contract (RGB|BGR|L, NCHW|NHWC)"),
    ({"layout": "CHW"}, "unsupported channel order/layout RGB/CHW in the preprocessing contract (RGB|BGR|L, NCHW|NHWC)"),
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


# -- any size, two geometries, one or three channels ------------------------------------------------------
def test_a_non_square_grayscale_contract_round_trips_and_has_its_shapes():
    contract = Preprocessing((160, 320), (160, 320), (0.1307,), (0.3081,), channel_order="L")
    assert contract.input_shape == (1, 160, 320)
    assert contract.pixels_shape == (160, 320, 1)
    assert contract.to_parameters()["preprocess.resize"] == "160,320"
    assert contract.to_parameters()["preprocess.crop"] == "160,320"
    assert Preprocessing.from_parameters(contract.to_parameters()) == contract
    assert Preprocessing.from_dict(json.loads(json.dumps(contract.to_dict()))) == contract
    assert contract.describe() == "resize to 160x320 (HxW), center crop 160x320, L, bilinear"


def test_a_square_crop_is_one_contract_however_written():
    assert Preprocessing(256, (224, 224), (0,) * 3, (1,) * 3) == Preprocessing(256, 224, (0,) * 3, (1,) * 3)
    assert Preprocessing(256, "224", (0,) * 3, (1,) * 3).crop == 224
    assert Preprocessing("288x352", "256,320", (0,) * 3, (1,) * 3).input_shape == (3, 256, 320)


@pytest.mark.parametrize("width, height", [(613, 409), (409, 613), (10, 10)])
def test_an_exact_resize_ignores_the_aspect(width, height):
    assert Preprocessing((224, 300), (224, 300), (0,) * 3, (1,) * 3).resized_size(width, height) == (300, 224)


@pytest.mark.parametrize("change, message", [
    ({"resize": (256, 200), "crop": (224, 224)}, "preprocessing contract has crop 224 and resize 256,200; the crop must be "
                                                  "positive and not larger than the resize"),
    ({"resize": 256, "crop": (224, 300)}, "preprocessing contract has crop 224,300 and resize 256; the crop must be "
                                           "positive and not larger than the resize"),
    ({"resize": (0, 10)}, "preprocessing contract has crop 224 and resize 0,10; the crop must be positive and not larger "
                          "than the resize"),
    ({"resize": (1, 2, 3)}, "preprocessing resize (1, 2, 3) is not a size: give N, or (H, W)"),
    ({"crop": "a,b"}, "preprocessing crop 'a,b' is not a size: give N, or H,W"),
    ({"crop": 22.5}, "preprocessing crop 22.5 is not a size: give N, or (H, W)"),
    ({"channel_order": "L"}, "preprocessing contract needs 1 mean and 1 positive std (L: one channel), got "
                             "mean=(0.5, 0.5, 0.5) std=(0.25, 0.25, 0.25)"),
    ({"scale": 0}, "preprocessing contract has scale 0.0; it must be positive (1/255 for [0, 1])"),
    ({"crop_offset": "ceil"}, "unknown crop offset 'ceil' in the preprocessing contract; expected round or floor"),
])
def test_each_broken_size_is_refused_with_its_reason(change, message):
    with pytest.raises(TritonizeError) as e:
        Preprocessing(**{**GOOD, **change})
    assert str(e.value) == message


def test_replace_changes_only_what_is_given_and_checks_the_result():
    contract = Preprocessing(**GOOD)
    assert contract.replace(crop=200, mean=None) == Preprocessing(**{**GOOD, "crop": 200})
    with pytest.raises(TritonizeError, match="crop 300 and resize 256"):
        contract.replace(crop=300)
    with pytest.raises(TritonizeError, match=r"unknown preprocessing field\(s\) size; the contract has resize, crop"):
        contract.replace(size=3)


def test_an_unreadable_size_parameter_says_to_rebuild():
    params = {**Preprocessing(**GOOD).to_parameters(), "preprocess.crop": "224;224"}
    with pytest.raises(TritonizeError, match=r"onnx_model has an unreadable preprocessing contract .*crop '224;224'.*"
                                             r"tritonize repo build"):
        Preprocessing.from_parameters(params, "onnx_model")
