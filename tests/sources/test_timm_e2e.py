"""End to end, a timm model whose config is not ImageNet's 224 (resnet10t: 176 pixels, bicubic, crop_pct 0.875;
random init): export -> repo build -> the real embedded Triton -> `client classify` prints timm's ImageNet labels
(which hold commas) on every backend and path, and `client compare` finds the backends agreeing."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.sources.served import classify_everywhere, compare_backends, served


@pytest.fixture(scope="module")
def timm_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("timm")
    result = run_cli("export", "--arch", "timm:resnet10t", "--weights", "none", "--max-batch", "4",
                     "--artifacts", root / "build")
    assert result.exit_code == 0, result.output
    with served(root / "build", root / "models") as server:
        yield root, server


def test_the_manifest_carries_timm_s_config(timm_model):
    root, _ = timm_model
    manifest = json.loads((root / "build" / "manifest.json").read_text())
    pre = manifest["model"]["preprocessing"]
    assert (pre["resize"], pre["crop"], pre["interpolation"]) == (201, 176, "bicubic")
    assert manifest["model"]["input_shape"] == [3, 176, 176] and manifest["labels"][1] == "goldfish, Carassius auratus"
    config = (root / "models" / "onnx_model" / "config.pbtxt").read_text()
    assert "dims: 176" in config and 'string_value: "bicubic"' in config


def test_classify_prints_timm_s_labels_on_every_path(timm_model):
    root, server = timm_model
    classify_everywhere(server, root / "build", json.loads((root / "build" / "manifest.json").read_text())["labels"])


def test_the_backends_agree(timm_model):
    compare_backends(timm_model[1])
