"""A second, latency optimization profile (issue 27): `convert trt --latency-profile MIN,OPT,MAX` builds a plan of two
profiles with every builder that can (the Polygraphy builder on every version; trtexec and the container from
TensorRT 10, whose trtexec takes `--profile=N` before each profile's shapes: sampleOptions.cpp
getOptimizationProfiles), checks the plan in each profile at batch sizes inside it, and records the profiles in
order with the numbers of each. The builders that cannot refuse in one line."""

from __future__ import annotations

import pytest

from tests.conftest import error_line, run_cli
from tests.convert import build_job
from tests.convert.test_emulated_builds import manifest, plan_header, target

SHAPES = lambda *batches: [[b, 3, 224, 224] for b in batches]  # noqa: E731


def convert(artifacts, builder: str, *extra: str):
    return run_cli("convert", "trt", "--artifacts", artifacts, "--precision", "fp32", "--min-batch", "1", "--opt-batch",
                   "2", "--max-batch", "4", "--latency-profile", "1,1,2", "--builder", builder, *extra)


@pytest.mark.parametrize("builder", ["trtexec", "container", "tensorrt"])
def test_every_builder_that_can_builds_and_checks_both_profiles(emulated_tensorrt, standins, artifacts_copy,
                                                               monkeypatch, builder):
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)  # the host trtexec's TensorRT
    result = convert(artifacts_copy, builder, *target(emulated_tensorrt, standins, monkeypatch))
    if builder != "tensorrt" and emulated_tensorrt.version.startswith("8."):
        assert result.exit_code == 1
        assert error_line(result) == (f"error: --builder {builder}: trtexec of TensorRT 8.x builds one optimization "
                                      "profile, not the two of --latency-profile")
        return
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "built" and entry["builder"] == builder
    assert entry["profile"] == {"min": 1, "opt": 2, "max": 4} and entry["latency"] == {"min": 1, "opt": 1, "max": 2}
    assert entry["verification"]["passed"] and set(entry["verification"]["batches"]) == {"1", "3", "4"}
    assert entry["latency_verification"]["passed"] and set(entry["latency_verification"]["batches"]) == {"1", "2"}
    header = plan_header(artifacts_copy / "model.plan")
    assert header.profiles == [{"input": SHAPES(1, 2, 4)}, {"input": SHAPES(1, 1, 2)}]
    assert "verify the plan in profile 1 (1/1/2) against onnxruntime FP32" in result.output
    assert "; latency profile: rel err " in result.output  # the ✓ built line gives both profiles' figures
    if builder != "tensorrt":
        argv = entry["argv_used"]
        assert argv[argv.index("--profile=0"):argv.index("--profile=1") + 4][-4:] == [
            "--profile=1", "--minShapes=input:1x3x224x224", "--optShapes=input:1x3x224x224",
            "--maxShapes=input:2x3x224x224"]
    # The same job again is up to date; another latency profile is another plan.
    assert "is up to date" in convert(artifacts_copy, builder, *target(emulated_tensorrt, standins, monkeypatch)).output


@pytest.mark.parametrize("emulated_tensorrt", ["10.3.0.26"], indirect=True)  # torch-tensorrt 2.5 pins it
def test_refusals_of_a_latency_profile(emulated_tensorrt, artifacts_copy):
    refused = convert(artifacts_copy, "torch-tensorrt")
    assert refused.exit_code == 1
    assert error_line(refused) == ("error: --builder torch-tensorrt: its Input(min_shape, opt_shape, max_shape) makes one "
                                   "optimization profile: it cannot build --latency-profile")
    same = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--latency-profile", "1,16,32")
    assert error_line(same).startswith("error: --latency-profile 1,16,32 is the plan's first profile")
    for text, code in (("1,2", 1), ("4,2,1", 1), ("0,1,2", 1), ("a,b,c", 2)):  # a list that does not parse: usage
        bad = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--latency-profile", text)
        assert "--latency-profile" in error_line(bad, code), (text, bad.output)


def test_trtexec_argv_of_two_profiles():
    from tritonize.convert.reproducer import argv_by_major
    from tritonize.convert.trtexec import trtexec_argv
    from tritonize.errors import TritonizeError

    job = build_job(onnx_file="model.onnx", plan_file="model.plan", input_name="input", output_name="output",
                    input_shape=(3, 8, 8), profile={"min": 1, "opt": 16, "max": 32}, precision="fp32", workspace_mib=1024,
                    timing_cache="timing.cache", latency={"min": 1, "opt": 2, "max": 4})
    argv = trtexec_argv(job, "10.5.0")
    assert argv[3:11] == ["--profile=0", "--minShapes=input:1x3x8x8", "--optShapes=input:16x3x8x8",
                          "--maxShapes=input:32x3x8x8", "--profile=1", "--minShapes=input:1x3x8x8",
                          "--optShapes=input:2x3x8x8", "--maxShapes=input:4x3x8x8"]
    with pytest.raises(TritonizeError, match="trtexec of TensorRT 8.x builds one optimization profile"):
        trtexec_argv(job, "8.6.1")
    assert set(argv_by_major(job)) == {"10", "11"}  # convert.sh builds it with trtexec 10 and 11 only


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("builder", ["tensorrt", "trtexec"])
def test_a_latency_profile_reaching_past_the_first_is_checked_up_to_its_own_max(emulated_tensorrt, standins,
                                                                              artifacts_copy, monkeypatch, builder):
    """The check's inputs cover the larger of the two maxima, so profile 1 is checked at its own max, in profile 1
    (batch 3 lies outside profile 0: a check run in profile 0 fails)."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min-batch", "1",
                     "--opt-batch", "2", "--max-batch", "2", "--latency-profile", "1,1,3", "--builder", builder,
                     *target(emulated_tensorrt, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert set(entry["verification"]["batches"]) == {"1", "2"}
    assert set(entry["latency_verification"]["batches"]) == {"1", "3"}
    assert set(entry["timings"]) == {"build", "builder_seconds", "verify", "verify_latency"}


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("wrong", ["0", "1", "0,1"])
def test_a_plan_wrong_in_any_one_of_its_profiles_fails(emulated_tensorrt, artifacts_copy, monkeypatch, wrong):
    """A plan is built only when its check passes in every profile: kernels wrong in profile 0 alone, in the latency
    profile alone, or in both (the emulation's planted fault) each fail the plan, which is removed."""
    monkeypatch.setenv("STANDIN_TRT_WRONG_PROFILE", wrong)
    result = convert(artifacts_copy, "tensorrt")
    first = wrong.split(",")[0]
    assert error_line(result).startswith(f"error: the TensorRT plan failed verification in profile {first} (")
    entry = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    assert entry["status"] == "failed"
    assert entry["verification"]["passed"] == ("0" not in wrong)
    assert entry["latency_verification"]["passed"] == ("1" not in wrong)
    assert not (artifacts_copy / "model.plan").exists()
