"""The control key reaches no other user of the machine (issue 43): another uid (`nobody`, through setpriv) reads
every /proc/*/cmdline and /proc/*/environ it can and every file under the serve work dir it can, and finds no key;
tritonserver's sockets are out of its reach, and the front refuses it the control APIs. The same scan as the serving
user finds the key (in its file), so a scan that reads nothing cannot pass. A model a key holder loads with files of
its own is listed by `tritonize models` and unloaded by it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from tests.conftest import run_cli
from tests.serve.helpers import Serve

NOBODY = 65534
# Run with the system's Python in isolated mode (no venv, no user site): nothing of the project's is needed to read.
SCAN = r"""
import json, os, socket, sys
workdir, sockets = sys.argv[1], sys.argv[2:]
read, seen = [], {"processes": 0, "files": 0}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for name in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                read.append(f.read())
            seen["processes"] += name == "cmdline"
        except OSError:
            pass
for directory, _, files in os.walk(workdir):
    for name in files:
        try:
            with open(os.path.join(directory, name), "rb") as f:
                read.append(f.read())
            seen["files"] += 1
        except OSError:
            pass
reached = []
for path in sockets:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        reached.append(path)
    except OSError:
        pass
    s.close()
sys.stdout.buffer.write(json.dumps({**seen, "reached": reached}).encode() + b"\n" + b"\n".join(read))
"""


def scan(workdir, sockets, as_nobody: bool) -> tuple[dict, bytes]:
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if as_nobody else []
    result = subprocess.run([*prefix, "/usr/bin/python3", "-I", "-c", SCAN, str(workdir), *map(str, sockets)],
                            capture_output=True, timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr
    summary, _, read = result.stdout.partition(b"\n")
    return json.loads(summary), read


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                                reason="needs root, setpriv and /usr/bin/python3 to scan as another uid")


def _no_key_for_nobody(workdir, sockets, key: bytes, http_url: str) -> None:
    seen, read = scan(workdir, sockets, as_nobody=True)
    assert seen["processes"] > 10 and b"tritonserver" in read  # it read other users' command lines
    assert key not in read and seen["reached"] == [], seen
    mine, read = scan(workdir, sockets, as_nobody=False)
    assert key in read and len(mine["reached"]) == len(sockets)  # the same scan as the serving user finds it
    request = urllib.request.Request(f"{http_url}/v2/repository/index", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403


def test_the_embedded_engines_key_reaches_no_other_user(small_repo):
    serve = Serve(small_repo)
    try:
        sockets = sorted((serve.workdir / "sockets").iterdir())
        assert [p.name for p in sockets] == ["grpc.sock:8001", "http.sock", "metrics.sock"]
        _no_key_for_nobody(serve.workdir, sockets, serve.key_file.read_text().strip().encode(), serve.http_url)
    finally:
        serve.stop()


def test_the_docker_engines_key_reaches_no_other_user(small_repo, standins, monkeypatch):
    from tritonize.access import ControlKey
    from tritonize.serve.docker import DockerServer

    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    key = ControlKey.generate()
    server = DockerServer(small_repo, "24.10", model_config_name="cpu", ready_timeout=120, control_key=key,
                          models=("onnx_model",))
    with server as info:
        assert "-e" not in server.server.command and not [a for a in server.server.command if a.startswith("-p")]
        sockets = sorted(server.upstream.directory.iterdir())
        assert len(sockets) == 3
        _no_key_for_nobody(server.workdir, sockets, key.value.encode(), info.http_url)


MODEL_PY = b"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", np.zeros(1, np.float32))]) for _ in requests]
"""


def test_a_model_a_key_holder_loads_with_its_own_files_is_listed_and_unloaded(small_server):
    import tritonclient.grpc as grpcclient

    config = json.dumps({"backend": "python", "max_batch_size": 0,
                         "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
                         "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]})
    key = small_server.control_key
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        client.load_model("visitor", config=config, files={"file:1/model.py": MODEL_PY},
                          headers=key.grpc_headers if key else None)
        assert client.is_model_ready("visitor")
    key = ["--control-key-file", str(key.file)] if key else []
    listed = run_cli("models", "list", "--url", small_server.grpc_url, "--json", *key)
    assert listed.exit_code == 0, listed.output
    visitor = [m for m in json.loads(listed.output) if m["name"] == "visitor"]
    assert visitor and visitor[0]["state"] == "READY" and "not in the repository" in visitor[0]["reason"], listed.output
    unloaded = run_cli("models", "unload", "visitor", "--url", small_server.grpc_url, *key)
    assert unloaded.exit_code == 0, unloaded.output
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        assert not client.is_model_ready("visitor")
