"""`tritonize build`: every stage for real on the suite's classifier, then re-runs that redo exactly the stages whose
inputs changed."""

from __future__ import annotations

import json
import re

from tests.conftest import SMALL, run_cli

STAGES = ("export", "convert", "repo build", "repo check")


def _statuses(output: str) -> dict[str, str]:
    """stage -> status, from the Stages table at the end of the output."""
    table = output[output.index("\nStages"):output.index("\nArtifacts")]
    found = {}
    for stage in STAGES:
        match = re.search(rf"^\s+{stage}\s+(done|up to date|waiting for GPU)\s", table, re.MULTILINE)
        assert match, table
        found[stage] = match.group(1)
    return found


def test_build_runs_every_stage_then_redoes_exactly_what_changed(tmp_path):
    artifacts, repo = tmp_path / "build", tmp_path / "models"
    args = ["build", *SMALL, "--artifacts", artifacts, repo]
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    manifest = json.loads((artifacts / "manifest.json").read_text())
    assert {"torchscript", "onnx", "onnx_fp16", "tensorrt"} <= set(manifest["artifacts"])
    assert manifest["artifacts"]["tensorrt"]["status"] == "waiting_for_gpu"  # no TensorRT on this machine
    assert (artifacts / "convert.sh").is_file() and not (artifacts / "model.plan").exists()
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "onnx_classifier", "onnx_classifier_uint8", "onnx_model", "preprocess", "preprocess_uint8",
        "torch_classifier", "torch_classifier_uint8", "torch_model"]
    assert _statuses(first.output) == {"export": "done", "convert": "waiting for GPU", "repo build": "done",
                                       "repo check": "done"}
    assert "rel err" in first.output and "model_fp16.onnx" in first.output

    config = repo / "onnx_model" / "config.pbtxt"
    exported = {name: (artifacts / name).stat().st_mtime_ns for name in ("model.onnx", "model.pt", "model_fp16.onnx")}
    second = run_cli(*args)
    assert second.exit_code == 0, second.output
    # convert is still waiting for a GPU box (the same wait, recorded before): it says so every time
    assert _statuses(second.output) == {"export": "up to date", "convert": "waiting for GPU", "repo build": "up to date",
                                        "repo check": "done"}
    assert "still waiting for a GPU box" in second.output
    config_mtime = config.stat().st_mtime_ns

    # Another TensorRT profile (same max): a new plan entry and a repository naming the new manifest;
    # the exports and the FP16 variant (checked up to the same max batch) stay.
    third = run_cli(*args, "--opt-batch", "8")
    assert third.exit_code == 0, third.output
    assert _statuses(third.output) == {"export": "up to date", "convert": "waiting for GPU", "repo build": "done",
                                       "repo check": "done"}
    assert json.loads((artifacts / "manifest.json").read_text())["artifacts"]["tensorrt"]["profile"]["opt"] == 8
    assert "model_fp16.onnx is up to date" in third.output
    assert {name: (artifacts / name).stat().st_mtime_ns for name in exported} == exported
    assert config.stat().st_mtime_ns != config_mtime

    # Another instance count: only the repository changes.
    fourth = run_cli(*args, "--opt-batch", "8", "--instances", "2")
    assert fourth.exit_code == 0, fourth.output
    assert _statuses(fourth.output) == {"export": "up to date", "convert": "waiting for GPU", "repo build": "done",
                                        "repo check": "done"}
    assert "count: 2" in config.read_text()

    # A fault the repository's up-to-date check does not look at (an empty version directory): repo check
    # stops the pipeline with its finding.
    (repo / "onnx_model" / "2").mkdir()
    fifth = run_cli(*args, "--opt-batch", "8", "--instances", "2")
    assert fifth.exit_code == 1
    assert "= " + str(repo) + " is up to date" in fifth.output
    assert "error: onnx_model: version 2/ has no model.onnx" in fifth.output
    assert f"repo check found 1 error(s) in {repo} (listed above)" in fifth.output


def test_bad_profile_is_refused_before_any_work(tmp_path):
    result = run_cli("build", *SMALL, "--artifacts", tmp_path / "b",
                     tmp_path / "m", "--min-batch", "8", "--opt-batch", "4")
    assert result.exit_code == 1
    assert "min <= opt <= max" in result.output
    assert not (tmp_path / "b").exists()
