"""`convert trt --triton-release auto` (issue 27): the target follows the box, not the pins. The release whose
TensorRT is this machine's (this Python's `tensorrt`, else the trtexec on PATH), on the emulated TensorRT 8.6,
10.x and 11.x; and one line naming the pins that build for the chosen target."""

from __future__ import annotations

import json

import pytest

from tests.conftest import error_line, run_cli


def dry_run(artifacts, *extra):
    return run_cli("convert", "trt", "--artifacts", artifacts, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                   "--dry-run", *extra)


def test_auto_targets_the_release_whose_tensorrt_is_this_pythons(emulated_tensorrt, artifacts_copy):
    from tritonize.releases import pins_line, release_info

    result = dry_run(artifacts_copy, "--triton-release", "auto")
    if emulated_tensorrt.release is None:  # no release in the table ships TensorRT 11 yet
        assert error_line(result) == (
            f"error: --triton-release auto: no release in tritonize's table runs TensorRT {emulated_tensorrt.version} "
            "(this Python's TensorRT); install the pins of your target release (`tritonize convert releases`) or "
            "give --triton-release YY.MM")
        return
    assert result.exit_code == 0, result.output
    assert f"--triton-release auto: Triton {emulated_tensorrt.release}, whose TensorRT" in result.output
    target = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]["target"]
    assert target["triton_release"] == emulated_tensorrt.release
    assert f"--triton-release {emulated_tensorrt.release}" in (artifacts_copy / "convert.sh").read_text()
    pins = [line for line in result.output.splitlines() if line.startswith("  pins: ")]
    assert pins == [f"  pins: {pins_line(release_info(emulated_tensorrt.release))}"]  # 24.04's: no pip wheel


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_auto_without_a_python_tensorrt_asks_the_trtexec_on_path(emulated_tensorrt, standins, artifacts_copy,
                                                                 monkeypatch):
    monkeypatch.setattr("tritonize.convert.trt.host_tensorrt", lambda: None)  # this Python has no TensorRT
    monkeypatch.setenv("STANDIN_TRT_VERSION", "8.6.3.1")
    result = dry_run(artifacts_copy, "--triton-release", "auto")
    assert result.exit_code == 0, result.output
    assert "--triton-release auto: Triton 24.04, whose TensorRT 8.6.3.1 is the trtexec at" in result.output


def test_auto_with_no_tensorrt_at_all_is_one_line(artifacts_copy, monkeypatch):
    monkeypatch.setattr("tritonize.convert.trt.host_tensorrt", lambda: None)
    monkeypatch.setattr("tritonize.convert.trt.find_trtexec", lambda: None)
    assert error_line(dry_run(artifacts_copy, "--triton-release", "auto")) == (
        "error: --triton-release auto: this machine has no TensorRT (no `tensorrt` Python package, no trtexec on "
        "PATH); give --triton-release YY.MM (`tritonize convert releases` lists the pins)")
    assert error_line(dry_run(artifacts_copy, "--triton-release", "latest")).startswith(
        "error: --triton-release must look like YY.MM (e.g. 24.10) or be `auto`")
