"""Every builder on the emulated TensorRT 8.6, 10.x and 11.x (tests/standins/README.md): `convert trt` builds
a plan through the real Polygraphy, trtexec and the docker and torch-tensorrt stand-ins, checks it where its
TensorRT is, and records it; and the findings of issue 24 that only running the GPU half shows."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import run_cli

BUILDERS = ["trtexec", "container", "tensorrt", "torch-tensorrt"]
PAIRING = "STANDIN_TORCH_TENSORRT_PAIRING"  # why a test pairs torch-tensorrt with a TensorRT its version does not pin


def manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def plan_header(path):
    from tensorrt import _plan

    return _plan.read(path.read_bytes())[0]


def target(emulation, standins_dir, monkeypatch) -> list[str]:
    """--triton-release for the emulated version; a release the table does not know runs 11.x in the
    docker stand-in (no release in the table ships TensorRT 11 yet)."""
    if emulation.release is None:
        images = json.loads(__import__("os").environ.get("STANDIN_IMAGE_TRT", "{}"))
        monkeypatch.setenv("STANDIN_IMAGE_TRT", json.dumps({**images, "26.08": emulation.version}))
        return ["--triton-release", "26.08"]
    return ["--triton-release", emulation.release]


@pytest.mark.parametrize("builder", BUILDERS)
def test_every_builder_builds_and_checks_a_plan(emulated_tensorrt, standins, artifacts_copy, monkeypatch, builder):
    """Each builder's plan is built with the emulated TensorRT of the parameter's version (the container's:
    its release's), checked where that TensorRT is, and recorded with the engine's own tensor names."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)  # the host trtexec's TensorRT
    monkeypatch.setenv(PAIRING, "every builder builds with the release's TensorRT here: 24.10's 10.5, which no "
                                "torch-tensorrt pins, and 11.4, which none pins yet (2.13 pins 11.0)")
    started = datetime.now(timezone.utc).replace(microsecond=0)
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", builder, *target(emulated_tensorrt, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["builder"] == builder
    # trtexec's banner names the build number from 10.4 on: 8.6's reads 8.6.3 (tests/data/trtexec_options.json)
    assert emulated_tensorrt.version.startswith(entry["tensorrt_version"]) and len(entry["tensorrt_version"]) >= 5
    assert entry["verification"]["passed"] and set(entry["verification"]["batches"]) == {"1", "3", "4"}
    assert entry["verification"]["inputs"] == "synthetic (normalized uniform noise)"
    assert entry["verification"]["tolerance"] == {"max_rel_to_scale": 1e-3, "min_top1_agreement": 1.0}
    # torch-tensorrt's engine names (read from the engine): TorchScript frontend (2.2 on TensorRT 8.6), dynamo from 2.5
    major = emulated_tensorrt.version.split(".")[0]
    io = (("input_0", "output_0") if major == "8" else ("x", "output0")) if builder == "torch-tensorrt" else ("input", "output")
    assert (entry["input_name"], entry["output_name"]) == io
    header = plan_header(artifacts_copy / "model.plan")
    assert header.tensorrt_version == emulated_tensorrt.version and [t.name for t in header.inputs] == [io[0]]
    assert header.profiles == [{io[0]: [[1, 3, 224, 224], [2, 3, 224, 224], [4, 3, 224, 224]]}]
    assert "TF32" not in header.precision["flags"] and entry["tf32"] is False  # FP32 plans are strict FP32 (N15)
    assert f"build the engine with {builder} (TensorRT {entry['tensorrt_version']})" in result.output
    where = {"trtexec": "with the same trtexec", "container": "with trtexec in the same image"}.get(
        builder, "with this Python's TensorRT (Polygraphy)")
    assert "verify the plan against onnxruntime FP32 on " in result.output and f"(batches [1, 3, 4]), {where}" in result.output
    assert entry.get("log") == ("convert.log" if builder in ("trtexec", "container") else None)
    assert ("argv_used" in entry) == (builder in ("trtexec", "container"))
    if builder == "torch-tensorrt":
        frontend, source = ("torchscript", "model.pt") if io[0] == "input_0" else ("dynamo", "model.pt2")
        version = {"8": "2.2.0", "10": "2.9.0", "11": "2.13.0"}[major]  # the stand-in's torch-tensorrt
        assert entry["torch_tensorrt"] == {"version": version, "frontend": frontend, "source": source}
        assert f"its {frontend} frontend compiles {source}" in result.output
    assert set(entry["timings"]) == {"build", "builder_seconds", "verify"} and entry["timings"]["verify"]["seconds"] > 0
    assert datetime.fromisoformat(entry["created"]) >= started  # this build's
    built = next(line for line in result.output.splitlines() if "✓ built" in line)
    assert re.fullmatch(rf"  ✓ built {re.escape(str(artifacts_copy / 'model.plan'))} \({entry['size_bytes'] / 1e6:.0f} MB\) — "
                        r"rel err \S+ of scale, top-1 \d+%, top-5 \d+%, batch-invariant yes", built), built
    assert entry["timing_cache_file"] == f"timing-trt{entry['tensorrt_version']}-sm86.cache"
    assert entry["gpu"] == {"name": "Emulated GPU (tritonize tests, sm_86)", "compute_capability": "8.6", "count": 1}
    if emulated_tensorrt.version.startswith("8.") and builder != "torch-tensorrt":  # N5
        assert entry["onnx"]["file"] == "model_opset17.onnx" and manifest(artifacts_copy)["artifacts"]["onnx_opset17"]["verification"]["passed"]
    assert not list(artifacts_copy.glob("*.lock")) and not list(artifacts_copy.glob(".check-*"))  # N19


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)
def test_plans_are_checked_where_their_tensorrt_is(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """This Python's TensorRT is 11.4; the plans of Triton 24.04's image (8.6.3) and of a host trtexec 10.5
    are checked by the trtexec that built them, which can load them (N3: they were checked with this
    Python's TensorRT, which cannot)."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--builder", "container", "--triton-release", "24.04")
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["tensorrt_version"] == "8.6.3" and entry["verification"]["passed"]
    assert plan_header(artifacts_copy / "model.plan").tensorrt_version == "8.6.3.1"
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.5.0.18")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--builder", "trtexec", "--triton-release", "24.10")
    assert result.exit_code == 0, result.output
    assert manifest(artifacts_copy)["artifacts"]["tensorrt"]["tensorrt_version"] == "10.5.0.18"


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_the_python_check_names_the_tensorrt_that_would_load_the_plan(emulated_tensorrt, tmp_path):
    from tests.convert.test_plan_check import _emulated_plan
    from tritonize.convert.plan_check import verify_plan
    from tritonize.errors import TritonizeError

    plan = _emulated_plan(tmp_path)
    with pytest.raises(TritonizeError, match=r"cannot load a plan of TensorRT 10\.3\.0\.26: pip install 'tensorrt-cu12==10\.3\.0'"):
        verify_plan(plan, ("images", "logits"), None, None, None, [1], "-", built_with="10.3.0.26")


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_n31_the_check_names_a_tensorrt_wheel_pip_can_install(emulated_tensorrt, tmp_path):
    """N31: PyPI's tensorrt-cu12 for 10.7 is 10.7.0.post1 (`==10.7.0` matches nothing) and for 10.8 is
    10.8.0.43; the pin is the release table's `tensorrt_pip` (resolved against the index in
    tests/test_gpu_install.py), and a TensorRT with no wheel is said to have none."""
    from tests.convert.test_plan_check import _emulated_plan
    from tritonize.convert.plan_check import verify_plan
    from tritonize.errors import TritonizeError

    plan = _emulated_plan(tmp_path)
    for built_with, pin in (("10.7.0.23", "tensorrt-cu12==10.7.0.post1"), ("10.8.0.43", "tensorrt-cu12==10.8.0.43")):
        with pytest.raises(TritonizeError, match=f"pip install '{re.escape(pin)}' to check it here"):
            verify_plan(plan, ("images", "logits"), None, None, None, [1], "-", built_with=built_with)
    with pytest.raises(TritonizeError) as error:
        verify_plan(plan, ("images", "logits"), None, None, None, [1], "-", built_with="8.6.3.1")
    assert "pip install" not in str(error.value) and "no pip wheel" in str(error.value)


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_any_failure_of_a_builder_is_recorded_and_the_next_one_builds(emulated_tensorrt, artifacts_copy, monkeypatch):
    """Polygraphy cannot lock or write a timing cache in /proc: a FileNotFoundError out of the `tensorrt`
    builder (N6: a traceback, no record, the plan left) is a recorded failure, and torch-tensorrt builds
    (2.4: its TorchScript frontend, which takes no timing cache; dynamo's would fail on it too)."""
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", "2.4.0")
    monkeypatch.setenv(PAIRING, "2.4's TorchScript frontend takes no timing cache whatever its TensorRT (it pins 10.1); "
                                "the other builders build with 24.10's 10.5")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--triton-release", "24.10", "--timing-cache", "/proc/tritonize-timing.cache")
    assert result.exit_code == 0, result.output
    assert "tensorrt failed (tensorrt failed: FileNotFoundError" in result.output and "Traceback" not in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["builder"] == "torch-tensorrt"


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("version,error", [
    ("2.4.0", "torch-tensorrt failed: RuntimeError: [Error thrown at core/conversion/conversion.cpp:230]"),
    # dynamo logs the error and then fails on its unbound interpreter_result: the logged error is the one said
    ("2.9.0", "torch-tensorrt 2.9.0 could not convert model.pt2: While interpreting the module got an error: stand-in: "
              "Conversion of function torch._ops.aten.stand_in not currently supported!; no plan written"),
])
def test_a_torch_tensorrt_error_is_a_recorded_failure(emulated_tensorrt, artifacts_copy, monkeypatch, version, error):
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_MODE", "raise")
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", version)
    monkeypatch.setenv(PAIRING, "how each frontend fails, which does not depend on the TensorRT it pins (2.4: 10.1, "
                                "2.9: 10.13)")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--triton-release", "24.10", "--builder", "torch-tensorrt")
    assert result.exit_code == 1 and "Traceback" not in result.output and "UnboundLocalError" not in result.output
    assert error in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and error.split(": ", 1)[1] in entry["error"] and not (artifacts_copy / "model.plan").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_each_tensorrt_version_keeps_its_own_timing_cache(emulated_tensorrt, artifacts_copy, monkeypatch):
    """Builds alternate between two TensorRT versions in one artifacts directory: each finds its own cache
    again (N14: one timing.cache for all; TensorRT refuses another version's entries, Polygraphy then
    overwrites the file, and every switch loses the cache)."""
    from tests.emulation import VERSION_ENV, purge

    def build(version):
        monkeypatch.setenv(VERSION_ENV, version)
        purge()
        result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4",
                         "--opt-batch", "2", "--triton-release", "26.08", "--builder", "tensorrt", "--force")
        assert result.exit_code == 0, result.output
        return plan_header(artifacts_copy / "model.plan").builder["timing_cache_reused"]

    assert build("10.5.0.18") is False and build("11.4.0.106") is False
    assert build("10.5.0.18") is True and build("11.4.0.106") is True
    assert sorted(p.name for p in artifacts_copy.glob("timing*")) == ["timing-trt10.5.0.18-sm86.cache",
                                                                      "timing-trt11.4.0.106-sm86.cache"]


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)
def test_a_host_tensorrt_no_release_runs_gets_the_pins_printed(emulated_tensorrt, artifacts_copy):
    """N4: the pins of the releases tritonize knows, when this TensorRT matches none of them (building for the newest
    release, named: N37)."""
    from tritonize.releases import latest_release

    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--builder", "tensorrt", "--triton-release", latest_release().release)
    assert result.exit_code == 0, result.output
    assert "no release in tritonize's table runs TensorRT 11.4.0.106" in result.output
    assert ("Triton 24.08 (TensorRT 10.3.0.26; CPython 3.10-3.12, Linux x86_64): pip install -e '.[gpu,dev]' "
            "'tensorrt-cu12==10.3.0' 'tensorrt-cu12-bindings==10.3.0' 'tensorrt-cu12-libs==10.3.0' "
            "'torch-tensorrt==2.5.0' 'torch==2.5.0' 'torchvision==0.20.0'") in result.output


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.1.6"], indirect=True)
@pytest.mark.parametrize("builder", ["trtexec", "container"])
def test_n27_for_a_release_of_unknown_tensorrt_the_builders_tensorrt_decides_the_opset(emulated_tensorrt, standins,
                                                                                       artifacts_copy, monkeypatch,
                                                                                       builder):
    """N27: 23.10-24.01 ship TensorRT 8.6.1, which the release table does not know; the opset was decided from the
    table alone, so trtexec 8.6 (on the host, or the 24.01 image's) met opset 18, which its parser misreads (its
    ReduceMean ignores the axes input), and the build was refused (7c97878: "trtexec has TensorRT 8.6.1, whose ONNX
    parser reads opsets up to 17 and misreads model.onnx (opset 18); target a release with TensorRT 8"). The
    builder's probed TensorRT decides: the ONNX is converted to opset 17, and the plan built and checked."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    images = json.loads(os.environ["STANDIN_IMAGE_TRT"])
    monkeypatch.setenv("STANDIN_IMAGE_TRT", json.dumps({**images, "24.01": emulated_tensorrt.version}))
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--builder", builder, "--triton-release", "24.01")
    assert result.exit_code == 0, result.output
    assert "the builder's TensorRT is 8.6.1: the ONNX is converted to opset 17" in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["onnx"]["file"] == "model_opset17.onnx" and entry["verification"]["passed"]


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.1.6"], indirect=True)
def test_n27_a_convert_sh_written_without_a_builder_gives_trtexec_8_an_onnx_it_reads(emulated_tensorrt, standins,
                                                                                     artifacts_copy, monkeypatch):
    """N27's rest: on the CPU box no builder's TensorRT can be probed, and 23.10-24.01's TensorRT (8.6.1) is not in
    the table, so convert.sh's TensorRT 8 branch was given the opset-18 ONNX, which trtexec 8.6 misreads (here the
    emulated parser refuses it). A release that may ship TensorRT 8 (none before it in the table has a newer one) gets
    the opset-17 ONNX, which 8 and 10 read; for a later release, the 8 branch refuses, saying why, instead."""
    import subprocess

    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)  # the GPU box's trtexec
    wrote = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4",
                    "--opt-batch", "2", "--triton-release", "24.01", "--dry-run")  # what the CPU box writes
    assert wrote.exit_code == 0, wrote.output
    script = (artifacts_copy / "convert.sh").read_text()
    assert "--onnx=model_opset17.onnx" in next(line for line in script.splitlines() if line.startswith("  8) "))
    built = subprocess.run(["bash", str(artifacts_copy / "convert.sh")], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0 and (artifacts_copy / "model.plan").is_file(), built.stdout + built.stderr

    later = artifacts_copy.parent / "later"
    shutil.copytree(artifacts_copy, later)
    (later / "model.plan").unlink()
    assert run_cli("convert", "trt", "--artifacts", later, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                   "--triton-release", "26.08", "--dry-run").exit_code == 0
    refused = subprocess.run(["bash", str(later / "convert.sh")], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and not (later / "model.plan").exists(), refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        "trtexec of TensorRT 8 misreads model.onnx (opset 18; its ONNX parser reads up to opset 17): build in the "
        "release's container (bash convert.sh container) or with a TensorRT 10 trtexec")


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.1.6"], indirect=True)
def test_n27_a_tensorrt_8_builder_of_a_version_compatible_plan_for_tensorrt_10_reads_opset_17(emulated_tensorrt,
                                                                                            standins, artifacts_copy,
                                                                                            monkeypatch):
    """N27's rest: trtexec 8.6 building a version-compatible plan for 24.08 (TensorRT 10.3, which loads 8.6's) was
    given the opset-18 ONNX and refused with the old advice to "target a release with TensorRT 8". The probed
    builder's TensorRT decides the opset whatever the target's is."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4",
                     "--opt-batch", "2", "--builder", "trtexec", "--triton-release", "24.08", "--version-compatible")
    assert result.exit_code == 0, result.output
    assert "target a release with TensorRT 8" not in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["onnx"]["file"] == "model_opset17.onnx"


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_an_int8_plan_is_checked_on_the_held_out_photos_at_the_max_batch(emulated_tensorrt, artifacts_copy, photo_dir):
    """INT8 (the Q/DQ ONNX) through the TensorRT API: checked on the 4 held-out photos, repeated to the profile's
    max batch 8 (N18), with INT8's tolerance and random-init weights' ungated top-1 (N10's rule)."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "int8", "--max-batch", "8", "--opt-batch", "4",
                     "--calib-images", photo_dir, "--calib-count", "10", "--builder", "tensorrt", "--triton-release", "24.10")
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    check = entry["verification"]
    assert entry["status"] == "built" and entry["onnx"]["file"] == "model_int8.onnx" and entry["tf32"] is True
    assert check["inputs"] == "held-out real images (4, repeated to 8)" and set(check["batches"]) == {"1", "3", "8"}
    assert check["tolerance"] == {"max_rel_to_scale": 0.1, "min_top1_agreement": 0.0}
    assert "TF32" in plan_header(artifacts_copy / "model.plan").precision["flags"]


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_every_failure_is_named_when_all_builders_fail(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """auto: trtexec fails, the `tensorrt` builder raises (a timing cache in /proc), torch-tensorrt raises; each
    failure is said as it happens (the next builder is tried), and the last error names them all."""
    monkeypatch.setenv("STANDIN_MODE", "fail")
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_MODE", "raise")
    monkeypatch.setenv("STANDIN_DOCKER_RUNTIMES", json.dumps({"runc": {}}))
    monkeypatch.setenv("STANDIN_DOCKER_GPU", "0")  # and the container builder cannot run
    monkeypatch.setenv(PAIRING, "every builder fails on 24.10's TensorRT 10.5, which no torch-tensorrt pins; 2.9 "
                                "(10.13) fails the same way")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--triton-release", "24.10", "--timing-cache", "/proc/tritonize-timing.cache")
    assert result.exit_code == 1
    said = [line for line in result.output.splitlines() if "trying the next builder" in line]
    assert [line.split()[1] for line in said] == ["trtexec", "tensorrt"]
    error = next(line for line in result.output.splitlines() if line.startswith("error: "))
    assert error.startswith("error: every builder failed: trtexec: trtexec failed with exit code 1: ")
    assert "; tensorrt: tensorrt failed: FileNotFoundError: " in error
    assert error.endswith("; torch-tensorrt: torch-tensorrt 2.9.0 could not convert model.pt2: While interpreting the "
                          "module got an error: stand-in: Conversion of function torch._ops.aten.stand_in not currently "
                          "supported!; no plan written")


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_builds_and_checks_stop_at_the_timeout(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    from tritonize.convert import ConvertOptions, Profile, convert_trt
    from tritonize.errors import TritonizeError

    options = ConvertOptions(profile=Profile(1, 2, 4), precision="fp32", builder="trtexec", triton_release="24.10",
                             build_timeout_s=3)
    monkeypatch.setenv("STANDIN_MODE", "hang")
    with pytest.raises(TritonizeError, match=r"^trtexec timed out after 3 s and was stopped; no plan written"):
        convert_trt(artifacts_copy, options)
    monkeypatch.setenv("STANDIN_MODE", "hang-run")
    with pytest.raises(TritonizeError, match=r"^trtexec did not run the plan within 3 s$"):
        convert_trt(artifacts_copy, options)
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and not (artifacts_copy / "model.plan").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_version_compatible_plan_may_target_a_later_release(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """trtexec 10.3 (Triton 24.08) builds a version-compatible plan for 24.10 (10.5): allowed, and checked with
    --versionCompatible; without --version-compatible it is refused before it is built."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.3.0.26")
    args = ["convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
            "--builder", "trtexec", "--triton-release", "24.10"]
    refused = run_cli(*args)
    assert refused.exit_code == 1 and "error: trtexec has TensorRT 10.3.0 but Triton 24.10 runs TensorRT 10.5.0.18" in refused.output
    built = run_cli(*args, "--version-compatible")
    assert built.exit_code == 0, built.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and plan_header(artifacts_copy / "model.plan").version_compatible


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("extra, where", [([], ""), (["--latency-profile", "1,1,2"], " in profile 0")],
                         ids=["one_profile", "two_profiles"])
def test_a_plan_that_fails_its_check_is_recorded_and_removed(emulated_tensorrt, artifacts_copy, monkeypatch, extra, where):
    """The check's reference turned upside down: the plan is built, fails verification, is recorded as failed
    with its figures, and removed. With two profiles the error names the first that failed."""
    from dataclasses import replace

    from tritonize.convert import engine

    def upside_down(network, onnx, options):
        check = engine.plan_check(network, onnx, options)
        return replace(check, reference=-check.reference)

    monkeypatch.setattr("tritonize.convert.trt.plan_check", upside_down)
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "4", "--opt-batch", "2",
                     "--builder", "tensorrt", "--triton-release", "24.10", *extra)
    assert result.exit_code == 1
    assert f"error: the TensorRT plan failed verification{where} (rel err " in result.output and "); it was removed" in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and not entry["verification"]["passed"] and entry["file"] == "model.plan"
    assert not (artifacts_copy / "model.plan").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("builder", ["trtexec", "container"])
def test_n30_no_timing_cache_lock_is_left_in_the_artifacts(emulated_tensorrt, standins, artifacts_copy, monkeypatch,
                                                           builder):
    """N30: trtexec locks the timing cache with <cache>.lock, which its FileLock unlocks and closes but never removes
    (NVIDIA/TensorRT samples/utils/fileLock.cpp, 10.x; samples/common/common.h FileLock, 8.6): every trtexec and
    container build left one in the artifacts (7c97878). Removed after the build; another build's lock, there
    before, is kept."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    args = ["convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2",
            "--max-batch", "4", "--builder", builder, "--triton-release", "24.10"]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    cache = artifacts_copy / "timing-trt10.5.0.18-sm86.cache"
    assert cache.is_file() and sorted(p.name for p in artifacts_copy.glob("*.lock")) == []
    Path(f"{cache}.lock").write_bytes(b"")  # another build's
    assert run_cli(*args, "--force").exit_code == 0
    assert sorted(p.name for p in artifacts_copy.glob("*.lock")) == [f"{cache.name}.lock"]
