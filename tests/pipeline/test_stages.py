"""`tritonize build`: every stage for real on the suite's classifier, then re-runs that redo exactly the stages whose
inputs changed; with the PyTorch 2 package, on the classifier compiled once per run (`aoti_artifacts`)."""

from __future__ import annotations

import json
import re

import pytest

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
    # A release that serves no PyTorch 2 package: nothing compiled here (the run's one compile is `aoti_artifacts`)
    args = ["build", *SMALL, "--artifacts", artifacts, repo, "--triton-release", "26.04"]
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    assert "no aoti_model: Triton 26.04 cannot serve aoti_model: its pytorch backend serves a PT2 package" in first.output
    assert "exported_program" not in json.loads((artifacts / "manifest.json").read_text())["artifacts"]
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


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_build_with_the_package_serves_four_classifiers_that_agree(emulated_tensorrt, aoti_copy, tmp_path):
    """`build` on the tiny model's artifacts, the package already compiled (`aoti_artifacts`): export and convert aoti
    are up to date (the program's hash and torch's version), the TensorRT plan is built on the emulation; the embedded
    Triton serves onnx_model, torch_model, trt_model and aoti_model, and `client compare` finds them agreeing
    (trt_model's instances on KIND_CPU for the emulation: tests/serve/test_emulated_trt_model.py)."""
    from tests.client.conftest import PHOTO
    from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, write_emulated_config
    from tritonize.serve.embedded import embedded_server

    repo = tmp_path / "models"
    built = run_cli("build", *SMALL, "--precision", "fp32", "--artifacts", aoti_copy, repo)
    assert built.exit_code == 0, built.output
    statuses = {stage: _status(built.output, stage) for stage in ("export", "convert aoti", "convert", "repo build")}
    assert statuses == {"export": "up to date", "convert aoti": "up to date", "convert": "done", "repo build": "done"}
    assert "model_aoti.pt2 is up to date (same ExportedProgram sha256" in built.output
    classifiers = ["aoti_model", "onnx_model", "torch_model", "trt_model"]
    assert all((repo / name).is_dir() for name in classifiers)

    write_emulated_config(repo)
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        assert all(info.models[name][0] == "READY" for name in classifiers), info.models
        compare = run_cli("client", "compare", PHOTO, PHOTO, "--models", ",".join(classifiers), "--repeat", "1",
                          "--min-top1-agreement", "1", "--preprocess-paths", "client", "--url", info.grpc_url, "--json")
        assert compare.exit_code == 0, compare.output
        pairs = json.loads(compare.stdout)["pairs"]
        assert len(pairs) == 6 and all(p["top1_agreement"] == 1.0 and p["rel_to_scale"] <= 1e-4 for p in pairs), pairs


def _status(output: str, stage: str) -> str:
    table = output[output.index("\nStages"):output.index("\nArtifacts")]
    match = re.search(rf"^\s+{stage}\s+(done|up to date|waiting for GPU)\s", table, re.MULTILINE)
    assert match, table
    return match.group(1)



def test_build_for_gpu_instances_waits_for_the_gpu_box_s_package(aoti_copy, tmp_path):
    """`build --kind gpu` asks for a GPU package, which only the GPU box compiles: `convert aoti` waits (its
    manifest entry and the one command to run there, as TensorRT's plan does), `build` goes on (exit 0, as for the
    plan) and the repository leaves aoti_model out with a note naming that command. `convert aoti --device gpu`
    alone exits 3 (tests/convert/test_aoti.py)."""
    repo = tmp_path / "models"
    built = run_cli("build", *SMALL, "--precision", "fp32", "--kind", "gpu", "--artifacts", aoti_copy, repo)
    assert built.exit_code == 0, built.output
    assert _status(built.output, "convert aoti") == "waiting for GPU"
    entry = json.loads((aoti_copy / "manifest.json").read_text())["artifacts"]["aoti"]
    command = entry["gpu_command"]
    assert entry["status"] == "waiting_for_gpu" and entry["device"] == "gpu" and "file" not in entry
    assert command.startswith("tritonize convert aoti --device gpu --triton-release ") and str(aoti_copy) in command
    assert f"torch cannot compile a GPU package here; on the GPU box run: {command}" in " ".join(built.output.split())
    assert command in (repo / "aoti_model.not-built.txt").read_text()
    assert not (repo / "aoti_model").exists() and (repo / "onnx_model").is_dir()
