"""The front door: --artifacts for build/, the positional REPOSITORY for models/ (the whole vocabulary:
tests/test_vocabulary.py); errors of every kind are one line with their exit code."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("command, expected", [
    (["export"], {"--artifacts"}),
    (["convert", "trt"], {"--artifacts"}),
    (["repo", "build"], {"--artifacts", "[repository]"}),
    (["repo", "check"], {"--artifacts", "[repository]"}),
    (["serve"], {"[repository]"}),
    (["build"], {"--artifacts", "[repository]"}),
    (["monitor"], {"[repository]", "--output-dir"}),
    (["deploy", "push"], {"[repository]"}),
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


@pytest.mark.parametrize("args, says, code", [
    (["convert", "trt", "--precision", "fp8"], "error: Invalid value for '--precision'", 2),
    (["build", "--precision", "fp8"], "error: Invalid value for '--precision'", 2),
    (["serve", "--no-such-flag"], "error: No such option: --no-such-flag", 2),
    (["nope"], "error: No such command 'nope'", 2),
    (["client", "perf", "--concurrency", "1,x"], "error: --concurrency takes a comma-separated list like 4,8,16", 2),
    (["client", "perf", "--concurrency", "0"], "error: --concurrency levels must be between 1 and 1024, got [0]", 2),
    (["client", "perf", "--url", ""], "error: --url '': it is empty; give the server's gRPC endpoint as HOST:PORT", 2),
    (["client", "perf", "--url", "127.0.0.1:1", "--timeout", "1"], "error: cannot reach a Triton server at 127.0.0.1:1", 1),
])
def test_usage_errors_and_failures_are_one_line_with_their_exit_code(args, says, code):
    """Before: `convert trt --precision fp8` printed a 4-line box (exit 2), `build --precision fp8` one line (exit 1);
    a bad --concurrency or --url value exited 1, as if the command had failed."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "tritonize", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == code and result.stdout == "", result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(says), line


def test_the_exit_codes_are_in_the_top_level_help():
    from tritonize.options import EXIT_CODES

    text = " ".join(run_cli("-h").output.split())
    assert "Exit codes: " + ", ".join(f"{code} {kind}" for code, kind in EXIT_CODES.items()) in text


def test_front_door_version_short_help_and_module_entry():
    import subprocess
    import sys
    from importlib.metadata import version

    assert run_cli("--version").output.strip() == f"tritonize {version('tritonize')}"
    short = run_cli("-h")
    assert short.exit_code == 0 and "Make a repository" in short.output and "Examples" in short.output
    as_module = subprocess.run([sys.executable, "-m", "tritonize", "--version"], capture_output=True, text=True, timeout=120)
    assert as_module.returncode == 0 and as_module.stdout.strip() == f"tritonize {version('tritonize')}"


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C during a command: `error: interrupted` and exit 130 (c892129: typer 0.29 exited 130 saying nothing)."""
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-m", "tritonize", "export", "--arch", "resnet18", "--weights", "none",
                                "--artifacts", str(tmp_path / "build")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background job's is ignored
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "build").exists() and time.monotonic() < deadline:  # the command has started
            time.sleep(0.1)
        time.sleep(1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "error: interrupted" and "Traceback" not in err, err


def test_an_aborted_command_is_one_line_and_exit_1():
    """An input that ends (EOFError) or a command's typer.Abort: `error: aborted`, exit 1, no traceback. c892129
    looked for click's Abort where typer 0.29's click has none: an AttributeError's traceback instead."""
    import subprocess
    import sys

    code = ("import typer, tritonize.cli as cli\n"
            "@cli.app.command('ends')\n"
            "def ends():\n    raise EOFError\n"
            "cli.main()")
    done = subprocess.run([sys.executable, "-c", code, "ends"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == (1, ["error: aborted"]), done.stderr
    assert "Traceback" not in done.stderr
