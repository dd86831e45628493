"""What each builder refuses before it runs (the torch-tensorrt frontend's limits)."""

from __future__ import annotations

import pytest

from tests.convert import build_job
from tritonize.convert.torch_trt import torchscript_frontend_refuses
from tritonize.convert.trtexec import BuildJob


def job(**kw) -> BuildJob:
    base = dict(onnx_file="model.onnx", plan_file="model.plan", input_name="input", output_name="output",
                input_shape=(3, 224, 224), profile={"min": 1, "opt": 16, "max": 32}, precision="fp32",
                workspace_mib=4096, timing_cache="timing.cache")
    return build_job(**{**base, **kw})


@pytest.mark.parametrize("change,version,refused", [
    ({}, "10.8.0.43", None),
    ({"precision": "fp16"}, "10.8.0.43", None),  # 2.12 and older set kFP16 on TensorRT 10
    ({"precision": "fp16"}, "11.0.0.114", "FP16 on TensorRT 11.0.0.114 (it would build FP32)"),
    ({"precision": "int8"}, "10.8.0.43", "INT8"),
    ({"opt_level": 5}, "10.8.0.43", "--opt-level"),
    ({"version_compatible": True}, "11.0.0.114", "--version-compatible"),
    ({"hardware_compatibility": "ampere+"}, "10.8.0.43", "--hardware-compatibility"),
    # N13: it compiles the TorchScript, not the mixed-precision ONNX: the FP32 islands would run in FP16
    ({"precision": "fp16", "fp32_layers": ("node_conv1", "node_add3")}, "10.8.0.43",
     "the 2 FP32 nodes of the mixed-precision graph"),
])
def test_torch_tensorrt_refuses_what_its_torchscript_frontend_cannot_honour(change, version, refused):
    reason = torchscript_frontend_refuses(job(**change), version)
    if refused is None:
        assert reason is None
    else:
        assert refused in reason and "use --builder trtexec, tensorrt or container" in reason


def test_a_builder_asked_for_that_cannot_honour_the_job_is_an_error(standin_trtexec):
    from tritonize.convert.builders import TrtexecBuilder, pick_builders
    from tritonize.errors import TritonizeError

    class Limited(TrtexecBuilder):  # a builder that runs here but cannot honour INT8
        def refuses(self, job):
            return "cannot honour INT8" if job.precision == "int8" else None

    builders = {"trtexec": Limited(str(standin_trtexec))}
    with pytest.raises(TritonizeError, match="--builder trtexec: cannot honour INT8"):
        pick_builders("trtexec", builders, job(precision="int8"))
    assert pick_builders("auto", builders, job(precision="int8")) == ([], "trtexec: cannot honour INT8")
    assert pick_builders("auto", builders, job())[0] == [builders["trtexec"]]


def test_trtexec_is_looked_up_on_the_images_path_first(tmp_path):
    """The image's PATH first, then /usr/src/tensorrt/bin/trtexec (N16: that path only), in the container
    builder's command and in convert.sh's container and local modes."""
    import subprocess

    from tritonize.convert.builders import IMAGE_TRTEXEC, TRTEXEC_FALLBACK, container_argv

    argv = container_argv("nvcr.io/nvidia/tensorrt:24.10-py3", None, ["--help"])
    assert argv[-5:] == ["sh", "-c", IMAGE_TRTEXEC, "sh", "--help"] and TRTEXEC_FALLBACK in IMAGE_TRTEXEC
    fake = tmp_path / "bin" / "trtexec"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "trtexec on PATH got $*"\n')
    fake.chmod(0o755)
    found = subprocess.run(["sh", "-c", IMAGE_TRTEXEC, "sh", "--help"], capture_output=True, text=True,
                           env={"PATH": f"{fake.parent}:/usr/bin:/bin"})
    assert found.stdout.strip() == "trtexec on PATH got --help"
    missing = subprocess.run(["sh", "-c", IMAGE_TRTEXEC, "sh", "--help"], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 127  # what ContainerBuilder.probe reads as "no trtexec in the image"


def test_every_builder_reads_the_one_table_of_what_each_setting_needs(monkeypatch):
    """Build 7 of issue 41: the TensorRT each setting needs is stated once (plan_settings.py NEEDS), and every
    builder refuses by it; the gate was written once per builder (trtexec_argv's `wants_86`, plan_from_onnx's
    `modern`). A setting that needed a newer TensorRT than any (made so here) is refused by all four alike."""
    from tritonize.convert.builders import ContainerBuilder, TensorRTApiBuilder, TrtexecBuilder
    from tritonize.convert.torch_trt import TorchTensorRTBuilder
    from tritonize.convert.trtexec import trtexec_argv
    from tritonize.errors import TritonizeError
    from tritonize.plan_settings import NEEDS, Setting
    from tritonize.releases import release_info

    monkeypatch.setitem(NEEDS, "workspace_mib", Setting("--workspace", (99, 0)))
    asked = job(workspace_mib=2048)
    refusal = "--workspace needs TensorRT 99.0 or newer, the build has 10.8.0.43"
    trtexec = TrtexecBuilder.__new__(TrtexecBuilder)
    trtexec.executable, trtexec._version = "trtexec", "10.8.0.43"
    torch_trt = TorchTensorRTBuilder(manifest=None)
    monkeypatch.setattr(torch_trt, "_other_torch", lambda: None)
    for builder in (trtexec, ContainerBuilder(release_info("25.01")), TensorRTApiBuilder(), torch_trt):
        monkeypatch.setattr(builder, "tensorrt_version", lambda: "10.8.0.43")
        assert builder.refuses(asked) == refusal, builder.name
    with pytest.raises(TritonizeError, match="^--workspace needs TensorRT 99.0 or newer"):
        trtexec_argv(asked, "10.8.0.43")
