"""The exact trtexec argv for each precision x TensorRT major version (flag history: trtexec.py)."""

from __future__ import annotations

import pytest

from tritonize.convert.trtexec import BuildJob, parse_banner_version, trtexec_argv
from tritonize.errors import TritonizeError

PRECISION_FLAGS = ("--fp16", "--int8", "--best", "--bf16", "--fp8", "--calib")


def job(precision="fp16", **kw) -> BuildJob:
    base = dict(onnx_file="model_fp16.onnx", plan_file="model.plan", input_name="input", input_shape=(3, 224, 224),
                profile={"min": 1, "opt": 16, "max": 32}, precision=precision, workspace_mib=4096, timing_cache="timing.cache")
    return BuildJob(**{**base, **kw})


@pytest.mark.parametrize("version", ["8.6.3", "10.5.0", "11.0.0"])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_profile_files_and_build_only(version, precision):
    argv = trtexec_argv(job(precision), version)
    assert argv[0] == "trtexec"
    for flag in ("--minShapes=input:1x3x224x224", "--optShapes=input:16x3x224x224", "--maxShapes=input:32x3x224x224",
                 "--onnx=model_fp16.onnx", "--saveEngine=.model.plan.partial", "--timingCacheFile=timing.cache",
                 "--builderOptimizationLevel=3", "--skipInference"):
        assert flag in argv
    assert "--best" not in argv  # never an uncalibrated --best, on any version
    assert len(argv) == len(set(argv))


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_10_is_strongly_typed_without_precision_flags(precision):
    argv = trtexec_argv(job(precision), "10.5.0")
    assert "--stronglyTyped" in argv and "--memPoolSize=workspace:4096M" in argv
    assert not any(a.startswith(PRECISION_FLAGS) for a in argv)
    assert not any(a.startswith("--workspace=") for a in argv)  # removed in 10.0
    assert ("--noTF32" in argv) == (precision == "fp32")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_11_has_no_precision_or_typing_flags(precision):
    argv = trtexec_argv(job(precision), "11.0.0")
    assert not any(a.startswith(PRECISION_FLAGS + ("--stronglyTyped", "--noTF32")) for a in argv)
    assert "--memPoolSize=workspace:4096M" in argv


@pytest.mark.parametrize("precision,expected", [("fp32", ["--noTF32"]), ("fp16", ["--fp16"]), ("int8", ["--int8"])])
def test_tensorrt_8_uses_precision_flags_and_workspace(precision, expected):
    argv = trtexec_argv(job(precision), "8.6.1")
    assert "--workspace=4096" in argv and not any(a.startswith("--memPoolSize") for a in argv)
    assert "--stronglyTyped" not in argv
    assert [a for a in argv if a in ("--fp16", "--int8", "--noTF32")] == expected


def test_tensorrt_8_pins_fp32_islands_of_mixed_precision():
    argv = trtexec_argv(job("fp16", fp32_layers=("node_conv7", "node_add9")), "8.6.1")
    assert "--precisionConstraints=obey" in argv
    assert "--layerPrecisions=node_conv7:fp32,node_add9:fp32" in argv
    assert not any("layerPrecisions" in a for a in trtexec_argv(job("fp16", fp32_layers=("x",)), "10.5.0"))


def test_tensorrt_8_before_8_6_uses_build_only_and_refuses_new_flags():
    argv = trtexec_argv(job("fp16"), "8.5.3")
    assert "--buildOnly" in argv and "--skipInference" not in argv
    assert not any(a.startswith("--builderOptimizationLevel") for a in argv)
    with pytest.raises(TritonizeError, match="8.6"):
        trtexec_argv(job("fp16", version_compatible=True), "8.5.3")


def test_compatibility_flags():
    argv = trtexec_argv(job("fp16", version_compatible=True, hardware_compatibility="ampere+", opt_level=5), "10.5.0")
    assert {"--versionCompatible", "--hardwareCompatibilityLevel=ampere+", "--builderOptimizationLevel=5"} <= set(argv)


@pytest.mark.parametrize("version", ["7.2.3", "9.3.0", "12.0.0", "ten"])
def test_unsupported_versions(version):
    with pytest.raises(TritonizeError):
        trtexec_argv(job(), version)


@pytest.mark.parametrize("banner,version", [
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v100500] # trtexec --help", "10.5.0"),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec", "8.6.1"),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v110002] # trtexec", "11.0.2"),
    ("no banner here", None),
])
def test_banner_version(banner, version):
    assert parse_banner_version(banner) == version
