"""Every `tritonize ...` command shown in a code block of README.md or docs/*.md runs here: for real where that is
cheap, otherwise with `-h` appended, which proves that the command exists and that every flag it uses parses (click
refuses an unknown flag before it prints help). Each command not run for real says why, in `NOT_RUN_FOR_REAL`."""

from __future__ import annotations

import functools
import re
import shlex
import shutil
from pathlib import Path

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# How a documented line calls the tool: on PATH, from the venv, or as a module.
PREFIXES = (("tritonize",), (".venv/bin/tritonize",), ("python", "-m", "tritonize"))

# Commands run for real, in an empty working directory that holds a small repository as models/ (cheap: no export,
# no server, nothing downloaded).
RUN_FOR_REAL = {"", "convert releases", "repo check"}
# Every other command, by its subcommand path, and why it runs only with -h here.
NOT_RUN_FOR_REAL = {
    "export": "exports wide_resnet101_2 with pretrained weights, which cannot be downloaded here, or the user's files "
              "(tests/export and tests/sources run each source)",
    "build": "the whole pipeline (tests/pipeline runs it on the suite's classifier; tests/sources exports each source "
             "and serves it)",
    "convert trt": "needs TensorRT; tests/test_card.py runs the card's line on the emulation",
    "convert cpu": "needs a photos/ folder and minutes of calibration (tests/convert/test_cpu.py)",
    "convert aoti": "needs an exported program and minutes of compiling (tests/convert/test_aoti.py)",
    "repo build": "needs exported artifacts in build/ (tests/repository_builder runs it)",
    "serve": "runs a server until stopped (tests/serve runs it)",
    "client classify": "needs a running server (tests/client, tests/test_card.py)",
    "client compare": "needs a running server and photos (tests/client)",
    "client perf": "needs a running server and minutes of load (tests/client)",
    "tools get-perf-analyzer": "downloads a 20 MB wheel (make test runs it once, before the tests)",
    "tune": "needs a running server and minutes of load (tests/tune)",
    "monitor": "runs Prometheus until stopped (tests/monitor)",
    "models list": "needs a running server (tests/control; tests/serve/test_key_privacy.py runs `models list --json`)",
    "models unload": "needs a running server (tests/serve/test_key_privacy.py runs it on a model a key holder loaded)",
    "deploy push": "needs an S3 endpoint (tests/deploy runs it against moto's S3 server)",
    "deploy k8s": "reads the pushed repository back from its S3 endpoint (tests/deploy runs it against moto's)",
}


def code_block_lines(page: Path) -> list[str]:
    """The lines of the page's code blocks, continuation backslashes joined, comments dropped."""
    lines = []
    for block in re.findall(r"```[\w-]*\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            lines.append(line.split(" #", 1)[0].strip())
    return lines


def documented_commands(pages: list[Path] = PAGES) -> list[tuple[str, list[str]]]:
    """(where, argv after the tool's name) for every call of the tool in the pages' code blocks; a line may chain
    several (`a && b`, `a | b`, `a; b`, `a &`)."""
    found = []
    for page in pages:
        for line in code_block_lines(page):
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            words, command = list(lexer), []
            for word in [*words, ";"]:
                if word and set(word) <= set(";&|"):
                    for prefix in PREFIXES:
                        if tuple(command[:len(prefix)]) == prefix:
                            found.append((f"{page.relative_to(ROOT)}: {line}", command[len(prefix):]))
                    command = []
                else:
                    command.append(word)
    return found


@functools.cache
def _app():
    import typer.main

    from tritonize.cli import app

    return typer.main.get_command(app)


def command_path(argv: list[str]) -> str:
    """The subcommand path of an argv (`client classify`), as the app resolves it."""
    command, path = _app(), []
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    return " ".join(path)


def test_documented_commands_are_found():
    """The extraction is not vacuous: the README's and the card's lines are among them, chained ones split."""
    argvs = [argv for _, argv in documented_commands()]
    assert ["client", "classify", "goldfish.jpg", "--model", "trt_model"] in argvs
    assert ["convert", "trt", "--min", "1", "--opt", "16", "--max", "32"] in argvs
    assert ["repo", "check", "models/"] in argvs and ["--version"] in argvs and ["-h"] in argvs
    assert len(argvs) >= 25


def test_a_command_with_a_flag_that_does_not_exist_is_refused_with_h():
    """What the test relies on: -h after an unknown flag is a usage error, not help (7c97878's docs/preprocessing.md
    line `client compare ... --preprocess client,server,uint8` failed this way)."""
    result = run_cli("client", "compare", "a.jpg", "--preprocess", "client", "-h")
    assert result.exit_code == 2 and "No such option: --preprocess" in result.output
    assert run_cli("client", "compare", "a.jpg", "--preprocess-paths", "client", "-h").exit_code == 0


def test_every_documented_command_runs(small_repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(small_repo, tmp_path / "models")
    failures = []
    for where, argv in documented_commands():
        path = command_path(argv)
        if path not in RUN_FOR_REAL and path not in NOT_RUN_FOR_REAL:
            failures.append(f"{where}: `{path}` is neither run for real nor listed with a reason in NOT_RUN_FOR_REAL")
            continue
        real = path in RUN_FOR_REAL
        result = run_cli(*(argv if real else [*argv, "-h"]))
        if result.exit_code != 0:
            failures.append(f"{where}: exit {result.exit_code}: {result.output.strip()[-300:]}")
    assert not failures, "\n".join(failures)


def test_each_reason_names_a_documented_command():
    """No stale reasons: every command listed is still documented."""
    assert set(NOT_RUN_FOR_REAL) - {command_path(argv) for _, argv in documented_commands()} == set()
