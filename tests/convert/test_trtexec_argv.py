"""The exact trtexec argv for each precision x TensorRT version (flag history: trtexec.py), and the same
argv run by the trtexec STAND-IN, which accepts exactly the options of the version it emulates."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.convert import build_job
from tritonize.convert.trtexec import BuildJob, parse_banner_version, probe_trtexec, trtexec_argv
from tritonize.errors import TritonizeError

PRECISION_FLAGS = ("--fp16", "--int8", "--best", "--bf16", "--fp8", "--calib")
# One version per recorded trtexec parser (tests/data/trtexec_options.json), the Triton -py3 releases'
# versions among them, and the version each banner tells (the build number only from 10.4 on).
VERSIONS = {"8.6.1.6": "8.6.1", "8.6.3.1": "8.6.3", "10.0.0.6": "10.0.0", "10.0.1.6": "10.0.1", "10.3.0.26": "10.3.0",
            "10.5.0.18": "10.5.0.18", "10.16.1.11": "10.16.1.11", "11.0.0.114": "11.0.0.114", "11.1.0.106": "11.1.0.106"}


def job(precision="fp16", **kw) -> BuildJob:
    base = dict(onnx_file="model_fp16.onnx", plan_file="model.plan", input_name="input", output_name="output",
                input_shape=(3, 224, 224), profile={"min": 1, "opt": 16, "max": 32}, precision=precision,
                workspace_mib=4096, timing_cache="timing.cache")
    return build_job(**{**base, **kw})


@pytest.mark.parametrize("version", ["8.6.3", "10.5.0", "11.0.0"])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_profile_files_and_build_only(version, precision):
    argv = trtexec_argv(job(precision), version)
    assert argv[0] == "trtexec"
    for flag in ("--minShapes=input:1x3x224x224", "--optShapes=input:16x3x224x224", "--maxShapes=input:32x3x224x224",
                 "--onnx=model_fp16.onnx", "--saveEngine=.model.plan.partial", "--timingCacheFile=timing.cache",
                 "--builderOptimizationLevel=3", "--skipInference", "--memPoolSize=workspace:4096"):
        assert flag in argv
    assert "--best" not in argv  # never an uncalibrated --best, on any version
    assert len(argv) == len(set(argv))
    assert ("--noTF32" in argv) == (precision == "fp32")  # TF32 is on by default in every version, 11 included


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_10_is_strongly_typed_without_precision_flags(precision):
    argv = trtexec_argv(job(precision), "10.5.0")
    assert "--stronglyTyped" in argv
    assert not any(a.startswith(PRECISION_FLAGS) for a in argv)
    assert not any(a.startswith("--workspace=") for a in argv)  # removed in 10.0


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_11_has_no_precision_or_typing_flags(precision):
    argv = trtexec_argv(job(precision), "11.0.0")
    assert not any(a.startswith(PRECISION_FLAGS + ("--stronglyTyped",)) for a in argv)


@pytest.mark.parametrize("precision,expected", [("fp32", ["--noTF32"]), ("fp16", ["--fp16"]), ("int8", ["--int8"])])
def test_tensorrt_8_uses_precision_flags(precision, expected):
    argv = trtexec_argv(job(precision), "8.6.1")
    assert "--stronglyTyped" not in argv
    assert [a for a in argv if a in ("--fp16", "--int8", "--noTF32")] == expected


def test_workspace_before_8_4_is_the_old_flag():
    argv = trtexec_argv(job("fp16"), "8.2.5")
    assert "--workspace=4096" in argv and not any(a.startswith("--memPoolSize") for a in argv)
    assert "--memPoolSize=workspace:4096" in trtexec_argv(job("fp16"), "8.4.0")  # from 8.4 on


SHAPES = ["--onnx=model_fp16.onnx", "--saveEngine=.model.plan.partial", "--minShapes=input:1x3x224x224",
          "--optShapes=input:16x3x224x224", "--maxShapes=input:32x3x224x224"]


LAYER_INFO = ["--profilingVerbosity=detailed", "--exportLayerInfo=model.layers.json"]  # 8.6+: what each layer runs in


@pytest.mark.parametrize("version,precision,rest", [
    ("10.5.0", "fp16", ["--memPoolSize=workspace:4096", "--stronglyTyped", "--timingCacheFile=timing.cache",
                        "--builderOptimizationLevel=3", *LAYER_INFO, "--skipInference"]),
    ("11.0.0", "fp32", ["--memPoolSize=workspace:4096", "--noTF32", "--timingCacheFile=timing.cache",
                        "--builderOptimizationLevel=3", *LAYER_INFO, "--skipInference"]),
    ("8.6.1", "int8", ["--memPoolSize=workspace:4096", "--int8", "--timingCacheFile=timing.cache",
                       "--builderOptimizationLevel=3", *LAYER_INFO, "--skipInference"]),
    ("8.2.5", "fp16", ["--workspace=4096", "--fp16", "--timingCacheFile=timing.cache", "--buildOnly"]),
])
def test_the_whole_argv_of_a_default_job(version, precision, rest):
    """Nothing more than asked for: no compatibility flags unless the job wants them."""
    assert trtexec_argv(job(precision), version) == ["trtexec", *SHAPES, *rest]


def test_tensorrt_8_pins_fp32_islands_of_mixed_precision():
    argv = trtexec_argv(job("fp16", fp32_layers=("node_conv7", "node_add9")), "8.6.1")
    assert "--fp16" in argv and "--precisionConstraints=obey" in argv
    assert "--layerPrecisions=node_conv7:fp32,node_add9:fp32" in argv
    assert "--precisionConstraints=obey" in trtexec_argv(job("fp16", fp32_layers=("x",)), "8.4.0")
    with pytest.raises(TritonizeError, match=r"^TensorRT 8.3 cannot pin the 2 FP32 layers of the mixed-precision graph "
                                             r"\(needs 8.4\+ --precisionConstraints\); target a newer Triton release$"):
        trtexec_argv(job("fp16", fp32_layers=("node_conv7", "node_add9")), "8.3.1")
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


@pytest.mark.parametrize("version,message", [
    *[(v, f"^TensorRT {v} is not supported \\(supported majors: 8, 10, 11; Triton containers ship 8, 10 or 11\\)$")
      for v in ("7.2.3", "9.3.0", "12.0.0")],
    ("ten", r"^cannot read TensorRT version 'ten'; expected MAJOR.MINOR\[.PATCH\]$"),
])
def test_unsupported_versions(version, message):
    with pytest.raises(TritonizeError, match=message):
        trtexec_argv(job(), version)


@pytest.mark.parametrize("banner,version", [
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] # trtexec --help", "10.5.0.18"),  # 10.4+: build number
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec", "10.3.0"),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec", "8.6.1"),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v8001] # trtexec", "8.0.1"),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v110100] [b106] # trtexec", "11.1.0.106"),
    ("no banner here", None),
])
def test_banner_version(banner, version):
    assert parse_banner_version(banner) == version


# Real trtexecs' banner lines, each quoted from a log (tests/data/nvidia_facts/trtexec_banners.txt; README.md there
# names each line's source),
# in file order, and the TensorRT each names.
RECORDED_BANNERS = ["8.6.1.6", "8.6.1.6", "10.0.1.6", "10.2.0.19", "10.6.0.26", "10.8.0.43", "10.16.0.72", "11.0.0.114"]


def test_banners_as_real_trtexecs_print_them(standin_trtexec, tmp_path):
    """Build 4 of issue 34: the banner reader on the lines real trtexecs of 8.6, 10.x and 11.x printed (with the build
    number from 10.4 on), and the trtexec stand-in prints the same banner for each of those versions."""
    from tests.nvidia_engines import FACTS

    lines = (FACTS / "trtexec_banners.txt").read_text().splitlines()
    assert len(lines) == len(RECORDED_BANNERS)
    for line, full in zip(lines, RECORDED_BANNERS):
        printed = full if tuple(int(p) for p in full.split(".")[:2]) >= (10, 4) else ".".join(full.split(".")[:3])
        assert parse_banner_version(line) == printed, line
        done = subprocess.run([str(standin_trtexec), "--help"], env={**os.environ, "STANDIN_TRT_VERSION": full},
                              cwd=tmp_path, capture_output=True, text=True, timeout=30)
        tag = line.split("TensorRT.trtexec ", 1)[1].split(" #", 1)[0]
        assert done.stdout.splitlines()[0].startswith(f"&&&& RUNNING TensorRT.trtexec {tag} # trtexec"), done.stdout[:200]


def test_probe_gives_up_on_a_binary_that_hangs(tmp_path):
    hangs = tmp_path / "trtexec"
    hangs.write_text("#!/bin/sh\necho '[TensorRT v100500]'; exec sleep 30\n")
    hangs.chmod(0o755)
    assert probe_trtexec(str(hangs), timeout_s=0.5) is None
    assert probe_trtexec(str(tmp_path / "missing")) is None


def test_probe_asks_for_help_only(tmp_path):
    """--help: the one invocation that prints the banner and builds nothing."""
    picky = tmp_path / "trtexec"
    picky.write_text("#!/bin/sh\n[ \"$*\" = --help ] && echo '[TensorRT v8601]'\n")
    picky.chmod(0o755)
    assert probe_trtexec(str(picky)) == "8.6.1"


@pytest.mark.parametrize("version,banner", VERSIONS.items())
def test_every_version_accepts_its_argv_and_reads_the_workspace_as_asked(version, banner, standin_trtexec, tmp_path):
    """The argv for each precision (with FP32 islands and compatibility flags) goes through the trtexec
    stand-in of that version: no option it lacks, and the workspace limit it reads is the one asked for
    (10.0.x read `workspace:4096M` as 4 PiB)."""
    (tmp_path / "model_fp16.onnx").write_bytes(b"")
    env = {**os.environ, "STANDIN_TRT_VERSION": version}
    for precision in ("fp32", "fp16", "int8"):
        argv = trtexec_argv(job(precision, fp32_layers=("node_conv7",), version_compatible=True,
                                hardware_compatibility="ampere+"), version, executable=str(standin_trtexec))
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{version} {precision}: {done.stdout}"
        assert "stand-in workspace limit: 4096 MiB" in done.stdout
        assert parse_banner_version(done.stdout) == banner
