"""Every builder on the emulated TensorRT 8.6, 10.x and 11.x (tests/standins/README.md): `convert trt` builds
a plan through the real Polygraphy, trtexec and the docker and torch-tensorrt stand-ins, checks it where its
TensorRT is, and records it; and the findings of issue 24 that only running the GPU half shows."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

BUILDERS = ["trtexec", "container", "tensorrt", "torch-tensorrt"]


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
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min", "1", "--opt", "2",
                     "--max", "4", "--builder", builder, *target(emulated_tensorrt, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["builder"] == builder
    # trtexec's banner names the build number from 10.4 on: 8.6's reads 8.6.3 (tests/data/trtexec_options.json)
    assert emulated_tensorrt.version.startswith(entry["tensorrt_version"]) and len(entry["tensorrt_version"]) >= 5
    assert entry["verification"]["passed"] and set(entry["verification"]["batches"]) == {"1", "3", "4"}
    io = ("input_0", "output_0") if builder == "torch-tensorrt" else ("input", "output")
    assert (entry["input_name"], entry["output_name"]) == io
    header = plan_header(artifacts_copy / "model.plan")
    assert header.tensorrt_version == emulated_tensorrt.version and [t.name for t in header.inputs] == [io[0]]
    assert header.profiles == [{io[0]: [[1, 3, 224, 224], [2, 3, 224, 224], [4, 3, 224, 224]]}]
    assert "TF32" not in header.precision["flags"] and entry["tf32"] is False  # FP32 plans are strict FP32 (N15)
    assert entry["gpu"] == {"name": "Emulated GPU (tritonize tests, sm_86)", "compute_capability": "8.6", "count": 1}
    if emulated_tensorrt.version.startswith("8.") and builder != "torch-tensorrt":  # N5
        assert entry["onnx"]["file"] == "model_opset17.onnx" and manifest(artifacts_copy)["artifacts"]["onnx_opset17"]["verification"]["passed"]
    assert not list(artifacts_copy.glob("*.lock")) and not list(artifacts_copy.glob(".check-*"))  # N19


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)
def test_plans_are_checked_where_their_tensorrt_is(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """This Python's TensorRT is 11.4; the plans of Triton 24.04's image (8.6.3) and of a host trtexec 10.5
    are checked by the trtexec that built them, which can load them (N3: they were checked with this
    Python's TensorRT, which cannot)."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
                     "--builder", "container", "--triton-release", "24.04")
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["tensorrt_version"] == "8.6.3" and entry["verification"]["passed"]
    assert plan_header(artifacts_copy / "model.plan").tensorrt_version == "8.6.3.1"
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.5.0.18")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
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
def test_any_failure_of_a_builder_is_recorded_and_the_next_one_builds(emulated_tensorrt, artifacts_copy):
    """Polygraphy cannot lock or write a timing cache in /proc: a FileNotFoundError out of the `tensorrt`
    builder (N6: a traceback, no record, the plan left) is a recorded failure, and torch-tensorrt builds."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
                     "--triton-release", "24.10", "--timing-cache", "/proc/tritonize-timing.cache")
    assert result.exit_code == 0, result.output
    assert "tensorrt failed (tensorrt failed: FileNotFoundError" in result.output and "Traceback" not in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["builder"] == "torch-tensorrt"


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_torch_tensorrt_error_is_a_recorded_failure(emulated_tensorrt, artifacts_copy, monkeypatch):
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_MODE", "raise")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
                     "--triton-release", "24.10", "--builder", "torch-tensorrt")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "torch-tensorrt failed: RuntimeError: [Error thrown at core/conversion/conversion.cpp:230]" in result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and "RuntimeError" in entry["error"] and not (artifacts_copy / "model.plan").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_each_tensorrt_version_keeps_its_own_timing_cache(emulated_tensorrt, artifacts_copy, monkeypatch):
    """Builds alternate between two TensorRT versions in one artifacts directory: each finds its own cache
    again (N14: one timing.cache for all; TensorRT refuses another version's entries, Polygraphy then
    overwrites the file, and every switch loses the cache)."""
    from tests.emulation import VERSION_ENV, purge

    def build(version):
        monkeypatch.setenv(VERSION_ENV, version)
        purge()
        result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4",
                         "--opt", "2", "--triton-release", "26.08", "--builder", "tensorrt", "--force")
        assert result.exit_code == 0, result.output
        return plan_header(artifacts_copy / "model.plan").builder["timing_cache_reused"]

    assert build("10.5.0.18") is False and build("11.4.0.106") is False
    assert build("10.5.0.18") is True and build("11.4.0.106") is True
    assert sorted(p.name for p in artifacts_copy.glob("timing*")) == ["timing-trt10.5.0.18-sm86.cache",
                                                                      "timing-trt11.4.0.106-sm86.cache"]


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)
def test_a_host_tensorrt_no_release_runs_gets_the_pins_printed(emulated_tensorrt, artifacts_copy):
    """N4: the pins of the releases tritonize knows, when this TensorRT matches none of them."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
                     "--builder", "tensorrt")
    assert result.exit_code == 0, result.output
    assert "no release in tritonize's table runs TensorRT 11.4.0.106" in result.output
    assert "Triton 24.08 (TensorRT 10.3.0.26): pip install 'tensorrt-cu12==10.3.0' 'torch-tensorrt==2.5.0'" in result.output


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1"], indirect=True)
def test_tensorrt_8_never_reads_an_onnx_newer_than_its_parser(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """For a release of unknown TensorRT there is no conversion; trtexec 8.6 would misread opset 18 (its
    ReduceMean ignores the axes input): one clear refusal (N5). For 24.04 the ONNX is converted to opset 17."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", "8.6.3.1")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max", "4", "--opt", "2",
                     "--builder", "trtexec", "--triton-release", "26.08")
    assert result.exit_code == 1 and "reads opsets up to 17 and misreads model.onnx (opset 18)" in result.output
    assert manifest(artifacts_copy)["artifacts"]["tensorrt"]["status"] == "failed"
