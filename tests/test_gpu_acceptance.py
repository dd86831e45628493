"""benchmarks/gpu_acceptance.sh, the GPU box's acceptance run: what it checks before it starts, run here
for real up to the point where it would need a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_acceptance.sh"


def _python_without_pytest(tmp_path) -> Path:
    """This interpreter, except that `-m pytest` is missing (as without the dev extra)."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pytest ]; then echo "No module named pytest" >&2; exit 1; fi\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_it_stops_at_once_without_pytest(tmp_path):
    """N9: the GPU-marked tests need the dev extra; the script said `.[gpu]` and failed hours later."""
    env = {**os.environ, "PYTHON": str(_python_without_pytest(tmp_path))}
    done = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and 'pip install -e ".[gpu,dev]"' in done.stderr
    assert not (tmp_path / "out" / "base").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18", "11.4.0.106"], indirect=True)
def test_the_release_is_the_hosts(emulated_tensorrt, tmp_path):
    """N8: the release comes from this Python's TensorRT (it was 24.10 whatever TensorRT the box had; 24.10's
    10.5 matches no torch-tensorrt release), and the pins are printed; none matching stops the script."""
    host = run_cli("convert", "releases", "--installed")
    if emulated_tensorrt.version == "10.5.0.18":
        assert host.exit_code == 0 and host.output.strip() == "24.10"
        listing = run_cli("convert", "releases").output
        assert ("Triton 24.10 (TensorRT 10.5.0.18): pip install -e '.[gpu,dev]' 'tensorrt-cu12==10.5.0' 'torch==2.5.0' "
                "'torchvision==0.20.0'  # no torch-tensorrt for this TensorRT: no --builder torch-tensorrt"
                "  # <- this Python's TensorRT") in listing
        return
    assert host.exit_code == 1 and "no release in tritonize's table runs this Python's TensorRT (11.4.0.106)" in host.output
    done = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "out")], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give --release YY.MM" in done.stderr and "tensorrt-cu12==10.3.0" in done.stderr
    assert not (tmp_path / "out" / "base").exists()


def test_empty_arrays_expand_under_set_u_before_bash_4_4():
    """N17: under `set -u`, bash before 4.4 takes "${a[@]}" of an empty array as unset and exits ("calib: unbound
    variable" for every fp32/fp16 build). Only bash 5.2 runs here, so the script is read: an array that can be
    empty expands as ${a[@]+"${a[@]}"}; TRITONIZE is never empty."""
    text = SCRIPT.read_text()
    assert "set -uo pipefail" in text
    bare = set(re.findall(r'(?<!\+)"\$\{(\w+)\[@\]\}"', text))
    assert bare == {"TRITONIZE"}
    assert '${calib[@]+"${calib[@]}"}' in text and '${ROWS[@]+"${ROWS[@]}"}' in text
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
