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
