"""docs/your-own-model.md's example, run as written: its Python block (the user's own 1x28x28 grayscale model,
exported from Python with its labels and preprocessing), then its shell block (`repo build`, `serve` as the embedded
Triton, `client classify goldfish.jpg`, `client compare`), in an empty working directory. Only the server's address
is added to the client's lines."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "your-own-model.md"
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def example() -> tuple[str, list[list[str]]]:
    """The page's one Python block, and the commands of the shell block that follows it (without `tritonize`)."""
    section = PAGE.read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (shell,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line.split(" #", 1)[0].rstrip(" &"))[1:] for line in shell.splitlines() if line.strip()]
    return python, commands


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    from tritonize.serve.embedded import embedded_server

    root = tmp_path_factory.mktemp("docs-example")
    python, commands = example()
    done = subprocess.run([sys.executable, "-c", python], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    shutil.copy(ROOT / "goldfish.jpg", root / "goldfish.jpg")
    assert [c[:2] for c in commands] == [["repo", "build"], ["serve", "models/"], ["client", "classify"],
                                         ["client", "compare"]]
    outputs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        result = run_cli(*commands[0])
        assert result.exit_code == 0, result.output
        with embedded_server(root / "models") as server:  # `tritonize serve models/ &`
            for command in commands[2:]:
                outputs.append(run_cli(*command, "--url", server.grpc_url))
    yield root, outputs


def test_the_python_block_writes_the_manifest_the_shell_continues_from(ran):
    root, _ = ran
    manifest = json.loads((root / "build" / "manifest.json").read_text())
    model = manifest["model"]
    assert model["source"] == "module" and model["model_source"] == "a __main__.Digits handed to tritonize.export()"
    assert model["input_shape"] == [1, 28, 28] and model["preprocessing"]["channel_order"] == "L"
    assert manifest["labels"] == DIGITS and model["labels_source"] == "given (labels=...)"
    assert {manifest["artifacts"][k]["status"] for k in ("torchscript", "onnx")} == {"verified"}
    assert (root / "models" / "onnx_model" / "config.pbtxt").is_file()


def test_classify_prints_the_digits_labels_and_compare_agrees(ran):
    _, (classify, compare) = ran
    assert classify.exit_code == 0, classify.output
    rows = [line for line in classify.stdout.splitlines() if re.match(r"\s*\d\.\s", line)]
    assert len(rows) == 5 and all(row.split()[1] in DIGITS for row in rows), classify.stdout
    assert compare.exit_code == 0, compare.output
    assert "all models give the same top-1" in compare.stdout
