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


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_n37_without_triton_release_the_target_is_the_release_this_machines_tensorrt_serves(emulated_tensorrt,
                                                                                            artifacts_copy):
    """N37: the README's card command names no release; with this Python's TensorRT 10.5.0.18 (Triton 24.10) it
    targeted the newest release in the table (26.08: TensorRT unknown), so a host-built plan was recorded for 26.08,
    which `serve` then started and which refused it. Without --triton-release the target is `auto`'s."""
    result = dry_run(artifacts_copy)
    assert result.exit_code == 0, result.output
    assert "Triton 24.10, whose TensorRT 10.5.0.18 is this Python's TensorRT" in result.output
    target = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]["target"]
    assert target == {"triton_release": "24.10", "image": "nvcr.io/nvidia/tritonserver:24.10-py3", "tensorrt": "10.5.0.18"}


def test_n37_without_any_tensorrt_the_target_is_the_newest_release(artifacts_copy, monkeypatch):
    """A CPU box (no TensorRT at all): the newest release tritonize knows, as before."""
    from tritonize.releases import latest_release

    monkeypatch.setattr("tritonize.convert.trt.host_tensorrt", lambda: None)
    monkeypatch.setattr("tritonize.convert.trt.find_trtexec", lambda: None)
    assert dry_run(artifacts_copy).exit_code == 0
    target = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]["target"]
    assert target["triton_release"] == latest_release().release


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)
def test_n37_a_host_build_for_a_release_of_unknown_tensorrt_needs_that_release_named(emulated_tensorrt, artifacts_copy):
    """A TensorRT no release in the table runs (11.4 here): the default is then the newest release, whose TensorRT
    tritonize does not know, so a plan built with this machine's TensorRT may not load there. The host build is
    refused, in one line that names both ways on; named, that release is built for (and said to be unchecked)."""
    from tritonize.releases import latest_release

    newest = latest_release().release
    refused = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4",
                      "--opt-batch", "2", "--builder", "tensorrt")
    assert error_line(refused) == (
        f"error: tensorrt: tritonize does not know Triton {newest}'s TensorRT, so a plan built with TensorRT 11.4.0.106 "
        f"may not load there; name that release (--triton-release {newest}) to build for it all the same, or use "
        "--builder container (it builds with the server's own TensorRT)")
    assert not (artifacts_copy / "model.plan").exists()
    named = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4",
                    "--opt-batch", "2", "--builder", "tensorrt", "--triton-release", newest)
    assert named.exit_code == 0, named.output
    assert f"tritonize does not know Triton {newest}'s TensorRT; building with TensorRT 11.4.0.106" in named.output
