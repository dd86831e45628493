"""serve/process.py's parts that need no real tritonserver: ports, addresses, the log's tail, exit words, the work
directory and its owner, waiting for ports, and RunningServer's life cycle on a fake server process (a Python script
that answers readiness and the repository index, writes a glog line per load, makes a python_env as Triton's Python
backend does and removes it when it is stopped). The real server's life cycle is in test_embedded.py and
test_server_healing.py; these run in `make mutation`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonize.errors import TritonizeError
from tritonize.serve import leftovers, process
from tritonize.serve.process import (
    OWNER_FILE,
    Ports,
    RunningServer,
    choose_ports,
    connect_host,
    endpoints,
    make_workdir,
)
from tritonize.serve.readiness import ServerDied, exit_words, log_tail

FAKE = r"""
import json, os, signal, sys, time, threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import socket

http_port, grpc_port, tmp, behaviour = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]

def log(message):
    now = time.time()
    print(f'I{datetime.fromtimestamp(now).strftime("%m%d %H:%M:%S.%f")} {os.getpid()} fake.cc:1] {message}', flush=True)

import ctypes
death = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(death))  # PR_GET_PDEATHSIG
null = os.stat(os.devnull).st_rdev
given = os.environ.get("FAKE_ENV")
log(f'"cwd {os.getcwd()} env {given} stdin-null {os.fstat(0).st_rdev == null} '
    f'own-group {os.getpgid(0) == os.getpid()} death-signal {death.value}"')
print("a line on stderr", file=sys.stderr, flush=True)
if behaviour == "exits":
    log('"no model repository"')
    sys.exit(3)
if behaviour == "slow":
    log("\"failed to load 'trt_model'\"")
    time.sleep(2.6)
env = None
if behaviour != "never ready":
    log('"loading: onnx_model:1"')
    env = os.path.join(tmp, "python_env_" + format(os.getpid() % 10**6, "06d"))
    os.mkdir(env)
    time.sleep(0.002)
    log('"TRITONBACKEND_ModelInstanceInitialize: onnx_model_0_0 (CPU device 0)"')
    log('''"successfully loaded 'onnx_model'"''')

def finalize(*_):
    if env and behaviour != "ignores sigterm":
        os.rmdir(env)  # as Triton's Python backend at its finalize
    if behaviour != "ignores sigterm":
        os._exit(0)

signal.signal(signal.SIGTERM, finalize)

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ready = behaviour != "never ready" and self.path == "/v2/health/ready"
        self.send_response(200 if ready else 404)
        self.end_headers()
    def do_POST(self):
        if behaviour == "wants a key" and self.headers.get("tritonize-control-key") != "k" * 24:
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps([{"name": "onnx_model", "version": "1", "state": "READY"}]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

grpc = socket.socket()
grpc.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
grpc.bind(("127.0.0.1", grpc_port))
grpc.listen()
threading.Thread(target=lambda: [grpc.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
ThreadingHTTPServer(("127.0.0.1", http_port), Handler).serve_forever()
"""


@pytest.fixture
def tmp(tmp_path, monkeypatch) -> Path:
    """Where the fake server makes its python_env, standing for /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(leftovers, "TMP", folder)
    return folder


def _server(tmp_path: Path, tmp: Path, behaviour: str = "serves", timeout: float = 30.0, **options) -> RunningServer:
    ports = choose_ports("127.0.0.1", None, None, None)
    script = tmp_path / "fake_tritonserver.py"
    script.write_text(FAKE)
    repository = tmp_path / "repository"
    (repository / "onnx_model").mkdir(parents=True, exist_ok=True)
    (repository / "onnx_model" / "config.pbtxt").write_text('name: "onnx_model"\nplatform: "onnxruntime_onnx"\n')
    return RunningServer([sys.executable, str(script), str(ports.http), str(ports.grpc), str(tmp), behaviour],
                         urls=endpoints("127.0.0.1", ports), log_path=tmp_path / "server.log", ready_timeout=timeout,
                         repositories=(repository,), **options)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_starts_says_what_it_loaded_and_stops_as_a_group(tmp_path, tmp):
    server = _server(tmp_path, tmp)
    info = server.start()
    try:
        assert info.models == {"onnx_model": ("READY", "")} and info.pid == server.process.pid
        assert (info.tls, info.control_key, info.model_config_name) == (False, None, None)  # plain gRPC, open, default
        assert (info.grpc_url, info.http_url) == server.urls[:2] and info.log_path == tmp_path / "server.log"
        assert server.exit_code() is None
        (made,) = leftovers.python_envs()
        assert (made / leftovers.MARK).read_text().startswith(f"tritonserver {info.pid} ")  # its own, marked
    finally:
        server.stop()
    assert server.process is None and server.exit_code() is None and not _alive(info.pid)
    assert leftovers.python_envs() == set()  # removed by the server itself (it exited on SIGTERM)


def test_a_killed_server_leaves_nothing_of_its_own(tmp_path, tmp):
    server = _server(tmp_path, tmp)
    info = server.start()
    os.kill(info.pid, signal.SIGKILL)
    while server.exit_code() is None:
        time.sleep(0.01)
    assert server.exit_code() == -signal.SIGKILL and len(leftovers.python_envs()) == 1
    server.stop()
    assert leftovers.python_envs() == set()


def test_a_killed_server_leaves_no_folder_made_after_its_last_marking(tmp_path, tmp):
    """Marking runs at the start and after a heal's restore: a folder of a model loaded later is unmarked when the
    server is killed, and its log tells it."""
    server = _server(tmp_path, tmp)
    info = server.start()
    (made,) = leftovers.python_envs()
    (made / leftovers.MARK).unlink()  # as made by a load after the start's marking
    os.kill(info.pid, signal.SIGKILL)
    server.process.wait()
    server.stop()
    assert leftovers.python_envs() == set()


def test_a_server_that_ignores_sigterm_is_killed_and_its_folder_removed(tmp_path, tmp, monkeypatch):
    monkeypatch.setattr(process, "stop_process_group", _quick_stop)
    server = _server(tmp_path, tmp, "ignores sigterm")
    info = server.start()
    server.stop()
    assert not _alive(info.pid) and leftovers.python_envs() == set()


def _quick_stop(proc):
    from tritonize.processes import stop_process_group

    stop_process_group(proc, grace=0.5)


def test_a_server_that_exits_before_it_is_ready_is_server_died_with_its_log(tmp_path, tmp):
    server = _server(tmp_path, tmp, "exits")
    with pytest.raises(ServerDied) as died:
        server.start()
    assert died.value.code == 3 and died.value.during == "before it was ready"
    assert str(died.value).startswith("tritonserver exited with code 3 before it was ready\nserver log ")
    assert '"no model repository"' in str(died.value) and server.process is None


def test_a_server_never_ready_is_stopped_after_the_timeout(tmp_path, tmp):
    server = _server(tmp_path, tmp, "never ready", timeout=1.0)
    with pytest.raises(TritonizeError, match=r"^tritonserver was not ready within 1 s \(raise --ready-timeout if loading is slow\)"):
        server.start()
    assert server.process is None


def test_a_start_after_a_crash_appends_to_the_log_and_reads_only_its_own_part(tmp_path, tmp):
    server = _server(tmp_path, tmp)
    first = server.start()
    os.kill(first.pid, signal.SIGKILL)
    server.process.wait()
    server.stop()
    size = (tmp_path / "server.log").stat().st_size
    second = server.start(append=True)
    try:
        assert server.log.offset == size and (tmp_path / "server.log").read_text().count("loading:") == 2
        (made,) = leftovers.python_envs()
        assert f"tritonserver {second.pid} " in (made / leftovers.MARK).read_text()
    finally:
        server.stop()


def test_ports_given_must_be_free_and_differ_and_picked_ones_avoid_what_they_are_told():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TritonizeError, match=rf"^port {port} on 127.0.0.1 is already in use or not available \(.+\); "
                                                 r"stop what uses it or choose another with --grpc-port$"):
            choose_ports("127.0.0.1", None, port, None)
    with pytest.raises(TritonizeError, match=r"the HTTP, gRPC and metrics ports must differ \(got \{'http': 5, 'grpc': 5, "):
        choose_ports("127.0.0.1", 5, 5, None)
    picked = choose_ports("127.0.0.1", None, None, None)
    assert len(set(vars(picked).values())) == 3
    given = choose_ports("127.0.0.1", picked.http, None, None, avoid=frozenset({picked.grpc, picked.metrics}))
    assert given.http == picked.http and not {given.grpc, given.metrics} & {picked.grpc, picked.metrics, picked.http}


def test_where_a_local_client_reaches_a_server():
    assert [connect_host(h) for h in ("0.0.0.0", "::", "", "10.1.2.3")] == ["127.0.0.1", "::1", "127.0.0.1", "10.1.2.3"]
    assert endpoints("0.0.0.0", Ports(1, 2, 3)) == ("127.0.0.1:2", "http://127.0.0.1:1", "http://127.0.0.1:3/metrics")
    assert endpoints("::", Ports(1, 2, 3)) == ("[::1]:2", "http://[::1]:1", "http://[::1]:3/metrics")


def test_the_logs_tail_is_its_errors_and_last_lines_in_order_without_repeats(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join([*(f"E{i} error" if i in (1, 3) else f"I{i} info" for i in range(30))]) + "\n")
    tail = log_tail(log, lines=3, errors=1)
    assert tail == f"server log {log} (errors and last lines):\n  | E3 error\n  | I27 info\n  | I28 info\n  | I29 info"
    log.write_text("E0 only\n")
    assert log_tail(log) == f"server log {log} (errors and last lines):\n  | E0 only"
    log.write_text("I0 the first line\nI1 the last\n")  # shorter than its tail: all of it
    assert log_tail(log) == f"server log {log} (errors and last lines):\n  | I0 the first line\n  | I1 the last"
    assert log_tail(tmp_path / "missing.log") == f"(no server log at {tmp_path / 'missing.log'})"


def test_exit_words():
    assert exit_words(-9) == "was killed by SIGKILL" and exit_words(-11) == "was killed by SIGSEGV"
    assert exit_words(1) == "exited with code 1" and exit_words(0) == "exited with code 0"
    assert exit_words(-99) == "was killed by signal 99"
    died = ServerDied(-6, "while it loaded the models back")
    assert str(died) == "tritonserver was killed by SIGABRT while it loaded the models back" and died.code == -6
    assert isinstance(died, TritonizeError)


def test_a_workdir_is_owned_and_those_of_gone_owners_are_removed(tmp_path, monkeypatch, capsys):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale, alive, anonymous, odd = (tmp_path / f"tritonize-serve-{n}" for n in ("stale", "alive", "anonymous", "odd"))
    for folder, owner in ((stale, f"{gone.pid} 1"), (alive, f"{os.getpid()} {_started(os.getpid())}"),
                          (anonymous, None), (odd, "not a pid")):
        folder.mkdir()
        if owner:
            (folder / OWNER_FILE).write_text(owner + "\n")
    workdir = make_workdir()
    assert workdir.parent == tmp_path and workdir.name.startswith("tritonize-serve-")
    assert (workdir / OWNER_FILE).read_text() == f"{os.getpid()} {_started(os.getpid())}\n"
    assert not stale.exists() and alive.exists() and anonymous.exists() and odd.exists()
    assert f"removed {stale}: left by a server whose process ({gone.pid}) is gone" in capsys.readouterr().err


def _started(pid: int) -> str:
    from tritonize.processes import start_time

    return start_time(pid)


def test_the_server_runs_as_asked_and_says_so_in_its_info(tmp_path, tmp):
    """Its environment and directory, no stdin (whatever serve's own stdin is: here a pipe), stderr into the log, a
    process group of its own, SIGTERM when the process that started it dies; the info carries what it was started
    with."""
    from tritonize.access import ControlKey

    key = ControlKey("k" * 24)
    server = _server(tmp_path, tmp, "wants a key", env={**os.environ, "FAKE_ENV": "given"}, cwd=tmp_path,
                     model_config_name="cpu", control_key=key, tls=True)
    read_end, write_end = os.pipe()
    own_stdin = os.dup(0)  # pytest-xdist's workers have /dev/null there already; execnet talks on other fds
    os.dup2(read_end, 0)
    try:
        info = server.start()
    finally:
        os.dup2(own_stdin, 0)
        for fd in (own_stdin, read_end, write_end):
            os.close(fd)
    try:
        log = (tmp_path / "server.log").read_text()
        assert f'"cwd {tmp_path} env given stdin-null True own-group True death-signal {signal.SIGTERM}"' in log
        assert "a line on stderr\n" in log
        assert (info.metrics_url, info.model_config_name, info.control_key, info.tls) == (server.urls[2], "cpu", key, True)
        assert info.models == {"onnx_model": ("READY", "")}  # the index wanted the key: it was sent
    finally:
        server.stop()


def test_a_start_writes_a_new_log_and_a_start_after_a_crash_appends(tmp_path, tmp):
    (tmp_path / "server.log").write_text("an older server's log\n")
    server = _server(tmp_path, tmp)
    server.start()
    server.stop()
    assert "an older server's log" not in (tmp_path / "server.log").read_text() and server.log.offset == 0
    (tmp_path / "server.log").unlink()
    server.start(append=True)  # no log yet: from its start
    try:
        assert server.log.offset == 0 and "loading: onnx_model:1" in (tmp_path / "server.log").read_text()
    finally:
        server.stop()


def test_the_wait_says_a_model_left_out_for_a_gpu_box_is_not_built(tmp_path, tmp, capsys):
    server = _server(tmp_path, tmp, "slow", not_built={"trt_model": "not built: it needs a GPU box. More words."})
    server.start()
    server.stop()
    err = capsys.readouterr().err
    assert "not built: it needs a GPU box" in err and "failed: trt_model" not in err


def test_the_wait_notes_the_loading_once_every_two_seconds_with_the_time_it_has_waited(tmp_path, tmp, capsys):
    server = _server(tmp_path, tmp, "slow")  # ready after 2.6 s
    server.start()
    server.stop()
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  loading: ")]
    assert notes == ["  loading: 0 model(s) loaded; failed: trt_model (2 s)"]


def test_the_loading_progress_in_every_case(tmp_path):
    from tritonize.serve.readiness import loading_progress

    log = tmp_path / "server.log"
    assert loading_progress(tmp_path / "none.log") == "starting"
    log.write_bytes(b"I... not utf-8 \xff\n")
    assert loading_progress(log) == "starting, no model loaded yet"
    log.write_bytes(b"\xff failed to load 'a' and failed to load 'b'\n")
    assert loading_progress(log) == "0 model(s) loaded; failed: a, b"
    log.write_text("".join(f"successfully loaded '{m}'\n" for m in ("m1", "m2", "m3", "m4", "m2")))
    assert loading_progress(log) == "4 model(s) loaded, latest m2, m3, m4"
    log.write_text("successfully loaded 'm1'\nfailed to load 'trt_model'\nfailed to load 'other'\n")
    notes = {"trt_model": "trt_model is not built here. Build it on a GPU box."}
    assert loading_progress(log, notes) == "1 model(s) loaded, latest m1; trt_model is not built here; failed: other"
    log.write_text("failed to load 'trt_model'\nfailed to load 'trt_fp16'\n")
    notes["trt_fp16"] = "trt_fp16 is not built here either. Build it on a GPU box."
    assert loading_progress(log, notes) == "0 model(s) loaded; trt_model is not built here; trt_fp16 is not built here either"


def test_the_logs_tail_by_default_and_past_bytes_that_are_not_utf8(tmp_path):
    log = tmp_path / "server.log"
    lines = [f"E{i} error" if i % 3 == 0 else f"I{i} info" for i in range(40)] + ["I40 \udcff"]
    log.write_bytes("\n".join(lines).encode(errors="surrogateescape") + b"\n")
    kept = log_tail(log).splitlines()[1:]
    errors = [f"  | E{i} error" for i in range(0, 40, 3)]
    assert kept[:3] == errors[-10:-7] and kept[-1] == "  | I40 \ufffd" and len(kept) == 10 + 15 - 5  # 5 errors among the last 15
    few = tmp_path / "few.log"
    few.write_text("E1 a\nE2 b\nE3 c\nI4 d\n")
    assert log_tail(few, lines=1, errors=1).splitlines()[1:] == ["  | E3 c", "  | I4 d"]


def test_readiness_probes_on_loopback_v4_and_v6():
    from tritonize.serve.process import _bind
    from tritonize.serve.readiness import _http_ok, _tcp_open

    with socket.socket(socket.AF_INET6) as six, socket.socket() as four:
        six.bind(("::1", 0))
        six.listen()
        four.bind(("127.0.0.1", 0))
        four.listen()
        assert _tcp_open(f"[::1]:{six.getsockname()[1]}") and _tcp_open(f"127.0.0.1:{four.getsockname()[1]}")
        bound = _bind("::1", 0)
        assert bound.family == socket.AF_INET6
        bound.close()
        start = time.monotonic()
        assert not _http_ok(f"http://127.0.0.1:{four.getsockname()[1]}/v2/health/ready")  # accepts, never answers
        assert time.monotonic() - start < 1.8
    assert not _tcp_open("127.0.0.1:9") and not _http_ok("http://127.0.0.1:9/")


def test_marking_a_server_that_does_not_run_marks_nothing(tmp_path, tmp):
    server = _server(tmp_path, tmp)
    server.mark_own()  # never started
    assert server.log.marked == {}


def test_a_link_named_like_a_stale_workdir_is_neither_followed_nor_in_the_way(tmp_path, monkeypatch, capsys):
    """Anyone may create /tmp/tritonize-serve-*: a symbolic link there naming a gone owner must not make the start
    remove what it points to, nor fail the start."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    target = tmp_path / "someone's files"
    target.mkdir()
    (target / OWNER_FILE).write_text(f"{gone.pid} 1\n")
    (target / "precious").write_text("kept")
    link = tmp_path / "tmp" / "tritonize-serve-link"
    link.symlink_to(target)
    workdir = make_workdir()
    assert workdir.is_dir() and (target / "precious").read_text() == "kept" and link.is_symlink()
    assert "removed" not in capsys.readouterr().err
