"""The plan check's name rule: the engine's I/O must be exactly what its builder says, because the
manifest records those names and `repo build` serves them."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.convert import build_job
from tritonize.convert.plan_check import check_engine_io
from tritonize.errors import TritonizeError


def test_engine_names_match():
    check_engine_io(["input_0"], ["output_0"], ("input_0", "output_0"))


@pytest.mark.parametrize("inputs,outputs", [(["input_0"], ["output_0"]), (["input"], ["output", "extra"]), ([], ["output"])])
def test_other_names_are_refused(inputs, outputs):
    with pytest.raises(TritonizeError, match="the plan has inputs"):
        check_engine_io(inputs, outputs, ("input", "output"))


def _emulated_plan(tmp_path, version_compatible=False):
    """A plan of the tiny classifier built by tritonize's own Polygraphy build, on the emulated TensorRT."""
    import tensorrt as trt

    from tests.emulation import tiny_classifier
    from tritonize.convert.builders import plan_from_onnx

    tiny_classifier(tmp_path / "tiny.onnx")
    job = build_job(onnx_file="tiny.onnx", plan_file="tiny.plan", input_name="images", output_name="logits",
                   input_shape=(3, 16, 16), profile={"min": 1, "opt": 2, "max": 4}, precision="fp32",
                   workspace_mib=64, timing_cache="timing.cache", version_compatible=version_compatible)
    plan = tmp_path / "tiny.plan"
    plan.write_bytes(bytes(plan_from_onnx(job, tmp_path, trt)()))
    return plan


def test_the_plan_check_runs_through_polygraphy(emulated_tensorrt, tmp_path):
    """The real Polygraphy on the emulated TensorRT, whose plans compute exactly onnxruntime's outputs: the
    check finds no error at any batch (N2: each output copied before the next run reuses its buffer), reads
    the engine's I/O from the engine (N1: TrtRunner has no get_output_metadata), loads plans on 8.6 (N20:
    no IStreamReader there) and leaves no device buffer behind (N21: the fixture's leak check)."""
    import onnxruntime as ort

    from tests.emulation import live_cuda
    from tritonize.convert.plan_check import verify_plan
    from tritonize.verify import Tolerance

    plan = _emulated_plan(tmp_path)
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    reference = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    before = live_cuda()
    report = verify_plan(plan, ("images", "logits"), x, reference, Tolerance(1e-6, 1.0), [1, 3, 4], "synthetic")
    assert report.passed and report.worst_rel_to_scale == 0.0 and set(report.batches) == {"1", "3", "4"}
    assert live_cuda()[:3] == before[:3]
    with pytest.raises(TritonizeError, match=r"the plan has inputs \['images'\] and outputs \['logits'\]"):
        verify_plan(plan, ("input_0", "output_0"), x, reference, Tolerance(), [1], "synthetic")


def _check(x, reference, tolerance=None, batches=(1, 2, 4)):
    from tritonize.convert.plan_check import PlanCheck
    from tritonize.verify import Tolerance

    return PlanCheck(x, reference, tolerance or Tolerance(0.5, 1.0), list(batches), "tiny inputs")


def _reference(tmp_path):
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"])
    return x, session.run(None, {"images": x})[0]


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_the_plan_check_reports_what_it_was_given(emulated_tensorrt, tmp_path):
    from tritonize.convert.plan_check import verify_plan
    from tritonize.verify import Tolerance

    plan = _emulated_plan(tmp_path, version_compatible=True)
    x, reference = _reference(tmp_path)
    report = verify_plan(plan, ("images", "logits"), x, reference, Tolerance(0.5, 1.0), [1, 2, 4], "tiny inputs",
                         built_with="10.3.0.26", version_compatible=True)  # an older version-compatible plan loads
    assert report.tolerance == Tolerance(0.5, 1.0) and list(report.batches) == ["1", "2", "4"]
    assert report.inputs == "tiny inputs" and report.passed


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_plan_tensorrt_cannot_run_is_one_line(emulated_tensorrt, tmp_path, monkeypatch):
    """A plan of another TensorRT reaches Polygraphy's loader (nothing said which TensorRT built it):
    TensorRT's refusal, through Polygraphy, is one TritonizeError naming the plan."""
    from tests.emulation import VERSION_ENV, purge
    from tritonize.convert.plan_check import verify_plan
    from tritonize.verify import Tolerance

    plan = _emulated_plan(tmp_path)
    monkeypatch.setenv(VERSION_ENV, "10.8.0.43")
    purge()
    with pytest.raises(TritonizeError) as error:
        verify_plan(plan, ("images", "logits"), None, None, Tolerance(), [1], "-")
    assert str(error.value) == ("TensorRT could not run tiny.plan: Could not deserialize engine. See log for details. "
                                "(TensorRT's messages are above)")


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1", "10.5.0.18"], indirect=True)
def test_n33_a_runner_that_fails_half_way_through_activate_leaves_no_stream(emulated_tensorrt, tmp_path):
    """N33: TrtRunner.activate() makes its stream, then selects the profile; an engine that refuses it (profile 1 of
    a one-profile plan) leaves the runner inactive, and deactivate() (Polygraphy 0.53.6 BaseRunner) returns at once
    when inactive: the stream leaked (7c97878: the CUDA stand-in held 1 stream after the failed check)."""
    from tests.emulation import live_cuda
    from tritonize.convert.plan_check import verify_plan
    from tritonize.verify import Tolerance

    plan = _emulated_plan(tmp_path)
    x, reference = _reference(tmp_path)
    before = live_cuda()
    with pytest.raises(TritonizeError, match="^TensorRT could not run tiny.plan: .*profile"):
        verify_plan(plan, ("images", "logits"), x, reference, Tolerance(0.5, 1.0), [1], "tiny inputs", profile=1)
    assert live_cuda()[:3] == before[:3]  # (allocations, bytes, streams)


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_n33_a_tensorrt_backend_instance_that_fails_to_load_leaves_no_stream(emulated_tensorrt, tmp_path, monkeypatch):
    """N33, in the served backend (serve/backends/tensorrt): an instance whose group names profile 1 of a one-profile
    plan fails its load after making its stream; the stream is freed then, not left to a finalize() that a failed
    initialize() need not get."""
    import types

    from tests.emulation import live_cuda

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    for name in ("tritonize.serve.backends.batching", "tritonize.serve.backends.tensorrt.model"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    from tritonize.serve.backends.batching import Placement, TensorSpec
    from tritonize.serve.backends.tensorrt.model import TritonPythonModel

    model = TritonPythonModel()
    model.config, model.instance_name = {"instance_group": [{"name": "latency", "profile": ["1"]}]}, "latency_0"
    model.inputs = [TensorSpec("images", np.dtype(np.float32), (3, 16, 16))]
    model.outputs = [TensorSpec("logits", np.dtype(np.float32), (10,))]
    plan = _emulated_plan(tmp_path)
    before = live_cuda()
    with pytest.raises(RuntimeError, match="Can not set the specified optimization profile 1 for latency_0"):
        model.load(plan, Placement("GPU", 0, 1))
    assert live_cuda()[:3] == before[:3]
    for name in ("tritonize.serve.backends.batching", "tritonize.serve.backends.tensorrt.model"):
        sys.modules.pop(name, None)  # imported here with the stand-in module above


def test_without_tensorrt_the_check_says_how_to_get_it(tmp_path):
    from tritonize.convert.plan_check import verify_plan

    with pytest.raises(TritonizeError) as error:
        verify_plan(tmp_path / "model.plan", ("input", "output"), None, None, None, [1], "-")
    assert str(error.value) == ("cannot verify the plan: tensorrt is not installed (install your target release's "
                                "TensorRT: `tritonize convert releases` prints the pins)")


def test_engine_io_mismatch_message():
    with pytest.raises(TritonizeError) as error:
        check_engine_io(["images"], ["logits"], ("input", "output"))
    assert str(error.value) == ("the plan has inputs ['images'] and outputs ['logits'], but its builder names input "
                                "'input' and output 'output'; the plan was removed (report this: the builder's engine "
                                "names are wrong)")


def test_trtexecs_exported_output_is_read_as_float32():
    from tritonize.convert.plan_check import exported_output

    text = '[\n  { "name" : "logits"\n  , "dimensions" : "2x3"\n  , "values" : [ 1, 2.5, -3, 4, 5e-07, 6 ]\n  }\n]\n'
    values = exported_output(text, "logits")
    assert values.dtype == np.float32 and values.shape == (2, 3) and values[0, 1] == 2.5
    with pytest.raises(TritonizeError) as error:
        exported_output(text, "output")
    assert str(error.value) == "trtexec's exported output has no readable tensor 'output' (KeyError: 'output')"


def test_n26_nan_in_trtexecs_exported_output_fails_the_comparison():
    """N26: trtexec prints each value with `os << v` (NVIDIA/TensorRT samples/common/sampleUtils.cpp print(),
    called by sampleReporting.cpp exportJSONOutput), so an FP16 overflow reaches the file as `nan`/`inf`, which is
    not JSON. The check reads them and fails the comparison on them, instead of "no readable tensor"."""
    from tests.nvidia_engines import FACTS
    from tritonize.convert.plan_check import exported_output
    from tritonize.verify import Tolerance, verify_runner

    text = (FACTS / "trtexec_exportOutput_nan.json").read_text()
    values = exported_output(text, "logits")
    assert values.dtype == np.float32 and values.shape == (2, 5)
    assert np.isnan(values[0, 2]) and values[0, 4] == np.inf and np.isnan(values[1, 0]) and values[1, 3] == -np.inf
    assert values[1, 2] == 1e5 and values[0, 0] == 3.25
    reference = np.nan_to_num(values, nan=0.0, posinf=1.0, neginf=-1.0)
    report = verify_runner(lambda x: exported_output(text, "logits")[: len(x)], reference, reference, Tolerance(),
                           batches=[1, 2])
    assert not report.passed and not report.batches["2"].finite


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_trtexec_checks_the_plans_it_can_load(emulated_tensorrt, tmp_path, monkeypatch):
    """verify_with_trtexec runs each batch through the trtexec stand-in (--loadEngine ... --exportOutput):
    the same figures as onnxruntime (trtexec prints 6 significant digits); another trtexec cannot load the
    plan, and says so in one line; a version-compatible plan loads in a later one with --versionCompatible
    only; a hung trtexec is stopped (and `kill` run); the check files never stay."""
    from tests.conftest import STANDINS
    from tritonize.convert.plan_check import verify_with_trtexec

    trtexec = [sys.executable, str(STANDINS / "trtexec.py")]
    plan = _emulated_plan(tmp_path, version_compatible=True)
    x, reference = _reference(tmp_path)
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.5.0.18")
    report = verify_with_trtexec(trtexec, tmp_path, plan.name, ("images", "logits"), _check(x, reference), True, 60)
    assert report.passed and 0 < report.worst_rel_to_scale < 1e-5 and list(report.batches) == ["1", "2", "4"]
    assert report.inputs == "tiny inputs" and report.tolerance.max_rel_to_scale == 0.5
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.8.0.43")
    assert verify_with_trtexec(trtexec, tmp_path, plan.name, ("images", "logits"), _check(x, reference), True, 60).passed
    with pytest.raises(TritonizeError) as error:
        verify_with_trtexec(trtexec, tmp_path, plan.name, ("images", "logits"), _check(x, reference), False, 60)
    assert str(error.value) == (
        "trtexec could not run the plan (exit code 1): [E] [TRT] IRuntime::deserializeCudaEngine: Error Code 1: "
        "Serialization (the plan is version-compatible: it carries the lean runtime, which runs only with "
        "engine_host_code_allowed = True)")
    monkeypatch.setenv("STANDIN_MODE", "hang-run")
    marker = tmp_path / "killed"
    with pytest.raises(TritonizeError, match=r"^trtexec did not run the plan within 2 s$"):
        verify_with_trtexec(trtexec, tmp_path, plan.name, ("images", "logits"), _check(x, reference), True, 2,
                            kill=["touch", str(marker)])
    assert marker.exists() and not list(tmp_path.glob(".check-*"))


@pytest.mark.parametrize("command,said", [
    (["false"], "no output"),
    (["sh", "-c", "echo '[E] error one' >&2; echo '[E] error two' >&2; echo '[E] error three' >&2; exit 3", "sh"],
     "[E] error two | [E] error three"),
])
def test_a_failed_trtexec_run_says_its_last_errors(tmp_path, command, said):
    from tritonize.convert.plan_check import verify_with_trtexec

    x = np.zeros((1, 3, 16, 16), np.float32)
    with pytest.raises(TritonizeError) as error:
        verify_with_trtexec(command, tmp_path, "tiny.plan", ("images", "logits"), _check(x, x, batches=[1]), False, 60)
    code = 1 if command == ["false"] else 3
    assert str(error.value) == f"trtexec could not run the plan (exit code {code}): {said}"
    assert not list(tmp_path.glob(".check-*"))


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_without_a_cuda_runtime_the_check_says_where_it_looked(emulated_tensorrt, tmp_path, monkeypatch):
    from tests.emulation import purge
    from tritonize.convert.plan_check import verify_plan

    plan = _emulated_plan(tmp_path)
    purge()
    monkeypatch.setattr("tritonize.machine.cudart_candidates", lambda: [])
    with pytest.raises(TritonizeError) as error:
        verify_plan(plan, ("images", "logits"), None, None, None, [1], "-")
    assert str(error.value) == (
        "cannot verify the plan: no CUDA runtime library (libcudart.so*) on LD_LIBRARY_PATH, in the nvidia-cuda-runtime "
        "wheels or in /usr/local/cuda/lib64: pip install nvidia-cuda-runtime-cu12")
