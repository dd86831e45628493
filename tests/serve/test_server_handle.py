"""ServerHandle's own life cycle (serve/process.py) without a real tritonserver, in the order an engine's start()
runs it: prepare() (the work dir, tritonserver's private socket directory, the shared-memory prefix), the control
key's file, the front on the user's ports (passing requests on to a stand-in tritonserver on the Unix sockets, the
key checked, tritonize's own metrics added), serving() (the addresses this user's clients read, the supervisor and
the recorder watching the fake Triton of test_supervisor_clock.py) and stop(). The engines' real starts are in
test_embedded.py and test_docker.py; these run in `make mutation`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import socketserver
import ssl
import stat
import tempfile
import threading
import time
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.serve.test_supervisor_clock import SERVER_PID, FakeTriton, http
from tritonize.access import ADDRESSES_FILE, KEY_FILE, KEY_HEADER, ControlKey, ServerTLS, local_key
from tritonize.serve import healing, leftovers, shm, supervisor
from tritonize.serve.healing import Served
from tritonize.serve.process import OWNER_FILE, ServerHandle, ServerInfo, choose_ports
from tritonize.serve.supervisor import RELOAD_DELAYS_S

KEY = ControlKey("a-control-key-for-these-tests-0123")
METRICS = b"nv_inference_count{model=\"solo\"} 3\n"  # what the stand-in tritonserver's metrics socket answers


class Server:
    """RunningServer's part that serving() and stop() use: its log, and stop()."""

    def __init__(self, log_path: Path):
        self.log_path, self.stops = log_path, 0

    def stop(self) -> None:
        self.stops += 1


class Handle(ServerHandle):
    """An engine without a tritonserver: start() as the engines run it, `info` standing for what tritonserver
    answers (the fake Triton's URLs and the fake server pid)."""

    def __init__(self, info: ServerInfo, key: ControlKey | None = None, tls: ServerTLS | None = None, supervise=True):
        self.info, self.control_key, self.tls, self.supervise = info, key, tls, supervise
        self.ports = choose_ports(self.host, None, None, None)

    def start(self, served: Served | None = None, given_up: dict[str, str] | None = None) -> ServerInfo:
        self.prepare()
        try:
            self.control_key = self.key_with_file()
            self.start_front()
            self.server = Server(self.info.log_path)
            self.serving(self.info, served, given_up)
            return self.info
        except BaseException:
            self.stop()
            raise


@pytest.fixture
def world(tmp_path, monkeypatch):
    """(ServerInfo of the fake Triton, FakeTriton, the supervisor's log lines); its models "solo" (1 instance) and
    "pair" (2). /tmp and /dev/shm are folders of the test's own; the one for /tmp has a short name, as /tmp has
    (the Unix sockets in the work dir must fit sun_path's 108 bytes)."""
    for name in ("shm", "python_envs"):
        (tmp_path / name).mkdir()
    short = tempfile.mkdtemp(prefix="tz-handle-")
    monkeypatch.setattr(tempfile, "tempdir", short)
    monkeypatch.setattr(shm, "SHM", tmp_path / "shm")
    monkeypatch.setattr(leftovers, "TMP", tmp_path / "python_envs")
    triton = FakeTriton({"solo": 1, "pair": 2})
    server, thread = http(triton)
    for name in ("live_stubs", "zombie_status", "start_time", "process_state"):
        monkeypatch.setattr(supervisor, name, getattr(triton, name))
    lines: list[str] = []
    monkeypatch.setattr(supervisor, "say", lines.append)
    log = tmp_path / "tritonserver.log"
    log.write_text("I1128 01:00:00.000000 1 server.cc:1] \"a line\"\n")
    info = ServerInfo(grpc_url="127.0.0.1:1", http_url=triton.url, metrics_url=f"{triton.url}/metrics", pid=SERVER_PID,
                      log_path=log, models={})
    try:
        yield info, triton, lines
    finally:
        triton.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def handles():
    """Handles made by the test, stopped at its end whatever happened."""
    made: list[Handle] = []
    yield made
    for handle in made:
        handle.stop()


def _until(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_prepare_makes_an_owned_workdir_a_private_socket_directory_and_clears_what_gone_servers_left(world, handles):
    info, triton, lines = world
    gone = shm.SHM / f"{shm.OWNED}999999999_1_dead_region"  # named after a process that is gone
    gone.write_bytes(b"x" * 10)
    handle = Handle(info)
    handles.append(handle)
    handle.prepare()
    workdir = handle.workdir
    assert workdir.parent == Path(tempfile.gettempdir()) and workdir.name.startswith("tritonize-serve-")
    assert (workdir / OWNER_FILE).read_text().split()[0] == str(os.getpid())
    sockets = handle.upstream.directory
    assert sockets.parent == workdir and sockets.is_dir() and stat.S_IMODE(sockets.stat().st_mode) == 0o700
    assert handle.upstream.http == sockets / "http.sock"  # where tritonserver listens: inside the work dir
    assert not gone.exists()
    assert handle.region_prefix.startswith(f"{shm.OWNED}{os.getpid()}_")
    handle.server = Server(info.log_path)
    assert handle._crashed(-9, "while serving") == RELOAD_DELAYS_S[0] and len(handle.crashes) == 1  # a fresh window


def test_the_control_key_gets_a_file_only_the_user_reads_in_the_workdir_unless_it_has_one(world, handles, tmp_path):
    info, triton, lines = world
    handle = Handle(info, KEY)
    handles.append(handle)
    handle.prepare()
    written = handle.key_with_file()
    assert written.value == KEY.value and written.file == handle.workdir / KEY_FILE
    assert written.file.read_text() == KEY.value + "\n" and stat.S_IMODE(written.file.stat().st_mode) == 0o600
    own = ControlKey(KEY.value, tmp_path / "users-key")
    handle.control_key = own
    assert handle.key_with_file() is own  # the user's file: clients are pointed to it, no copy made
    handle.control_key = None
    assert handle.key_with_file() is None  # --open-control-apis


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Tritonserver(BaseHTTPRequestHandler):
    """tritonserver's HTTP and metrics sockets: 200 "ok" to every request, the metrics at /metrics."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = METRICS if self.path == "/metrics" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def address_string(self) -> str:
        return "unix"

    def log_message(self, *args) -> None:
        pass


def _request(port: int, method: str, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    connection = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_front_serves_the_users_ports_with_the_key_tls_and_tritonizes_metrics(world, handles, tmp_path):
    """Each port its own: HTTP passed on to tritonserver's socket in the work dir, the control APIs only with the key;
    gRPC over TLS (ALPN h2); the metrics Triton's, then tritonize's restart counter."""
    from tests.serve.helpers import make_certificates

    info, triton, lines = world
    (tmp_path / "tls").mkdir()
    files = make_certificates(tmp_path / "tls")
    handle = Handle(info, KEY, ServerTLS(files / "server.pem", files / "server.key"), supervise=False)
    handles.append(handle)
    handle.prepare()
    handle.control_key = handle.key_with_file()
    tritonservers = [_UnixServer(str(path), _Tritonserver) for path in (handle.upstream.http, handle.upstream.metrics)]
    for server in tritonservers:
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        handle.restarts = 2
        handle.start_front()
        http_port, grpc_port, metrics_port = handle.ports.http, handle.ports.grpc, handle.ports.metrics
        assert _request(http_port, "GET", "/v2/health/ready") == (200, b"ok")
        for port in (http_port, grpc_port, metrics_port):  # on the host asked only (loopback), not every interface
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", port), timeout=2).close()
        status, body = _request(http_port, "POST", "/v2/repository/index")
        assert status == 403 and KEY_HEADER in json.loads(body)["error"]
        assert _request(http_port, "POST", "/v2/repository/index", {KEY_HEADER: KEY.value}) == (200, b"ok")
        status, body = _request(metrics_port, "GET", "/metrics")
        assert status == 200 and body == METRICS + handle.samples().encode()
        assert b"\ntritonize_server_restarts_total 2\n" in body
        context = ssl.create_default_context(cafile=str(files / "ca.pem"))
        context.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "h2"
    finally:
        handle.stop()
        for server in tritonservers:
            server.shutdown()
            server.server_close()
    for port in (http_port, grpc_port, metrics_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_tritonizes_metrics_count_the_restarts_in_prometheus_text():
    handle = ServerHandle()
    assert handle.samples() == (
        "# HELP tritonize_server_restarts_total Times tritonize serve started tritonserver again after it died.\n"
        "# TYPE tritonize_server_restarts_total counter\n"
        "tritonize_server_restarts_total 0\n")
    handle.restarts = 3
    assert handle.samples().splitlines()[-1] == "tritonize_server_restarts_total 3"


def test_serving_tells_clients_where_it_listens_and_unsupervised_watches_nothing(world, handles):
    info, triton, lines = world
    handle = Handle(info, KEY, supervise=False)
    handles.append(handle)
    handle.start()
    record = json.loads((handle.workdir / ADDRESSES_FILE).read_text())
    assert record["host"] == "127.0.0.1" and record["ports"] == vars(handle.ports)
    assert record["key_file"] == str(handle.workdir / KEY_FILE)
    found = local_key(f"127.0.0.1:{handle.ports.http}")  # what `tritonize client` does on this machine
    assert found is not None and found.value == KEY.value
    assert handle.supervisor is None and handle.recorder is None


def test_supervised_a_crashed_stub_is_reloaded_with_the_key_and_given_up_models_stay_given_up(world, handles):
    """serving() after a heal: the models the supervisor had given up are UNAVAILABLE again with their reason
    (before the recorder reads the server), the others are watched: a stub killed is reloaded, through the
    repository API that wants the key."""
    info, triton, lines = world
    triton.key_headers = dict(KEY.http_headers)
    handle = Handle(info, KEY)
    handles.append(handle)
    handle.start(given_up={"pair": "it crashed 4 times"})
    assert triton.state["pair"][0] == "UNAVAILABLE" and "it crashed 4 times" in triton.state["pair"][1]
    assert handle.supervisor.given_up == {"pair": "it crashed 4 times"}
    assert set(handle.recorder.served.configs) == {"solo"}  # read after the give-up: pair is not served
    watchers = [handle.supervisor._thread, handle.recorder._thread]
    assert all(thread.is_alive() for thread in watchers)
    pid = triton.kill("solo_0_0")
    assert _until(lambda: lines), "the killed stub was not reloaded"
    assert lines[0].startswith(f"solo: stub solo_0_0 (pid {pid}) died (killed by SIGKILL); reloaded in ")
    assert [name for name, _ in triton.loads if name == "solo"] == ["solo"]
    handle.stop()
    assert not any(thread.is_alive() for thread in watchers)


def test_the_recorder_starts_from_what_was_served_and_reads_a_load_in_the_servers_log(world, handles, monkeypatch):
    """After a heal the recorder starts from the state the clients left (not the new server's, still loading);
    a model the log says loaded since has its config read again, with the key."""
    info, triton, lines = world
    monkeypatch.setattr(healing, "RECORD_S", 0.05)
    triton.key_headers = dict(KEY.http_headers)
    before = Served({"solo": {"name": "solo", "as": "before the crash"}, "pair": triton.config("pair")})
    handle = Handle(info, KEY)
    handles.append(handle)
    handle.start(served=before)
    time.sleep(0.2)  # a few of its readings: a config it knows is not read again...
    assert handle.recorder.served.configs == before.configs
    with open(info.log_path, "a") as log:
        log.write("I1128 01:00:01.000000 1 model_lifecycle.cc:1] \"successfully loaded 'solo'\"\n")
    assert _until(lambda: handle.recorder.served.configs["solo"] == triton.config("solo"))  # ...unless loaded since


def test_unstarted_the_recorder_keeps_what_was_served(world, handles, monkeypatch):
    """The state handed to serving() is the recorder's until its first reading: a heal restores that, not the
    state of a new server that has loaded nothing yet."""
    info, triton, lines = world
    monkeypatch.setattr(healing, "RECORD_S", 60)
    before = Served({"solo": {"name": "solo", "as": "before the crash"}}, failed=("pair",))
    handle = Handle(info)
    handles.append(handle)
    handle.start(served=before)
    assert handle.recorder.served is before
    handle.stop()
    handle = Handle(info)
    handles.append(handle)
    handle.start()
    assert handle.recorder.served == Served({"solo": triton.config("solo"), "pair": triton.config("pair")})


def test_stop_ends_everything_once_and_leaves_other_servers_regions(world, handles):
    """The watchers, the server, the front (its ports free again), this server's shared-memory regions and its work
    dir; a second stop() (atexit after the context manager) does nothing more, and removes no other server's region."""
    info, triton, lines = world
    handle = Handle(info, KEY)
    handles.append(handle)
    handle.start()
    server, workdir, ports = handle.server, handle.workdir, handle.ports
    threads = [handle.supervisor._thread, handle.recorder._thread, handle.front._thread]
    mine = shm.SHM / f"{handle.region_prefix}stub_0"
    other = shm.SHM / f"{shm.region_prefix()}stub_0"  # another server of this process
    mine.write_bytes(b"x")
    other.write_bytes(b"y")
    handle.stop()
    assert server.stops == 1 and not mine.exists() and other.exists() and not workdir.exists()
    assert not any(thread.is_alive() for thread in threads)
    for port in (ports.http, ports.grpc, ports.metrics):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    handle.stop()
    assert server.stops == 1 and other.exists()
    assert (handle.server, handle.front, handle.workdir, handle.region_prefix, handle.supervisor, handle.recorder) == \
        (None,) * 6


def test_stop_completes_when_the_workdir_is_gone_already(world, handles):
    info, triton, lines = world
    handle = Handle(info, supervise=False)
    handles.append(handle)
    handle.start()
    server = handle.server
    shutil.rmtree(handle.workdir)  # someone cleared /tmp meanwhile
    handle.stop()
    assert server.stops == 1 and handle.workdir is None


def test_as_a_context_manager_it_starts_and_stops(world):
    info, triton, lines = world
    handle = Handle(info, supervise=False)
    with handle as got:
        assert got is info and handle.workdir.exists()
        workdir = handle.workdir
    assert not workdir.exists() and handle.front is None
