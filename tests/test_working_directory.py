"""The README's two commands pass in either order: `make demo` leaves build/ and models/ in the checkout, where the
CLI's defaults point, and the suite must neither read nor write them (every test runs in an empty directory of its
own: tests/conftest.py). Here a repository test that once picked up the checkout's build/manifest.json runs from a
directory holding another model's build/ and models/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_cli

CHECKOUT = Path(__file__).resolve().parent.parent
# Runs `repo check` with the default --artifacts build/: it found 9 errors instead of 7 after `make demo`.
SENSITIVE = "tests/repository_builder/test_check.py::test_ensemble_steps_and_tensors"


def test_a_test_runs_in_an_empty_directory_of_its_own():
    assert list(Path.cwd().iterdir()) == []
    assert CHECKOUT not in [Path.cwd(), *Path.cwd().parents]


def test_build_and_models_where_the_suite_starts_change_nothing(small_artifacts, tmp_path):
    demo = tmp_path / "checkout"
    for args in (("export", "--arch", "squeezenet1_1", "--weights", "none", "--artifacts", demo / "build"),
                 ("repo", "build", "--artifacts", demo / "build", demo / "models")):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
    before = sorted(p.relative_to(demo) for p in demo.rglob("*"))
    env = {**os.environ, "TRITONIZE_TEST_ARTIFACTS": str(small_artifacts)}  # the same export, not another
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(CHECKOUT),
                           "-c", str(CHECKOUT / "pyproject.toml"), str(CHECKOUT / SENSITIVE)],
                          cwd=demo, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert sorted(p.relative_to(demo) for p in demo.rglob("*")) == before
