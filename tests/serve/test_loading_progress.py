"""`serve` says what is loading while it waits for readiness (before: 6-14 s of silence), and that a model
`repo build` left out for a GPU box is not built, not failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tritonize.errors import TritonizeError
from tritonize.model_repository import not_built_notes
from tritonize.serve.embedded import EmbeddedServer
from tritonize.serve.process import loading_progress, wait_until_ready


def test_the_wait_for_readiness_says_which_models_have_loaded(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text("I1125 model_lifecycle.cc:849] successfully loaded 'preprocess'\n"
                   "E1125 model_lifecycle.cc:641] failed to load 'trt_model' version 1: Not found\n")
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # never answers readiness
    try:
        with pytest.raises(TritonizeError, match="not ready within 2 s .raise --ready-timeout"):
            wait_until_ready(slow, "http://127.0.0.1:9", "127.0.0.1:9", timeout=2.0, log_path=log, every=0.5)
    finally:
        slow.kill()
        slow.wait()
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  loading: ")]
    assert len(notes) >= 2, notes
    assert notes[0].startswith("  loading: 1 model(s) loaded, latest preprocess; failed: trt_model (")


def test_loading_progress_before_any_model():
    assert loading_progress("/nonexistent/server.log") == "starting"


def _repository_with_a_plan_waiting_for_a_gpu(artifacts: Path, tmp_path: Path) -> Path:
    from tests.conftest import plan_entry, record, run_cli

    record(artifacts, "tensorrt", plan_entry("waiting_for_gpu"))
    repo = tmp_path / "models"
    built = run_cli("repo", "build", "--artifacts", artifacts, repo, "--models", "onnx_model,trt_model", "--no-ensembles",
                    "--no-warmup")
    assert built.exit_code == 0, built.output
    return repo


def test_a_model_left_out_for_a_gpu_box_is_not_built_in_the_progress_not_failed(artifacts_copy, tmp_path, capsys):
    """`make demo` said "failed: trt_model" while the server loaded; trt_model is left out by design on a machine
    without TensorRT, and its note says why."""
    notes = not_built_notes(_repository_with_a_plan_waiting_for_a_gpu(artifacts_copy, tmp_path))
    log = tmp_path / "server.log"
    log.write_text("I1125 model_lifecycle.cc:849] successfully loaded 'onnx_model'\n"
                   "E1125 model_lifecycle.cc:641] failed to load 'trt_model' version 1: Internal: RuntimeError: "
                   f"{notes['trt_model']}\n"
                   "E1125 model_lifecycle.cc:641] failed to load 'torch_model' version 1: Not found\n")
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # never answers readiness
    try:
        with pytest.raises(TritonizeError, match="not ready within 1 s"):
            wait_until_ready(slow, "http://127.0.0.1:9", "127.0.0.1:9", timeout=1.0, log_path=log, every=0.3,
                             not_built=notes)
    finally:
        slow.kill()
        slow.wait()
    [note, *_] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  loading: ")]
    assert note.startswith("  loading: 1 model(s) loaded, latest onnx_model; trt_model was not built: its TensorRT plan "
                           "is waiting for a GPU (TensorRT cannot run where `tritonize repo build` ran); "
                           "failed: torch_model ("), note


def test_the_embedded_server_waits_knowing_which_models_repo_build_left_out(artifacts_copy, tmp_path):
    repo = _repository_with_a_plan_waiting_for_a_gpu(artifacts_copy, tmp_path)
    handle = EmbeddedServer(repo, supervise=False)
    with handle as info:
        assert info.models["trt_model"][0] == "UNAVAILABLE" and info.models["onnx_model"][0] == "READY"
        assert handle.server.not_built == not_built_notes(repo) and set(handle.server.not_built) == {"trt_model"}
