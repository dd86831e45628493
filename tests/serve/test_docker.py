"""The docker engine's release choice and `docker run` command, run through the docker STAND-IN
(tests/standins/docker.py), whose tritonserver accepts only the options its release has."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

import pytest

from tests.repository_builder.helpers import add_trt_model, copy_repo
from tests.serve.helpers import make_certificates
from tritonize.access import KEY_ENV, ServerTLS
from tritonize.errors import TritonizeError
from tritonize.serve.docker import TLS_CERT, TLS_KEY, choose_release, docker_command


@pytest.fixture(scope="module")
def onnx_repo(small_artifacts, tmp_path_factory) -> Path:
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("docker") / "models"
    # No ensembles: the docker stand-in runs only `tritonserver` in the image, not the `sh -c` that installs
    # the preprocess model's requirements first (tests/serve/test_cli.py runs that part).
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False,
                                                        ensembles=False))
    return repo


def plan_repo(onnx_repo, artifacts, tmp_path, **plan) -> Path:
    repo = copy_repo(onnx_repo, tmp_path / "models")
    add_trt_model(repo, artifacts, **plan)
    return repo


def test_plan_for_a_release_whose_tensorrt_the_table_does_not_know(onnx_repo, artifacts_copy, tmp_path):
    """The container builder built it in 25.03's image; the table knows no TensorRT for 25.03."""
    repo = plan_repo(onnx_repo, artifacts_copy, tmp_path, tensorrt_version="10.9.0.34", triton_release="25.03")
    choice = choose_release(None, repo)
    assert choice.release == "25.03" and "warning" in choice.why and "10.9.0.34" in choice.why


def test_plan_for_a_known_release_with_another_tensorrt_is_refused(onnx_repo, artifacts_copy, tmp_path):
    repo = plan_repo(onnx_repo, artifacts_copy, tmp_path, tensorrt_version="10.9.0.34", triton_release="24.10")
    with pytest.raises(TritonizeError, match="no known Triton release runs TensorRT 10.9.0.34"):
        choose_release(None, repo)


def test_version_compatible_plan(onnx_repo, artifacts_copy, tmp_path, standins):
    repo = plan_repo(onnx_repo, artifacts_copy, tmp_path, tensorrt_version="10.3.0.26", triton_release="24.08",
                     version_compatible=True)
    assert choose_release(None, repo).release == "24.08"
    assert choose_release("25.01", repo).release == "25.01"  # a later runtime loads it
    command = docker_command(repo, "25.01")
    assert "--backend-config=tensorrt,version-compatible=true" in command
    assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0


def test_plain_plan_gets_no_host_code_trust(onnx_repo, artifacts_copy, tmp_path):
    repo = plan_repo(onnx_repo, artifacts_copy, tmp_path, tensorrt_version="10.5.0.18", triton_release="24.10")
    assert not any(a.startswith("--backend-config") for a in docker_command(repo, "24.10"))
    with pytest.raises(TritonizeError, match="will not load there"):
        choose_release("25.01", repo)


@pytest.mark.parametrize("release,config_name", [("24.04", None), ("24.05", "gpu"), ("26.03", "gpu"), ("26.04", "gpu"),
                                                 ("26.08", None)])
def test_every_release_accepts_its_command(onnx_repo, standins, release, config_name):
    command = docker_command(onnx_repo, release, model_config_name=config_name)
    assert "--ipc=host" in command  # client shared memory lives in the host's /dev/shm
    assert ("--allow-client-shm=true" in command) == (release >= "26.04")  # off by default from 26.04
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_model_config_name_before_24_05_is_refused(onnx_repo):
    with pytest.raises(TritonizeError, match="Triton 24.04 has no --model-config-name"):
        docker_command(onnx_repo, "24.04", model_config_name="gpu")


def test_shared_memory_only_for_a_loopback_server(onnx_repo):
    assert "--allow-client-shm=true" not in docker_command(onnx_repo, "26.08", host="0.0.0.0")


KEY = "a-control-key-of-some-length"


@pytest.fixture
def tls(tmp_path) -> ServerTLS:
    files = make_certificates(tmp_path / "tls")
    return ServerTLS(files / "server.pem", files / "server.key")


@pytest.mark.parametrize("release", ["23.11", "24.10", "26.08"])
def test_off_loopback_the_container_takes_the_key_from_dockers_environment(onnx_repo, standins, tls, monkeypatch,
                                                                            release):
    command = docker_command(onnx_repo, release, host="0.0.0.0", restricted=True, tls=tls)
    assert command[command.index("-e") + 1] == KEY_ENV  # no value: docker passes its own, off its command line
    assert f"{tls.cert}:{TLS_CERT}:ro" in command and f"{tls.key}:{TLS_KEY}:ro" in command
    monkeypatch.delenv(KEY_ENV, raising=False)
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and f"{KEY_ENV}: must hold the control key" in refused.stderr
    monkeypatch.setenv(KEY_ENV, KEY)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The stand-in's tritonserver checks the certificate files are in the container: without the mounts they are not.
    unmounted = docker_command(onnx_repo, release, host="0.0.0.0", restricted=True) + tls.flags(TLS_CERT, TLS_KEY)
    missing = subprocess.run(unmounted, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and f"--grpc-server-cert {TLS_CERT} is not in the container" in missing.stderr


def test_a_release_that_cannot_restrict_http_is_refused_off_loopback(onnx_repo):
    with pytest.raises(TritonizeError, match="Triton 23.10 cannot restrict its HTTP API"):
        docker_command(onnx_repo, "23.10", host="0.0.0.0", restricted=True)


# ------------------------------------------------------------------ supervision (the stand-in serving for real)


@pytest.fixture(scope="module")
def ensemble_repo(small_artifacts, tmp_path_factory) -> Path:
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("docker-ensembles") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False))
    return repo


def test_the_docker_engine_heals_a_crashed_stub_like_the_embedded_one(ensemble_repo, standins, monkeypatch, capfd):
    """The container's tritonserver serves (the stand-in runs the real one): the supervisor finds it through
    `docker inspect`, reloads the preprocess model (a Python backend model in the NGC image too) when its stub
    is killed, and the stop leaves neither a process nor a shared-memory region of the container."""
    import json
    import os
    import signal
    import urllib.request

    from tests.client.conftest import PHOTO
    from tests.serve.helpers import group_alive, stub_regions
    from tritonize.serve.docker import DockerServer
    from tritonize.serve.supervisor import stub_processes

    def classify(url: str) -> dict:
        image = base64.b64encode(PHOTO.read_bytes()).decode()
        body = json.dumps({"inputs": [{"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES", "data": [image]}]})
        request = urllib.request.Request(f"{url}/v2/models/onnx_classifier/infer", data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    server = DockerServer(ensemble_repo, "24.10", model_config_name="cpu", ready_timeout=120)
    with server as info:
        pid = server.supervisor.server_pid
        assert pid is not None and info.models["onnx_classifier"] == ("READY", "")
        regions = [Path("/dev/shm") / r for r in stub_regions(pid).values()]
        assert regions and all(r.name.startswith(server.region_prefix) and r.exists() for r in regions)
        expected = classify(info.http_url)["outputs"][0]["data"]
        stub = stub_processes(pid)["preprocess_0_0"]
        os.kill(stub, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while f"preprocess: stub preprocess_0_0 (pid {stub}) died (killed by SIGKILL); reloaded in " not in capfd.readouterr().err:
            assert time.monotonic() < deadline, "preprocess was not reloaded"
            time.sleep(0.1)
        assert classify(info.http_url)["outputs"][0]["data"] == expected
    assert not group_alive(pid) and not [r for r in regions if r.exists()]


def test_a_dead_container_is_replaced_with_the_models_as_they_were(ensemble_repo, standins, monkeypatch, capfd):
    """`tritonize serve --engine docker` heals the server the way the embedded engine does (ServerHandle.heal): the
    container's tritonserver killed, `docker run` returns, and a container of a new name serves the same models."""
    import os
    import signal

    import tritonclient.grpc as grpcclient

    from tritonize.serve.docker import DockerServer

    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    server = DockerServer(ensemble_repo, "24.10", model_config_name="cpu", ready_timeout=120)
    with server as info:
        first, pid = server.name, server.supervisor.server_pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (code := server.server.exit_code()) is None:
            assert time.monotonic() < deadline, "docker run did not end with its container"
            time.sleep(0.1)
        server.heal(code)
        assert server.name == f"{first}-2" and server.restarts == 1
        assert "--load-model" not in " ".join(server.server.command)  # the models come from what was served
        assert server.supervisor.server_pid not in (None, pid)
        with grpcclient.InferenceServerClient(info.grpc_url) as client:
            index = client.get_model_repository_index(as_json=True)["models"]
        assert {m["name"] for m in index if m.get("state") == "READY"} == set(info.ready_models)
    assert "tritonserver serves again, " in capfd.readouterr().err
