"""`serve` says what is loading while it waits for readiness (before: 6-14 s of silence), and that a model
`repo build` left out for a GPU box is not built, not failed."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tritonize.errors import TritonizeError
from tritonize.model_repository import not_built_notes
from tritonize.serve.embedded import EmbeddedServer
from tritonize.serve.readiness import loading_progress, wait_until_ready


def _wait_on_a_server_that_never_answers(log: Path, timeout: float, every: float, **kwargs) -> None:
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # never answers readiness
    try:
        with pytest.raises(TritonizeError, match=f"not ready within {timeout:.0f} s .raise --ready-timeout"):
            wait_until_ready(slow, "http://127.0.0.1:9", "127.0.0.1:9", timeout=timeout, log_path=log, every=every,
                             **kwargs)
    finally:
        slow.kill()
        slow.wait()


def test_the_wait_for_readiness_says_which_models_have_loaded_once_per_change(tmp_path, capsys):
    """Into a file (here: captured stderr, not a terminal) a status is written when it changes, not every tick:
    `make demo > demo.log` held the same loading line 23 times, 2 s apart."""
    log = tmp_path / "server.log"
    log.write_text("I1125 model_lifecycle.cc:849] successfully loaded 'preprocess'\n"
                   "E1125 model_lifecycle.cc:641] failed to load 'trt_model' version 1: Not found\n")
    later = threading.Timer(1.2, lambda: log.open("a").write("I1125 successfully loaded 'onnx_model'\n"))
    later.start()
    _wait_on_a_server_that_never_answers(log, timeout=2.5, every=0.3)
    later.join()
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  loading: ")]
    assert len(notes) == 2, notes
    assert notes[0].startswith("  loading: 1 model(s) loaded, latest preprocess; failed: trt_model (")
    assert notes[1].startswith("  loading: 2 model(s) loaded, latest preprocess, onnx_model; failed: trt_model (")


def test_on_a_terminal_the_status_redraws_one_line(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    log = tmp_path / "server.log"
    log.write_text("I1125 successfully loaded 'preprocess'\n")
    _wait_on_a_server_that_never_answers(log, timeout=1, every=0.2)
    drawn = terminal.getvalue()
    assert drawn.count("\r\x1b[K  loading: 1 model(s) loaded, latest preprocess (") >= 3, drawn
    assert drawn.endswith(")\n"), drawn  # the line is ended before anything else is said


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
    _wait_on_a_server_that_never_answers(log, timeout=1, every=0.3, not_built=notes)
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
