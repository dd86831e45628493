"""`tritonize build`: every stage for real on resnet18, then a re-run that skips them all."""

from __future__ import annotations

import json

from tests.conftest import SMALL_ARCH, run_cli


def test_build_runs_every_stage_then_skips_finished_ones(tmp_path):
    artifacts, repo = tmp_path / "build", tmp_path / "models"
    args = ["build", "--arch", SMALL_ARCH, "--weights", "none", "--artifacts", artifacts, "--repository", repo]
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    manifest = json.loads((artifacts / "manifest.json").read_text())
    assert {"torchscript", "onnx", "onnx_fp16", "tensorrt"} <= set(manifest["artifacts"])
    assert manifest["artifacts"]["tensorrt"]["status"] == "waiting_for_gpu"  # no TensorRT on this machine
    assert (artifacts / "convert.sh").is_file() and not (artifacts / "model.plan").exists()
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "onnx_classifier", "onnx_classifier_uint8", "onnx_model", "preprocess", "preprocess_uint8",
        "torch_classifier", "torch_classifier_uint8", "torch_model"]
    stages = first.output[first.output.index("Stages"):]
    assert "export      done" in stages and "waiting for GPU" in stages and "repo check  done" in stages
    assert "rel err" in first.output and "model_fp16.onnx" in first.output

    config_mtime = (repo / "onnx_model" / "config.pbtxt").stat().st_mtime_ns
    second = run_cli(*args)
    assert second.exit_code == 0, second.output
    stages = second.output[second.output.index("Stages"):]
    for stage in ("export", "convert", "repo build"):
        assert f"{stage}" in stages and stages.split(stage, 1)[1].lstrip().startswith("up to date"), stages
    assert (repo / "onnx_model" / "config.pbtxt").stat().st_mtime_ns == config_mtime


def test_bad_profile_is_refused_before_any_work(tmp_path):
    result = run_cli("build", "--arch", SMALL_ARCH, "--weights", "none", "--artifacts", tmp_path / "b",
                     "--repository", tmp_path / "m", "--min", "8", "--opt", "4")
    assert result.exit_code == 1
    assert "min <= opt <= max" in result.output
    assert not (tmp_path / "b").exists()
