"""One CLI vocabulary: --artifacts for build/, --repository (or the positional) for models/."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("command, expected", [
    (["export"], {"--artifacts"}),
    (["convert", "trt"], {"--artifacts"}),
    (["repo", "build"], {"--artifacts", "--repository"}),
    (["repo", "check"], {"--artifacts", "[repository]"}),
    (["serve"], {"[repository]"}),
    (["build"], {"--artifacts", "--repository"}),
    (["monitor"], {"[repository]", "--bundle"}),
    (["convert", "cpu"], {"--artifacts"}),
    (["tune"], {"[repository]", "--config-name"}),
])
def test_help_uses_one_name_per_concept(command, expected):
    from typer.testing import CliRunner

    from tritonize.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    for name in expected:
        assert name in text, (command, name)
    assert "--out " not in text and "--out\n" not in text  # the old spelling is hidden


def test_old_spelling_still_works_and_says_the_new_one(small_artifacts, tmp_path):
    result = run_cli("repo", "build", "--artifacts", small_artifacts, "--out", tmp_path / "models", "--models", "onnx_model")
    assert result.exit_code == 0, result.output
    assert "--out is the old spelling of --repository" in result.output
    assert (tmp_path / "models" / "onnx_model" / "config.pbtxt").is_file()


def test_front_door_version_short_help_and_module_entry():
    import subprocess
    import sys
    from importlib.metadata import version

    assert run_cli("--version").output.strip() == f"tritonize {version('tritonize')}"
    short = run_cli("-h")
    assert short.exit_code == 0 and "Make a repository" in short.output and "Examples" in short.output
    as_module = subprocess.run([sys.executable, "-m", "tritonize", "--version"], capture_output=True, text=True, timeout=120)
    assert as_module.returncode == 0 and as_module.stdout.strip() == f"tritonize {version('tritonize')}"
