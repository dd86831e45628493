"""benchmarks/gpu_acceptance.sh, the GPU box's acceptance run: what it checks before it starts, and the whole run end
to end on the stand-ins (`pytest -m gpu_acceptance`), so that the script a GPU user runs first has run before."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GPU_BOX_TENSORRT, SMALL_ARCH, run_cli
from tests.emulation import environment

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
        assert ("Triton 24.10 (TensorRT 10.5.0.18; CPython 3.10-3.12, Linux x86_64 and aarch64): pip install -e "
                "'.[gpu,dev]' 'tensorrt-cu12==10.5.0' 'tensorrt-cu12-bindings==10.5.0' 'tensorrt-cu12-libs==10.5.0' "
                "'torch==2.5.0' 'torchvision==0.20.0'  # no torch-tensorrt for this TensorRT: no --builder torch-tensorrt"
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
    empty expands as ${a[@]+"${a[@]}"}; TRITONIZE and the perf options are never empty."""
    text = SCRIPT.read_text()
    assert "set -uo pipefail" in text
    bare = set(re.findall(r'(?<!\+)"\$\{(\w+)\[@\]\}"', text))
    assert bare == {"TRITONIZE", "PERF", "PERF_LATENCY"}
    assert '${calib[@]+"${calib[@]}"}' in text and '${ROWS[@]+"${ROWS[@]}"}' in text
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_a_test_only_a_gpu_box_runs_must_also_run_here(tmp_path):
    """N23's lesson: a test marked requires_tensorrt / requires_gpu / requires_docker that does not take the
    gpu_box fixture (which runs it on the emulation where there is no GPU box) is refused at collection."""
    test = tmp_path / "test_marked.py"
    test.write_text("import pytest\n\n\n@pytest.mark.requires_gpu\ndef test_only_on_a_gpu_box():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "--collect-only", "-p",
                           "no:cacheprovider", str(test)], cwd=SCRIPT.parent.parent, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "is marked requires_gpu but does not take the gpu_box fixture" in done.stdout + done.stderr


# --quick: one precision per builder (the container's FP16 plan is the one served, as on a GPU box).
QUICK_ARCH = SMALL_ARCH  # the suite's classifier through the code-model path (squeezenet1_1 before it)
QUICK_BUILDS = ("container fp16", "trtexec fp32", "tensorrt int8", "torch-tensorrt fp32")
PASSED = ("ok", "refused (expected)", "skipped (expected)")
SECOND = ("24.10", "10.5.0.18")  # a release whose line has no torch-tensorrt (N36), and its TensorRT


def report_rows(report: str) -> dict[str, str]:
    """step -> result, from the table of <out>/report.md."""
    rows = [line.split("|")[1:3] for line in report.splitlines() if line.startswith("| ") and not line.startswith("| step")]
    return {name.strip(): result.strip() for name, result in rows}


@pytest.mark.gpu_acceptance
@pytest.mark.timeout(1800)  # about 140 s of CPU time (2 minutes on 2 idle cores); much longer on busy ones
@pytest.mark.parametrize("emulated_tensorrt", [GPU_BOX_TENSORRT], indirect=True)
def test_n36_the_script_runs_end_to_end_on_the_stand_ins_for_24_08_and_24_10(emulated_tensorrt, standins, tmp_path, monkeypatch):
    """Build 2 of issue 34: the whole script on the emulated TensorRT 10.3 (Triton 24.08, whose pins install
    torch-tensorrt 2.5), with the trtexec, docker (serving with the image's Triton) and torch-tensorrt stand-ins,
    the suite's classifier with random weights: every row passed or was an expected refusal, its GPU-test step ran those
    tests here, and report.md is valid UTF-8. On 7c97878 (its full run; it had no --quick) that step skipped all
    five tests (a failure), `repo check --gpu-cc` read no GPU from nvidia-smi, and a detail cut mid-character left
    report.md invalid UTF-8.

    Then N36: 24.10 (TensorRT 10.5, no torch-tensorrt stand-in, as on such a box), only the rows that differ from
    24.08's (the GPU tests, one build and torch-tensorrt's): on deb75ca its builder list held torch-tensorrt ("not
    installed" counted as a failure) and the N23 test skipped, which fails the GPU-test step."""
    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)  # the host's trtexec: this box's TensorRT
    out = tmp_path / "acceptance"
    done = subprocess.run(["bash", str(SCRIPT), "--arch", QUICK_ARCH, "--weights", "none", "--out", str(out),
                           "--quick"], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, errors="replace", timeout=1700)
    report = (out / "report.md").read_text()
    rows = report_rows(report)
    assert {name: result for name, result in rows.items() if result not in PASSED} == {}, report
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Triton release 24.08" in report  # from this Python's TensorRT (`convert releases --installed`)
    for step in ("gpu-tests", *(f"convert {b}" for b in QUICK_BUILDS),
                 "serve (docker, 24.08)", "client compare (3 backends)", "client perf (sweep, shared memory)",
                 "serve (latency profile)", "client compare (latency profile)", "repo check --gpu-cc (this GPU, 8.6)"):
        assert rows.get(step) == "ok", (step, report)
    tests = (out / "logs" / "gpu-tests.log").read_text()
    ran = re.search(r"(\d+) passed", tests)
    assert ran and int(ran.group(1)) >= 5 and "skipped" not in tests, tests

    # N36, on the rows that differ for a release whose line has no torch-tensorrt: the GPU tests and the builds
    # (in the same --out: the export is up to date).
    release, version = SECOND
    env = {**os.environ, **environment(version, emulated_tensorrt.cudart), "STANDIN_TRT_VERSION": version,
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(SCRIPT), "--arch", QUICK_ARCH, "--weights", "none", "--out", str(out),
                           "--quick", "--builds", "tensorrt:fp32,torch-tensorrt:fp32", "--no-serve"], env=env,
                          capture_output=True, text=True, errors="replace", timeout=1700)
    report = (out / "report.md").read_text()
    rows = report_rows(report)
    assert {name: result for name, result in rows.items() if result not in PASSED} == {}, report
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Triton release {release}" in report and rows["gpu-tests"] == rows["convert tensorrt fp32"] == "ok"
    assert rows["torch-tensorrt builds and tests"] == "skipped (expected)" and "convert torch-tensorrt fp32" not in rows
    second = (out / "logs" / "gpu-tests.log").read_text()
    assert int(re.search(r"(\d+) passed", second).group(1)) == int(ran.group(1)) - 1 and "skipped" not in second, second
