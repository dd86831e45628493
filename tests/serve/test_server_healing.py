"""`tritonize serve` on loopback, as another local user and as bad luck would meet it: its control APIs want the key
(which tritonize's own commands find by themselves), and a tritonserver that dies is started again with the models
as the clients left them, until it keeps dying.

Each test runs the real `tritonize serve` (embedded engine) and kills the real tritonserver (kill -9, what the
OOM killer does).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.serve.helpers import Serve, children

MODELS = ("onnx_model", "onnx_tuned", "onnx_idle")


@pytest.fixture(scope="module")
def repo(small_artifacts, tmp_path_factory) -> Path:
    """Copies of the same ONNX model (quick to start): one to serve, one to tune, one to unload."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("healing") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    for name in MODELS[1:]:
        shutil.copytree(repo / "onnx_model", repo / name)
        for config in [repo / name / "config.pbtxt", *(repo / name / "configs").glob("*.pbtxt")]:
            config.write_text(config.read_text().replace('name: "onnx_model"', f'name: "{name}"'))
    return repo


def _server_pid(serve: Serve) -> int:
    return next(pid for pid, cmd in children(serve.process.pid).items() if "bin/tritonserver" in cmd)


def _infer(url: str, model: str = "onnx_model") -> None:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
        x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
        assert client.infer(model, [x], client_timeout=30).as_numpy("output").shape == (1, 1000)


def _first_answer_after(url: str, since: float, limit: float = 120.0) -> float:
    """Seconds from `since` to the first answered inference (a new connection each try: no gRPC back-off)."""
    while time.monotonic() - since < limit:
        try:
            _infer(url)
            return time.monotonic() - since
        except Exception:  # noqa: BLE001 - refused or failed while the server starts again
            time.sleep(0.05)
    raise AssertionError(f"no answer within {limit} s")


def test_another_local_process_cannot_load_code_without_the_key(repo, tmp_path):
    """A load whose files the server would run, sent on 127.0.0.1 by a process that does not hold the key."""
    code = f"open({str(tmp_path / 'ran')!r}, 'w').write('as the serving user')\n"
    with Serve(repo) as serve:
        request = {"parameters": {"config": json.dumps({"name": "onnx_idle", "backend": "python", "max_batch_size": 0,
                                                        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
                                                        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}),
                                  "file:1/model.py": base64.b64encode(code.encode()).decode()}}
        other = subprocess.run(
            [sys.executable, "-c", "import sys, urllib.request, urllib.error\n"
             "try:\n    urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=sys.argv[2].encode()), timeout=60)\n"
             "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())",
             f"{serve.http_url}/v2/repository/models/onnx_idle/load", json.dumps(request)],
            capture_output=True, text=True, timeout=120)
        assert other.stdout.startswith("403 ") and "restricted" in other.stdout, other
        assert not (tmp_path / "ran").exists()
        assert any(line.startswith("control ") and "need the key in" in line for line in serve.table), serve.table
        # tritonize's own commands, typed as before, find the key themselves.
        unloaded = run_cli("models", "unload", "onnx_idle", "--url", serve.grpc_url)
        assert unloaded.exit_code == 0 and "unloaded onnx_idle: UNAVAILABLE" in unloaded.output, unloaded.output
        listed = run_cli("models", "list", "--url", serve.grpc_url, "--json")
        assert listed.exit_code == 0 and "onnx_model" in listed.output, listed.output
        assert run_cli("client", "perf", "--url", serve.grpc_url, "--concurrency", "1", "--requests", "4",
                       "--warmup-requests", "1", "--output-dir", tmp_path / "perf", "--load-generator", "builtin").exit_code == 0
    opened = Serve(repo, "--open-control-apis")  # the old behaviour, asked for by name
    with opened:
        assert any("warning: --open-control-apis: anyone on this machine can" in line for line in opened.stderr)
        request = urllib.request.Request(f"{opened.http_url}/v2/repository/models/onnx_idle/unload", data=b"{}")
        assert urllib.request.urlopen(request, timeout=60).status == 200


def test_a_killed_tritonserver_serves_again_as_the_clients_left_it(repo, tmp_path):
    from tritonize.client.connection import Connection
    from tritonize.control.models import ModelControl

    with Serve(repo) as serve:
        with Connection(serve.grpc_url) as connection:  # as `tritonize tune` does: the key found by itself
            control = ModelControl(connection)
            control.unload("onnx_idle")
            tuned = connection.client.get_model_config("onnx_tuned", as_json=True)["config"]
            tuned["dynamic_batching"]["max_queue_delay_microseconds"] = "4321"
            control.load_config("onnx_tuned", json.dumps(tuned))
        time.sleep(1.5)  # the state is recorded every 0.5 s
        perf = subprocess.Popen(
            [str(Path(sys.executable).parent / "tritonize"), "client", "perf", "--url", serve.grpc_url, "--concurrency", "8",
             "--duration", "15", "--warmup-requests", "1", "--load-generator", "builtin", "--output-dir", str(tmp_path / "perf")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        serve.wait_answered("onnx_model", 50)  # past its 8 warm-up requests: in the level's window
        old = _server_pid(serve)
        killed = time.monotonic()
        os.kill(old, signal.SIGKILL)
        crash = serve.expect("tritonserver was killed by SIGKILL while serving; starting it again (crash 1 within 10 min")
        back = _first_answer_after(serve.grpc_url, killed)
        again = serve.expect("tritonserver serves again, ")
        out, err = perf.communicate(timeout=300)
        print(f"answered again {back:.2f} s after the kill; serve: {again}")
        assert "crash 4 ends tritonize serve" in crash and any(line.startswith("  | ") for line in serve.stderr), serve.stderr
        assert _server_pid(serve) != old

        level = json.loads((tmp_path / "perf" / "perf.json").read_text())["levels"][0]
        assert level["failures"] > 0 and level["requests"] > 0, (level, err)  # the level recorded both
        with Connection(serve.grpc_url) as connection:
            states = {m.name: (m.state, m.reason) for m in ModelControl(connection).index()}
            config = connection.client.get_model_config("onnx_tuned", as_json=True)["config"]
        assert states["onnx_model"] == states["onnx_tuned"] == ("READY", "")
        assert states["onnx_idle"] in (("UNAVAILABLE", "unloaded"), ("UNAVAILABLE", "not loaded"))  # the new server's word
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "4321"
        with urllib.request.urlopen(serve.metrics_url, timeout=30) as response:
            metrics = response.read().decode()
        assert "tritonize_server_restarts_total 1\n" in metrics and "nv_inference_request_success" in metrics


def _restoring(serve: Serve, old: int, limit: float = 120.0) -> int:
    """The new tritonserver serve started after `old` died, once it is loading the models back: a stub of it runs
    (started by a load, it holds the server's sockets: Triton's stubs inherit them) and a model is not loaded yet."""
    from tritonize.serve.supervisor import stub_processes

    log = serve.workdir / "tritonserver.log"
    deadline = time.monotonic() + limit
    while True:
        assert time.monotonic() < deadline, "the new server did not begin its restore"
        new = next((pid for pid, cmd in children(serve.process.pid).items() if "bin/tritonserver" in cmd), None)
        if new not in (None, old) and stub_processes(new):
            text = log.read_text(errors="replace")
            restore = text[text.rfind("Started GRPCInferenceService"):]
            if restore.count("successfully loaded") < len(MODELS):
                return new
        time.sleep(0.01)


def test_a_crash_during_the_restore_restarts_it_again(repo):
    """Two kill -9s: the second hits the new server while it loads the models back. On deb75ca the restore's loads
    waited out their 300 s (the dead server's stubs held its sockets), and serve then said it served again."""
    with Serve(repo) as serve:
        first = _server_pid(serve)
        os.kill(first, signal.SIGKILL)
        serve.expect("tritonserver was killed by SIGKILL while serving; starting it again (crash 1 ")
        second = _restoring(serve, first)
        os.kill(second, signal.SIGKILL)
        serve.expect("tritonserver was killed by SIGKILL while it loaded the models back; starting it again (crash 2 ",
                     timeout=60)
        line = serve.expect("tritonserver serves again, ", timeout=120)
        for model in MODELS[:2]:
            _infer(serve.grpc_url, model)  # at once: it says so once a request to a restored model succeeded
        assert _server_pid(serve) not in (first, second), line
        with urllib.request.urlopen(serve.metrics_url, timeout=30) as response:
            assert "tritonize_server_restarts_total 2\n" in response.read().decode()


def test_healing_removes_only_the_dead_servers_own_folders_beside_a_foreign_server(repo):
    """A server started beside (another user's, another session's) makes its own /tmp/python_env_XXXXXX while serve
    runs. serve's tritonserver killed: the heal removes the dead server's folder, not the foreign one's, which its
    server removes itself when it stops (as Triton's Python backend does at its finalize; it aborts when the folder is
    gone): that is how the test tells whose is whose on a machine where other servers come and go. An older tritonize's
    stop beside may take the foreign folder too (issue 43): the foreign server's abort shows it, and the test runs
    again."""
    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.leftovers import python_envs

    for _ in range(3):
        before = python_envs()
        with Serve(repo, "--models", "onnx_model") as serve:
            made_by_serve = python_envs() - before
            foreign = EmbeddedServer(repo, supervise=False, models=("onnx_idle",))
            try:
                started = python_envs()
                foreign.start()
                made_by_foreign = python_envs() - started
                os.kill(_server_pid(serve), signal.SIGKILL)
                serve.expect("tritonserver serves again, ", timeout=120)
                removed = made_by_serve - python_envs()
                kept = made_by_foreign & python_envs()
                process = foreign.server.process
            finally:
                foreign.stop()
        if process.returncode == 0 and removed:
            break
    assert process.returncode == 0, f"the foreign server's folder was gone before it stopped: it exited {process.returncode}"
    assert removed, "the dead server's folder is still there"
    assert kept - python_envs(), "the foreign server's folder was gone before it stopped"


def _stub(serve: Serve, instance: str, old: int | None = None) -> int:
    from tritonize.serve.supervisor import stub_processes

    deadline = time.monotonic() + 120
    while (pid := stub_processes(_server_pid(serve)).get(instance)) in (None, old):
        assert time.monotonic() < deadline, f"no new stub for {instance}"
        time.sleep(0.05)
    return pid


def _left_over(reason: str) -> list[Path]:
    """The /tmp/folderXXXXXX Triton wrote for a load whose model.py says `reason` (the supervisor's give-up)."""
    found = []
    for folder in Path("/tmp").glob("folder*"):
        try:
            if reason in (folder / "1" / "model.py").read_text(errors="replace"):
                found.append(folder)
        except OSError:
            continue
    return found


def test_serve_ends_when_tritonserver_keeps_dying(repo):
    """A model the supervisor gave up on stays given up in each new server, and no give-up leaves its files in
    /tmp; the crash after the back-offs ends serve."""
    from tritonize.serve.supervisor import RELOAD_DELAYS_S

    with Serve(repo) as serve:
        pid = None
        for _ in range(len(RELOAD_DELAYS_S) + 1):
            pid = _stub(serve, "onnx_idle_0_0", pid)
            os.kill(pid, signal.SIGKILL)
            line = serve.expect("onnx_idle: ")
        reason = line.removeprefix("onnx_idle: UNAVAILABLE: ")
        assert "crashed 4 times within 10 min" in reason and _left_over(reason) == []
        for crash in range(1, len(RELOAD_DELAYS_S) + 1):
            os.kill(_server_pid(serve), signal.SIGKILL)
            serve.expect(f"tritonserver was killed by SIGKILL while serving; starting it again (crash {crash} ")
            serve.expect("tritonserver serves again, ", timeout=120)
            listed = run_cli("models", "list", "--url", serve.grpc_url, "--json")
            states = {m["name"]: (m["state"], m["reason"]) for m in json.loads(listed.stdout)}
            assert states["onnx_idle"][0] == "UNAVAILABLE" and reason in states["onnx_idle"][1], states
            assert states["onnx_model"] == ("READY", "") and _left_over(reason) == []
        os.kill(_server_pid(serve), signal.SIGKILL)
        assert serve.process.wait(120) == 1
        line = serve.expect("error: tritonserver was killed by SIGKILL while serving, 4 times within 10 min")
        assert "stopped starting it again" in line
