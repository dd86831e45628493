"""The container builder and convert.sh's container mode against the docker and trtexec STAND-INS
(tests/standins/): they enforce Docker's documented contract (absolute existing mount sources, the
image's own entrypoint, --init and a name to kill, GPU flags) and the options of the TensorRT version
each image has, and write where the mounts say. Nothing here is a TensorRT build."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.convert import build_job
from tritonize.convert.builders import LOG_NAME, ContainerBuilder
from tritonize.convert.trtexec import BuildJob
from tritonize.errors import TritonizeError
from tritonize.machine import gpu_visible
from tritonize.releases import release_info


def job(**kw) -> BuildJob:
    base = dict(onnx_file="model.onnx", plan_file="model.plan", input_name="input", output_name="output",
                input_shape=(3, 224, 224), profile={"min": 1, "opt": 16, "max": 32}, precision="fp32",
                workspace_mib=1024, timing_cache="timing.cache")
    return build_job(**{**base, **kw})


@pytest.fixture
def artifacts(tmp_path, monkeypatch) -> Path:
    """A relative artifacts directory, as `--artifacts build` gives it, with an ONNX file to mount."""
    monkeypatch.chdir(tmp_path)
    Path("build").mkdir()
    Path("build/model.onnx").write_bytes(b"")
    return Path("build")


def _running(marker: str) -> list[str]:
    """Stand-in containers (trtexec stand-in processes) whose command line mentions `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and "standins/trtexec.py" in cmdline and marker in cmdline:
            found.append(entry.name)
    return found


@pytest.mark.parametrize("release,version", [("24.04", "8.6.3"), ("24.10", "10.5.0.18")])
def test_builds_in_the_release_image_from_a_relative_artifacts_dir(standins, artifacts, release, version):
    builder = ContainerBuilder(release_info(release))
    built = builder.build(job(), artifacts, 60)
    assert built.tensorrt_version == version  # 8.6 and 10.0-10.3 banners carry no build number
    assert (artifacts / "model.plan").read_bytes().startswith(b"STAND-IN BYTES")  # written through the mount
    command = (artifacts / LOG_NAME).read_text().splitlines()[0]
    assert f"-v {artifacts.resolve()}:/work" in command and "--init" in command and "--entrypoint" not in command
    assert ("--stronglyTyped" in command) == version.startswith("10")  # the image's own TensorRT decides the flags


def test_timing_cache_outside_the_artifacts_is_visible_in_the_container(standins, artifacts, tmp_path):
    cache = tmp_path / "shared caches" / "resnet.cache"
    ContainerBuilder(release_info("24.10")).build(job(timing_cache=str(cache)), artifacts, 60)
    assert cache.read_bytes().startswith(b"STAND-IN TIMING CACHE")


def test_a_build_that_times_out_leaves_no_container_running(standins, artifacts, monkeypatch):
    """The docker client's SIGTERM would not stop trtexec (PID 1 ignores it without --init); the
    builder ends the container with `docker kill <name>`."""
    monkeypatch.setenv("STANDIN_MODE", "hang")
    with pytest.raises(TritonizeError, match="timed out"):
        ContainerBuilder(release_info("24.10")).build(job(), artifacts, 2)
    assert _running(str(artifacts.resolve())) == [] and not (artifacts / "model.plan").exists()


def test_probe_reads_the_version_with_its_build_number(standins):
    builder = ContainerBuilder(release_info("24.10"))
    assert builder.probe() is None and builder.tensorrt_version() == "10.5.0.18"


def test_image_without_trtexec_names_the_tensorrt_container(standins, monkeypatch):
    monkeypatch.setenv("STANDIN_IMAGE_TRT", "{}")
    reason = ContainerBuilder(release_info("24.10")).probe()
    assert "nvcr.io/nvidia/tritonserver:24.10-py3 has no trtexec (on its PATH or at /usr/src/tensorrt/bin/trtexec)" in reason
    assert "nvcr.io/nvidia/tensorrt:24.10-py3" in reason and "10.5.0.18" in reason
    # 26.05 is built on the 26.04 stack (build.py upstream_container_version)
    assert "nvcr.io/nvidia/tensorrt:26.04-py3" in ContainerBuilder(release_info("26.05")).probe()
    with pytest.raises(TritonizeError, match="cannot build in the container: .* has no"):
        ContainerBuilder(release_info("24.10")).tensorrt_version()


def test_not_chosen_on_a_docker_host_without_gpu(standins, monkeypatch):
    """No runtime named nvidia is no reason by itself (the toolkit's hook, CDI and WSL2 give `--gpus all`
    without one, N12): a real `docker run --gpus all` decides."""
    builder = ContainerBuilder(release_info("24.10"))
    monkeypatch.setenv("STANDIN_DOCKER_RUNTIMES", json.dumps({"runc": {}}))
    monkeypatch.setenv("STANDIN_DOCKER_GPU", "0")  # the daemon cannot give the container a GPU
    assert "could not select device driver" in builder.why_not()
    assert "could not select device driver" in builder.probe()
    monkeypatch.setenv("STANDIN_DOCKER_GPU", "1")
    if not gpu_visible():
        assert builder.why_not() == "no NVIDIA GPU on this host (no /dev/nvidia*, no /dev/dxg)"


def test_auto_falls_through_and_records_every_failure(standins, artifacts_copy):
    """auto on a Docker host without a GPU: the container is skipped (it used to be chosen and to fail
    outside the recorded build), the trtexec stand-in builds, and the plan check, which runs the plan with
    the same trtexec, fails (without the emulated TensorRT the stand-in's plan is no plan): the manifest
    says so, and no plan is left."""
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--triton-release", "24.10")
    assert result.exit_code == 1 and "trtexec could not run the plan" in result.output
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and entry["builder"] == "trtexec" and "could not run the plan" in entry["error"]
    assert entry["tensorrt_version"] == "10.5.0.18"
    if not gpu_visible():
        assert "container: no NVIDIA GPU" in entry["builder_reason"]
    assert not (artifacts_copy / "model.plan").exists() and not list(artifacts_copy.glob(".check-*"))


@pytest.mark.parametrize("release", ["24.04", "24.10"])
def test_recorded_container_command_runs_in_the_target_image(standins, artifacts_copy, release):
    """The manifest's container argv is the target's form (8.6 has no --stronglyTyped)."""
    assert run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--dry-run",
                   "--triton-release", release).exit_code == 0
    argv = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]["container_argv"]
    done = subprocess.run(argv, cwd=artifacts_copy, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "STANDIN_MODE": "ok"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (artifacts_copy / ".model.plan.partial").read_bytes().startswith(b"STAND-IN BYTES")


def test_reproducer_container_mode(standins, artifacts_copy, tmp_path):
    cache = tmp_path / "caches" / "t.cache"
    assert run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--dry-run",
                   "--triton-release", "24.04", "--timing-cache", cache).exit_code == 0
    done = subprocess.run(["bash", str(artifacts_copy / "convert.sh"), "container"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (artifacts_copy / "model.plan").read_bytes().startswith(b"STAND-IN BYTES")
    assert cache.read_bytes().startswith(b"STAND-IN TIMING CACHE")
    assert "--noTF32" in (artifacts_copy / LOG_NAME).read_text()  # the 8.6 flags, from the image's banner


@pytest.mark.parametrize("change,refusal", [
    (lambda a: [x.replace(f"{Path.cwd()}/build:", "build:") for x in a], "Docker would mount an empty named volume"),
    (lambda a: [x.replace(f"{Path.cwd()}/build:", f"{Path.cwd()}/nowhere:") for x in a], "does not exist"),
    (lambda a: [x for x in a if x != "--init"], "pass --init"),
    (lambda a: a[:2] + ["--entrypoint", "/usr/src/tensorrt/bin/trtexec"] + a[2:], "bypasses the image's entrypoint"),
    (lambda a: [x for x in a if x not in ("--gpus", "all")], "pass --gpus all"),
])
def test_the_docker_stand_in_refuses_what_docker_would_get_wrong(standins, artifacts, change, refusal):
    """What the stand-in catches, shown on the builder's own command with one contract broken."""
    from tritonize.convert.builders import container_argv

    argv = container_argv(release_info("24.10").image, artifacts, ["--onnx=model.onnx", "--saveEngine=x.plan"])
    done = subprocess.run(change(argv), capture_output=True, text=True, timeout=30)
    assert done.returncode == 125 and refusal in done.stderr
