"""Real engine builds: they need TensorRT and a CUDA GPU (a user's GPU box) and skip elsewhere."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import run_cli


def _has_tensorrt_gpu() -> bool:
    if importlib.util.find_spec("tensorrt") is None:
        return False
    import torch

    return torch.cuda.is_available()


pytestmark = [
    pytest.mark.requires_tensorrt,
    pytest.mark.skipif(not _has_tensorrt_gpu(), reason="requires TensorRT and a CUDA GPU (runs on a user's GPU box)"),
]


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


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="requires torch-tensorrt")
def test_torch_tensorrt_plan_is_served_under_its_own_tensor_names(artifacts_copy, tmp_path):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--min-batch", "1", "--opt-batch", "4", "--max-batch", "8",
                     "--precision", "fp32", "--builder", "torch-tensorrt")
    assert result.exit_code == 0, result.output
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert (entry["input_name"], entry["output_name"]) == ("input_0", "output_0")
    repo = tmp_path / "models"
    assert run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--max-batch", "8").exit_code == 0
    config = (repo / "trt_model" / "config.pbtxt").read_text()
    assert 'name: "input_0"' in config and 'name: "output_0"' in config
