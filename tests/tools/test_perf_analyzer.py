"""Finding and fetching the real perf_analyzer (`make test` fetches it where it can)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_cli
from tritonize.tools import perf_analyzer as tool

FOUND = tool.find()
NEEDS_IT = pytest.mark.skipif(FOUND is None, reason=f"perf_analyzer not found (PATH, {tool.fetched_path()}): "
                                                    f"`{tool.GET_COMMAND}` (make test runs it) gets it")


def test_a_perf_analyzer_that_cannot_start_is_passed_over(tmp_path, monkeypatch):
    # STAND-IN for a perf_analyzer whose libraries are missing: what the real binary does without libb64.
    broken = tmp_path / "bin" / "perf_analyzer"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'perf_analyzer: error while loading shared libraries: libb64.so.0d: "
                      "cannot open shared object file' >&2\nexit 127\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRITONIZE_TOOLS", str(tmp_path / "empty"))
    assert tool.find() is None
    result = run_cli("client", "perf", "--load-generator", "perf_analyzer", "--url", "127.0.0.1:1")
    assert result.exit_code == 1 and "tritonize tools get-perf-analyzer" in result.output
    assert "Traceback" not in result.output


@NEEDS_IT
def test_the_fetched_perf_analyzer_is_found_and_fetching_again_keeps_it(monkeypatch):
    assert FOUND.version == tool.TRITONCLIENT_VERSION and "Perf Analyzer" not in FOUND.version
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # only where the helper puts it
    found = tool.find()
    if found is None or found.path != tool.fetched_path():
        pytest.skip(f"perf_analyzer is on PATH, not in {tool.fetched_path()}")
    mtime = (found.path.parent.parent / "libexec" / "perf_analyzer").stat().st_mtime
    result = run_cli("tools", "get-perf-analyzer")
    assert result.exit_code == 0 and result.stdout.strip() == str(found.path)
    assert "already there" in result.stderr
    assert (found.path.parent.parent / "libexec" / "perf_analyzer").stat().st_mtime == mtime
