"""`repo check --in-image` (issue 27): the plan proven in the image that will serve it. The serving release's image
(the docker stand-in, whose trtexec runs emulated plans with that release's TensorRT) loads trt_model's plan and
runs one batch, compared with onnxruntime; a plan its TensorRT cannot load fails the check in one line."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import error_line, run_cli
from tests.repository_builder.test_gpu_kinds import build, convert


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1", "10.5.0.18"], indirect=True)
def test_the_plan_runs_in_its_release_image(emulated_tensorrt, standins, artifacts_copy, tmp_path):
    """8.6 (24.04) and 10.x (24.10): the tables' releases (none ships TensorRT 11 yet)."""
    convert(emulated_tensorrt, artifacts_copy)
    repo = tmp_path / "models"
    assert build(artifacts_copy, repo).exit_code == 0
    before = sorted(p.name for p in (repo / "trt_model" / "1").iterdir())
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6", "--in-image")
    assert checked.exit_code == 0, checked.output
    release = emulated_tensorrt.release
    assert (f"✓ trt_model: model.plan ran in nvcr.io/nvidia/tritonserver:{release}-py3 (its trtexec, TensorRT "
            in checked.output) and "on a batch of 2: rel err" in checked.output
    assert sorted(p.name for p in (repo / "trt_model" / "1").iterdir()) == before  # nothing written there


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_plan_the_image_cannot_load_fails_the_check(emulated_tensorrt, standins, artifacts_copy, tmp_path,
                                                      monkeypatch):
    """The plan of 24.10's TensorRT 10.5 checked in 24.08's image (TensorRT 10.3): the version strings would only
    say so; the image's trtexec refuses it and the check says that in one line, with exit code 1."""
    convert(emulated_tensorrt, artifacts_copy)
    repo = tmp_path / "models"
    assert build(artifacts_copy, repo).exit_code == 0
    images = json.loads(os.environ.get("STANDIN_IMAGE_TRT", "{}"))
    monkeypatch.setenv("STANDIN_IMAGE_TRT", json.dumps({**images, "24.08": "10.3.0.26"}))
    failed = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--in-image", "--triton-release", "24.08")
    assert failed.exit_code == 1 and "Traceback" not in failed.output
    lines = failed.output.splitlines()
    assert any(line.startswith("error: trt_model: plan built with TensorRT 10.5.0.18; Triton 24.08 runs TensorRT 10.3.0.26")
               for line in lines)  # what the version strings say ...
    assert ("error: trtexec could not run the plan (exit code 1): [E] [TRT] IRuntime::deserializeCudaEngine: Error Code "
            "1: Serialization (the plan was built with TensorRT 10.5.0.18; this runtime is 10.3.0.26") in failed.output
    assert error_line(run_cli("repo", "check", repo, "--in-image")).startswith(
        "error: --in-image compares the plan with onnxruntime on the export: give --artifacts DIR")
