"""`serve` says what is loading while it waits for readiness (before: 6-14 s of silence)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tritonize.errors import TritonizeError
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
