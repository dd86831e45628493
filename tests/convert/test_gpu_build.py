"""Engine builds a GPU box proves: on a user's GPU box with the real TensorRT and GPU, and here on the emulated ones
(the `gpu_box` fixture, tests/conftest.py), so that each has run before a GPU user runs it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

pytestmark = [pytest.mark.requires_tensorrt, pytest.mark.usefixtures("gpu_box")]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tensorrt_api_builds_and_verifies_a_plan(artifacts_copy, precision):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--min-batch", "1", "--opt-batch", "4", "--max-batch", "8",
                     "--precision", precision, "--builder", "tensorrt")
    assert result.exit_code == 0, result.output
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["file"] == "model.plan" and (artifacts_copy / "model.plan").is_file()
    assert entry["verification"]["passed"] and set(entry["verification"]["batches"]) == {"1", "3", "8"}
    assert entry["gpu"]["compute_capability"] and entry["tensorrt_version"]


def test_int8_plan(artifacts_copy, photo_dir):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--max-batch", "8", "--opt-batch", "4", "--precision", "int8",
                     "--calib-images", photo_dir, "--calib-count", "10", "--builder", "tensorrt")
    assert result.exit_code == 0, result.output


def test_version_compatible_plan_passes_the_plan_check(artifacts_copy):
    """The plan check deserializes it only with host code allowed (Polygraphy's loader does that)."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--min-batch", "1", "--opt-batch", "4", "--max-batch", "8",
                     "--precision", "fp32", "--builder", "tensorrt", "--version-compatible")
    assert result.exit_code == 0, result.output
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["options"]["version_compatible"]


@pytest.mark.requires_torch_tensorrt
def test_n23_a_torch_tensorrt_plan_is_served_under_its_engines_names(artifacts_copy, tmp_path):
    """N23: the dynamo frontend (torch-tensorrt 2.5+) names the engine's input after the program's placeholder (`x`)
    and its output `output0` (pytorch/TensorRT v2.5.0 py/torch_tensorrt/dynamo/conversion/_TRTInterpreter.py,
    placeholder() and output()); the TorchScript frontend before it names them input_0 / output_0. This test
    expected input_0 / output_0 whatever the version, and so failed on every GPU box with torch-tensorrt 2.5+."""
    pytest.importorskip("torch_tensorrt", reason="requires torch-tensorrt (the pins of `tritonize convert releases`)")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--min-batch", "1", "--opt-batch", "4", "--max-batch", "8",
                     "--precision", "fp32", "--builder", "torch-tensorrt")
    assert result.exit_code == 0, result.output
    artifacts = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]
    entry = artifacts["tensorrt"]
    frontend = entry["torch_tensorrt"]["frontend"]
    names = (artifacts["exported_program"]["input_name"], "output0") if frontend == "dynamo" else ("input_0", "output_0")
    assert (entry["input_name"], entry["output_name"]) == names
    repo = tmp_path / "models"
    assert run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--max-batch", "8").exit_code == 0
    config = (repo / "trt_model" / "config.pbtxt").read_text()
    assert f'name: "{names[0]}"' in config and f'name: "{names[1]}"' in config
