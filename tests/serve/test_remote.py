"""`tritonize serve --host 0.0.0.0` for other machines, through the real server (reached on 127.0.0.1):
the control APIs take only requests with the key serve generated, inference and the model config stay
open, gRPC is TLS with a certificate made here, and the supervisor heals a model with the key."""

from __future__ import annotations

import json
import os
import signal
import stat
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.client.conftest import PHOTO
from tests.conftest import error_line, run_cli
from tests.serve.helpers import Serve, children, make_certificates
from tritonize.access import GRPC_KEY_HEADER, KEY_ENV, KEY_HEADER
from tritonize.serve.supervisor import stub_processes


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Path:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def remote(small_artifacts, tmp_path_factory, tls):
    """The one server of the suite on every interface: onnx_model, gRPC over TLS."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("remote") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    with Serve(repo, "--tls-cert", str(tls / "server.pem"), "--tls-key", str(tls / "server.key"), host="0.0.0.0") as serve:
        yield serve


@pytest.fixture
def elsewhere(monkeypatch):
    """tritonize's commands as on another machine: no server directory of this user to find a key in."""
    import tritonize.access

    monkeypatch.setattr(tritonize.access, "local_key", lambda url: None)


def _client(serve: Serve, tls: Path, **kwargs):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(serve.grpc_url, ssl=True, root_certificates=str(tls / "ca.pem"), **kwargs)


def _http(serve: Serve, path: str, key: str | None = None, body: bytes | None = b"{}") -> int:
    request = urllib.request.Request(f"{serve.http_url}{path}", data=body, headers={KEY_HEADER: key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_key_is_in_a_file_only_the_user_reads_and_in_no_command_line_or_environment(remote):
    assert "  (TLS)" in next(line for line in remote.table if line.startswith("gRPC "))
    assert stat.S_IMODE(remote.key_file.stat().st_mode) == 0o600
    key = remote.key_file.read_text().strip()
    assert len(key) >= 32
    processes = [remote.process.pid, *children(remote.process.pid), *children(remote.server_pid)]
    assert remote.server_pid in processes
    holders = [(pid, name) for pid in processes for name in ("cmdline", "environ")
               if key.encode() in Path(f"/proc/{pid}/{name}").read_bytes()]
    assert holders == []  # the front checks the key: tritonserver runs without it (tests/serve/test_key_privacy.py)


def test_unload_without_the_key_is_refused_and_with_it_works(remote, tls, monkeypatch, elsewhere):
    from tritonclient.utils import InferenceServerException

    key = remote.key_file.read_text().strip()
    with _client(remote, tls) as client:
        for call in (lambda: client.unload_model("onnx_model"),
                     lambda: client.unload_model("onnx_model", headers={GRPC_KEY_HEADER: "not-the-key-but-long-enough"}),
                     lambda: client.get_model_repository_index(),
                     lambda: client.get_inference_statistics("onnx_model")):
            with pytest.raises(InferenceServerException, match=f"restricted, expecting header '{GRPC_KEY_HEADER}'"):
                call()
        assert client.is_model_ready("onnx_model")
    for path in ("/v2/repository/models/onnx_model/unload", "/v2/repository/index"):
        assert _http(remote, path) == 403
        assert _http(remote, path, key="not-the-key-but-long-enough") == 403
    assert _http(remote, "/v2/models/onnx_model/stats", body=None) == 403

    url = ["--url", remote.grpc_url, "--tls-ca", tls / "ca.pem"]
    line = error_line(run_cli("models", "unload", "onnx_model", *url))
    assert "restricts the repository index to holders of its control key" in line and "--control-key-file" in line
    unloaded = run_cli("models", "unload", "onnx_model", *url, "--control-key-file", remote.key_file)
    assert unloaded.exit_code == 0 and "unloaded onnx_model: UNAVAILABLE" in unloaded.output, unloaded.output
    monkeypatch.setenv(KEY_ENV, key)
    loaded = run_cli("models", "load", "onnx_model", *url)
    assert loaded.exit_code == 0 and "loaded onnx_model: READY" in loaded.output, loaded.output
    monkeypatch.setenv(KEY_ENV, "not-the-key-but-long-enough")
    assert "is not this server's" in error_line(run_cli("models", "list", *url))


def test_inference_metadata_config_and_health_need_no_key(remote, tls, tmp_path, elsewhere):
    with _client(remote, tls) as client:
        assert client.is_server_ready() and client.get_model_metadata("onnx_model").name == "onnx_model"
        assert client.get_model_config("onnx_model").config.max_batch_size > 0
    result = run_cli("client", "classify", PHOTO, "--url", remote.grpc_url, "--tls-ca", tls / "ca.pem", "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["predictions"][0]["top_k"]) == 5
    assert _http(remote, "/v2/health/ready", body=None) == 200
    # Statistics are restricted: `client perf` reads them with the key.
    perf = ["client", "perf", "--url", remote.grpc_url, "--tls-ca", tls / "ca.pem", "--concurrency", "1",
            "--requests", "4", "--warmup-requests", "1", "--output-dir", tmp_path]
    assert "restricts its statistics to holders of its control key" in error_line(run_cli(*perf))
    measured = run_cli(*perf, "--control-key-file", remote.key_file, "--json")
    assert measured.exit_code == 0, measured.output


def test_grpc_is_tls_and_a_client_without_the_ca_is_refused(remote, tls):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    for client in (grpcclient.InferenceServerClient(remote.grpc_url),  # plaintext
                   grpcclient.InferenceServerClient(remote.grpc_url, ssl=True),  # the system's CAs
                   grpcclient.InferenceServerClient(remote.grpc_url, ssl=True, root_certificates=str(tls / "other_ca.pem"))):
        with client, pytest.raises(InferenceServerException):
            client.is_server_live(client_timeout=10)
    with _client(remote, tls) as client:
        x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
        x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
        assert client.infer("onnx_model", [x], client_timeout=60).as_numpy("output").shape == (1, 1000)
    assert "needs --tls-ca" in error_line(run_cli("client", "classify", PHOTO, "--url", remote.grpc_url))
    wrong = error_line(run_cli("client", "classify", PHOTO, "--url", remote.grpc_url, "--tls-ca", tls / "other_ca.pem"))
    assert "signed by the --tls-ca given" in wrong


def test_the_supervisor_reloads_a_killed_model_with_the_key(remote):
    stub = stub_processes(remote.server_pid)["onnx_model_0_0"]
    os.kill(stub, signal.SIGKILL)
    line = remote.expect("onnx_model: ")
    assert line.startswith(f"onnx_model: stub onnx_model_0_0 (pid {stub}) died (killed by SIGKILL); reloaded in "), line
