"""`tritonize serve`: the real command, its errors, and the docker engine's command."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tritonize.serve.process import choose_ports


@pytest.fixture(scope="module")
def onnx_repo(small_artifacts, tmp_path_factory) -> Path:
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("cli") / "models"
    build_repository(small_artifacts, repo,
                            RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    return repo


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                found.append(entry.name)
        except OSError:
            continue
    return found


def test_serve_until_sigterm(onnx_repo):
    """The command a user runs: prints the table and endpoints, serves, stops cleanly on SIGTERM."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    ports = choose_ports("127.0.0.1", None, None, None)
    command = [str(Path(sys.executable).parent / "tritonize"), "serve", str(onnx_repo), "--http-port", str(ports.http),
               "--grpc-port", str(ports.grpc), "--metrics-port", str(ports.metrics)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        table = []
        for line in process.stdout:  # the table comes once the server is ready
            table.append(line.rstrip())
            if line.startswith("log "):
                break
        assert table[0].split() == ["MODEL", "STATE", "REASON"]
        assert table[1].split() == ["onnx_model", "READY"]
        assert f"gRPC     127.0.0.1:{ports.grpc}" in table
        assert f"metrics  http://127.0.0.1:{ports.metrics}/metrics" in table
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}") as client:
            x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
            x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
            assert client.infer("onnx_model", [x]).as_numpy("output").shape == (1, 1000)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        stderr = process.stderr.read()
        assert "engine: embedded" in stderr and "stopped" in stderr
    finally:
        if process.poll() is None:
            process.kill()
    assert _processes_mentioning(str(onnx_repo)) == []


def test_port_in_use(onnx_repo):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", onnx_repo, "--engine", "embedded", "--http-port", port)
    assert result.exit_code != 0
    assert f"port {port} on 127.0.0.1 is already in use" in result.output
    assert "Traceback" not in result.output


def test_missing_repository(tmp_path):
    result = run_cli("serve", tmp_path / "models")
    assert result.exit_code != 0
    assert "does not exist; build it with `tritonize repo build`" in result.output


def test_unknown_config_name(onnx_repo):
    result = run_cli("serve", onnx_repo, "--engine", "embedded", "--config-name", "a100")
    assert result.exit_code != 0
    assert "has configs/a100.pbtxt" in result.output


# ------------------------------------------------------------------ docker engine


def _expected_docker(repo: Path, release: str, load: str = "'--load-model=*'") -> str:
    return (f"docker run --gpus all --rm --ipc=host -p 127.0.0.1:8000:8000 -p 127.0.0.1:8001:8001 "
            f"-p 127.0.0.1:8002:8002 -v {shlex.quote(str(repo.resolve()))}:/models "
            f"nvcr.io/nvidia/tritonserver:{release}-py3 tritonserver --model-repository=/models "
            f"--model-control-mode=explicit {load}"
            + (" --allow-client-shm=true" if release >= "26.04" else ""))


def _repo_with_plan(onnx_repo: Path, artifacts: Path, dest: Path, tensorrt_version: str) -> Path:
    """onnx_repo plus a trt_model whose config carries the plan's provenance (as `repo build` stamps it)."""
    from tests.repository_builder.helpers import add_trt_model, copy_repo

    repo = copy_repo(onnx_repo, dest)
    add_trt_model(repo, artifacts, tensorrt_version=tensorrt_version)
    return repo


def test_print_command_follows_the_plans_tensorrt(onnx_repo, artifacts_copy, tmp_path):
    from tritonize.releases import load_releases, tensorrt_matches

    known = [r for r in load_releases() if r.tensorrt]
    built_with = known[0].tensorrt  # the oldest release whose TensorRT the table knows
    repo = _repo_with_plan(onnx_repo, artifacts_copy, tmp_path / "models", built_with)
    expected = [r.release for r in known if tensorrt_matches(built_with, r.tensorrt)][-1]
    result = run_cli("serve", repo, "--engine", "docker", "--print-command", "--open-control-apis")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == _expected_docker(repo, expected)
    assert f"plan's TensorRT {built_with}" in result.stderr


def test_print_command_without_plan_uses_newest_release(onnx_repo):
    from tritonize.releases import latest_release

    result = run_cli("serve", onnx_repo, "--print-command", "--open-control-apis")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == _expected_docker(onnx_repo, latest_release().release)


def test_print_command_with_release_and_config_name(onnx_repo):
    result = run_cli("serve", onnx_repo, "--print-command", "--triton-release", "24.10", "--config-name", "gpu", "--open-control-apis")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == _expected_docker(onnx_repo, "24.10") + " --model-config-name=gpu"


def test_print_command_loads_only_the_models_given(onnx_repo):
    result = run_cli("serve", onnx_repo, "--print-command", "--triton-release", "24.10", "--models", "onnx_model", "--open-control-apis")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == _expected_docker(onnx_repo, "24.10", "--load-model=onnx_model")


def test_triton_release_that_cannot_load_the_plan_is_refused(onnx_repo, artifacts_copy, tmp_path):
    from tritonize.releases import load_releases

    known = [r for r in load_releases() if r.tensorrt]
    newest, oldest = known[-1], known[0]
    if newest.tensorrt == oldest.tensorrt:
        pytest.skip("the release table has a single TensorRT version")
    repo = _repo_with_plan(onnx_repo, artifacts_copy, tmp_path / "models", oldest.tensorrt)
    result = run_cli("serve", repo, "--engine", "docker", "--print-command", "--triton-release", newest.release)
    assert result.exit_code != 0
    assert f"built with TensorRT {oldest.tensorrt} and will not load there" in result.output


def test_docker_engine_without_docker_gpu_engine_is_a_clear_error(onnx_repo):
    from tritonize.machine import docker_gpu_problem

    if docker_gpu_problem() is None:
        pytest.skip("a Docker engine with the NVIDIA runtime is present: the docker engine would run")
    result = run_cli("serve", onnx_repo, "--engine", "docker")
    assert result.exit_code != 0
    assert "the docker engine cannot run here" in result.output and "--print-command" in result.output


def test_docker_installs_what_the_preprocessing_models_need(small_repo, tmp_path):
    """The NGC container lacks Pillow: the command pip-installs the models' requirements, then runs tritonserver."""
    import os
    import subprocess

    from tritonize.serve.docker import docker_command

    result = run_cli("serve", small_repo, "--print-command", "--triton-release", "24.10", "--open-control-apis")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == _expected_docker(small_repo, "24.10").replace(
        " tritonserver --model-repository=/models",
        " sh -c 'pip install --no-cache-dir --quiet -r /models/preprocess/requirements.txt && exec \"$@\"' sh "
        "tritonserver --model-repository=/models")
    # What the container's shell does with it, with stand-ins: `pip` reads each -r file as pip does, and
    # `tritonserver` says how it was started.
    command = docker_command(small_repo, "24.10")
    shell = command[command.index("sh"):]
    shell[2] = shell[2].replace("/models/", f"{small_repo}/")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pip").write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -r ] && { cat "$2" || exit 1; shift; }; shift; done\n')
    (bin_dir / "tritonserver").write_text('#!/bin/sh\necho tritonserver "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    ran = subprocess.run(shell, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (
        0, "pillow>=10\ntritonserver --model-repository=/models --model-control-mode=explicit --load-model=*\n"), ran.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_print_command_restricts_the_control_apis_to_the_key_in_the_environment(small_repo, standins, monkeypatch, host):
    """On loopback too: a model load can carry code (docs/serving-other-machines.md)."""
    result = run_cli("serve", small_repo, "--print-command", "--host", host, "--triton-release", "24.10")
    assert result.exit_code == 0, result.output
    assert ("the container restricts model-repository, statistics, trace, logging, shared-memory to the key in "
            "$TRITONIZE_CONTROL_KEY") in result.stderr
    command = shlex.split(result.stdout)
    assert command[command.index("-e") + 1] == "TRITONIZE_CONTROL_KEY"
    # Through the docker stand-in: the container's shell checks the key, pip reads the requirements through the
    # mount, and tritonserver gets the restriction options in the form it parses.
    monkeypatch.setenv("TRITONIZE_CONTROL_KEY", "a-key-set-by-the-user")
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "stand-in pip: would install from /models/preprocess/requirements.txt" in ran.stdout

    opened = run_cli("serve", small_repo, "--print-command", "--host", host, "--open-control-apis")
    assert opened.exit_code == 0 and "-e TRITONIZE_CONTROL_KEY" not in opened.stdout
    who = "anyone on this machine" if host == "127.0.0.1" else "anyone who reaches 0.0.0.0"
    assert f"warning: --open-control-apis: {who} can unload and load models (with files that the server runs" in opened.stderr


# ------------------------------------------------------------------ killed processes


def test_killed_serve_leaves_no_server_behind_and_the_next_start_removes_its_files(onnx_repo, tmp_path):
    """kill -9 of `tritonize serve`: its tritonserver ends within seconds (not the default 30 s exit
    timeout), and the next start removes the temporary directory it could not remove, but neither
    the directory of a server whose owner lives nor one that names no owner."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from tests.serve.helpers import Serve, group_alive
    from tritonize.serve.embedded import embedded_server
    from tritonize.serve.process import WORKDIR_PREFIX, make_workdir
    from tritonize.serve.supervisor import stub_processes

    ownerless = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))  # e.g. an older tritonize's
    live = make_workdir()  # owned by this process, which lives
    try:
        with Serve(onnx_repo) as serve:
            # A stub killed under traffic: its model instance then never finishes unloading.
            os.kill(stub_processes(serve.server_pid)["onnx_model_0_0"], signal.SIGKILL)
            with contextlib.suppress(InferenceServerException), grpcclient.InferenceServerClient(serve.grpc_url) as client:
                x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
                x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
                client.infer("onnx_model", [x])
            serve.process.kill()
            killed = time.monotonic()
            serve.process.wait()
            while group_alive(serve.server_pid) and time.monotonic() - killed < 40:
                time.sleep(0.1)
            assert time.monotonic() - killed < 15, "tritonserver outlived tritonize serve"
            # (That the killed process could not remove its workdir is not checked: on a shared machine,
            # another session's server start may remove it first.)
            with embedded_server(onnx_repo):
                assert not serve.workdir.exists()
        assert live.is_dir() and ownerless.is_dir()
    finally:
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(ownerless, ignore_errors=True)


def test_the_next_start_removes_the_shared_memory_of_servers_that_are_gone(onnx_repo):
    """`tritonize serve`, its tritonserver and the stubs all killed at once (the OOM killer, `kill -9
    -- -PGID`): nothing could remove the stubs' shared-memory regions. The next start removes them, and
    the regions Triton named itself that no process uses, but neither the regions of a live server nor a
    region that a process holds open."""
    from tests.serve.helpers import Serve, group_alive, stub_regions
    from tritonize.serve.embedded import embedded_server

    shm = Path("/dev/shm")
    unused, held = (shm / f"triton_test_backend_shm_region_{os.getpid()}_{what}" for what in ("unused", "held"))
    try:
        with embedded_server(onnx_repo) as live:
            live_regions = [shm / r for r in stub_regions(live.pid).values()]
            with Serve(onnx_repo) as serve:
                killed = [shm / r for r in stub_regions(serve.server_pid).values()]
                serve.process.kill()
                os.killpg(serve.server_pid, signal.SIGKILL)
                while group_alive(serve.server_pid):
                    time.sleep(0.05)
            assert killed and all(r.exists() for r in killed) and live_regions
            unused.write_bytes(bytes(4096))
            with open(held, "wb"), embedded_server(onnx_repo):
                assert not [r for r in killed if r.exists()]
                assert not unused.exists() and held.exists()
                assert all(r.exists() for r in live_regions)
    finally:
        unused.unlink(missing_ok=True)
        held.unlink(missing_ok=True)


def test_tritonservers_own_ports_are_never_the_fronts(monkeypatch):
    """The embedded engine picks tritonserver's ports after the front's, which are free until the front listens: the
    kernel may hand one out again (seen in a run of two test workers). The front then passed every request to itself,
    one connection more each time, until `Too many open files`. A port to avoid is held and another one picked."""
    import tritonize.serve.process as process

    handed_out = iter([41000, 41005, 41001, 41006, 41007])  # the kernel's picks, two of them the front's

    class Socket:
        def __init__(self, port):
            self.port = port

        def getsockname(self):
            return ("127.0.0.1", self.port)

        def close(self):
            pass

    monkeypatch.setattr(process, "_bind", lambda host, port: Socket(next(handed_out) if port == 0 else port))
    inner = process.choose_ports("127.0.0.1", None, None, None, avoid=frozenset({41000, 41001, 41002}))
    assert vars(inner) == {"http": 41005, "grpc": 41006, "metrics": 41007}
