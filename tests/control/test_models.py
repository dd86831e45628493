"""`tritonize models list|load|unload|reload` and `serve --models`, against a real embedded server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli


def _copy_model(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest)
    for config in [dest / "config.pbtxt", *(dest / "configs").glob("*.pbtxt")]:
        config.write_text(config.read_text().replace(f'name: "{source.name}"', f'name: "{dest.name}"'))


@pytest.fixture(scope="module")
def repo(small_repo, tmp_path_factory) -> Path:
    """onnx_model, spare_model (the same network) and broken_model (its model.onnx is not ONNX)."""
    repo = tmp_path_factory.mktemp("control") / "models"
    repo.mkdir()
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")
    _copy_model(repo / "onnx_model", repo / "spare_model")
    _copy_model(repo / "onnx_model", repo / "broken_model")
    (repo / "broken_model" / "1" / "model.onnx").write_bytes(b"not an onnx graph")
    return repo


@pytest.fixture(scope="module")
def server(repo):
    """Started as `tritonize serve --models onnx_model` starts it: only onnx_model loaded. Not
    supervised: a test here brings a model whose instance died back by hand."""
    from tritonize.serve.embedded import EmbeddedServer

    with EmbeddedServer(repo, models=("onnx_model",), supervise=False) as info:
        yield info


def _models(server, *args):
    return run_cli("models", *args, "--url", server.grpc_url)


def _listed(server) -> dict[str, dict]:
    result = _models(server, "list", "--json")
    assert result.exit_code == 0, result.output
    return {m["name"]: m for m in json.loads(result.stdout)}


def _infer(server, model: str = "onnx_model") -> str:
    from tritonize.client.connection import Connection

    with Connection(server.grpc_url, timeout=60) as connection:
        try:
            connection.infer(connection.model(model), np.zeros((1, 3, 224, 224), np.float32))
            return "ok"
        except Exception as e:  # noqa: BLE001 - the test reads the error's words
            return str(e)


def test_serve_models_loads_only_those(server):
    listed = _listed(server)
    assert set(listed) == {"onnx_model", "spare_model", "broken_model"}
    assert listed["onnx_model"]["state"] == "READY" and listed["onnx_model"]["version"] == "1"
    for name in ("spare_model", "broken_model"):
        assert listed[name] == {"name": name, "version": "", "state": "UNAVAILABLE", "reason": "not loaded"}
    table = _models(server, "list")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "REASON"]
    assert [line.split()[:3] for line in lines if line.startswith("onnx_model")] == [["onnx_model", "1", "READY"]]


def test_load_and_unload(server):
    loaded = _models(server, "load", "spare_model")
    assert loaded.exit_code == 0, loaded.output
    assert loaded.stdout.strip() == "loaded spare_model: READY"
    assert _listed(server)["spare_model"]["state"] == "READY"
    assert _infer(server, "spare_model") == "ok"
    unloaded = _models(server, "unload", "spare_model")
    assert unloaded.exit_code == 0, unloaded.output
    assert unloaded.stdout.strip() == "unloaded spare_model: UNAVAILABLE (unloaded)"  # gone, not UNLOADING
    assert _listed(server)["spare_model"] == {"name": "spare_model", "version": "1", "state": "UNAVAILABLE",
                                              "reason": "unloaded"}


def test_a_model_that_fails_to_load_says_why(server):
    start = time.monotonic()
    result = _models(server, "load", "broken_model")
    assert result.exit_code == 1
    assert time.monotonic() - start < 30  # Triton's answer, not a timeout
    message = result.output.strip()
    assert message.startswith("error: load broken_model: load failed for model 'broken_model'"), message
    assert "protobuf" in message.lower() or "onnx" in message.lower(), message  # onnxruntime's own reason
    assert "\n" not in message and "Traceback" not in message and "At:" not in message
    assert _listed(server)["onnx_model"]["state"] == "READY"  # the others serve on


def test_unknown_model_names_the_ones_there(server):
    for action in ("load", "unload", "reload"):
        result = _models(server, action, "nope")
        assert result.exit_code == 1
        assert result.output.strip() == (f"error: model 'nope' is not in the repository at {server.grpc_url}; "
                                         "models there: broken_model, onnx_model, spare_model")


def _stub_pid(server, model: str) -> int:
    """The Python backend stub running `model`'s instance, in this server's process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in cmdline]
        if args[0].endswith("triton_python_backend_stub") and f"{model}_0_0" in args:
            if os.getpgid(int(entry.name)) == server.pid:  # the server leads its group
                return int(entry.name)
    raise AssertionError(f"no stub for {model} in the server's process group")


def test_reload_brings_back_a_model_whose_instance_died(server):
    os.kill(_stub_pid(server, "onnx_model"), signal.SIGKILL)  # as the OOM killer would
    time.sleep(0.5)
    assert "not healthy" in _infer(server)
    assert _models(server, "load", "onnx_model").exit_code == 0
    assert "not healthy" in _infer(server)  # Triton ignores a load of an unchanged, READY model
    reloaded = _models(server, "reload", "onnx_model")
    assert reloaded.exit_code == 0, reloaded.output
    assert reloaded.stdout.strip() == "reloaded onnx_model: READY"
    assert _infer(server) == "ok"


def test_unreachable_server_is_one_line():
    result = run_cli("models", "list", "--url", "127.0.0.1:1", "--timeout", "2")
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot reach a Triton server at 127.0.0.1:1")
    assert len(result.output.strip().splitlines()) == 1


def test_serve_refuses_models_the_repository_does_not_have(repo):
    result = run_cli("serve", repo, "--engine", "embedded", "--models", "onnx_model,nope")
    assert result.exit_code == 1
    assert f"--models: nope not in {repo}; it has broken_model, onnx_model, spare_model" in result.output
