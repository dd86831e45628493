"""Every field of the preprocessing contract set from the command line, over what the model's source said: the
manifest, the exported graphs' input and the record of where the contract came from follow."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.conftest import error_line, run_cli
from tritonize.preprocessing import Preprocessing
from tritonize.sources import resolve_spec


def test_the_flags_change_the_contract_and_the_input_the_artifacts_take(tmp_path):
    # squeezenet1_1: any input size (adaptive pooling), 5 MB.
    result = run_cli("export", "--arch", "squeezenet1_1", "--weights", "none", "--artifacts", tmp_path,
                     "--format", "onnx", "--max-batch", "3", "--resize", "200,260", "--crop", "160,192",
                     "--interpolation", "bicubic", "--mean", "0.5,0.4,0.3", "--std", "0.2,0.25,0.3",
                     "--pixel-scale", "1/255", "--channel-order", "bgr", "--no-antialias")
    assert result.exit_code == 0, result.output
    model = json.loads((tmp_path / "manifest.json").read_text())["model"]
    assert Preprocessing.from_dict(model["preprocessing"]) == Preprocessing(
        (200, 260), (160, 192), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3), "bicubic", False, "BGR", "NCHW", 1 / 255)
    assert model["input_shape"] == [3, 160, 192]
    assert model["preprocessing_source"].endswith("; set by the user: antialias, channel_order, crop, interpolation, "
                                                  "mean, resize, scale, std")
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim[1:]] == [3, 160, 192]


def test_no_flag_keeps_the_sources_contract():
    spec = resolve_spec("resnet18", "none")
    assert spec.with_preprocessing(resize=None, crop=None) is spec


@pytest.mark.parametrize("flags, message", [
    (("--crop", "300"), "error: preprocessing contract has crop 300 and resize 256; the crop must be positive and "
                        "not larger than the resize"),
    (("--channel-order", "L"), "error: preprocessing contract needs 1 mean and 1 positive std (L: one channel), got "
                               "mean=(0.485, 0.456, 0.406) std=(0.229, 0.224, 0.225)"),
    (("--std", "0.2,0,0.2"), "error: preprocessing contract needs 3 means and 3 positive stds, got "
                             "mean=(0.485, 0.456, 0.406) std=(0.2, 0.0, 0.2)"),
    (("--interpolation", "cubic"), "error: unknown interpolation 'cubic' in the preprocessing contract; expected one "
                                   "of nearest, nearest-exact, lanczos, bilinear, bicubic, box, hamming"),
    (("--resize", "256x"), "error: preprocessing resize '256x' is not a size: give N, or H,W"),
    (("--pixel-scale", "1/0"), "error: preprocessing scale '1/0' is not a number: give one like 1/255 or 0.0039"),
])
def test_a_bad_flag_is_one_line_before_any_work(tmp_path, flags, message):
    result = run_cli("export", "--arch", "resnet18", "--weights", "none", "--artifacts", tmp_path / "a", *flags)
    assert error_line(result) == message
    assert not (tmp_path / "a" / "manifest.json").exists()
