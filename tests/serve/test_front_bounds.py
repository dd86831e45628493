"""The front under many slow or idle clients: other clients are still served, a head that does not come in time ends
its connection, at the bound the connection idle longest makes room, 503 comes only when every connection is in a
request, and the log says so in a line a minute, not a line a connection. The front runs here in front of a small
HTTP server on its Unix socket (what tritonserver would be); benchmarks/front_connections.py does the same with
10,000 connections on the real server."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request

import pytest

from tritonize.serve import front as front_module


class _Backend(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads, request_queue_size = True, 128


class _Answer(socketserver.StreamRequestHandler):
    """200 `ok` to each request (heads only); /slow is answered only when `release` is set."""

    release = threading.Event()

    def handle(self):
        while line := self.rfile.readline():
            target = line.split(b" ")[1] if line.count(b" ") >= 2 else b""
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            if target == b"/slow":
                self.release.wait(60)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def front(tmp_path, monkeypatch):
    from tritonize.serve.front import Front, Upstream
    from tritonize.serve.process import choose_ports

    monkeypatch.setattr(front_module, "MAX_CONNECTIONS", 40)
    monkeypatch.setattr(front_module, "HEAD_TIMEOUT_S", 2.0)
    upstream = Upstream(tmp_path)
    backend = _Backend(str(upstream.http), _Answer)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    ports = choose_ports("127.0.0.1", None, None, None)
    running = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), upstream)
    running.start()
    _Answer.release.clear()
    yield running
    _Answer.release.set()
    running.stop()
    backend.shutdown()
    backend.server_close()


def _get(port: int, path: str = "/v2/health/ready") -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_slow_clients_leave_the_others_served_and_the_log_short(front, capfd):
    port = front.ports[0]
    slow = []
    for i in range(200):  # five times the bound, each a head that never ends
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow.append(s)
        if i % 20 == 0:
            assert _get(port) == 200
    assert [_get(port) for _ in range(20)] == [200] * 20
    assert len(front.connections.open) <= 40
    time.sleep(front_module.HEAD_TIMEOUT_S + 1)
    left = slow[-30:]  # those the bound did not close: the head timeout did, with 408
    answers = []
    for s in left:
        s.settimeout(5)
        try:
            answers.append(s.recv(100))
        except OSError:
            answers.append(b"")
    assert all(a == b"" or a.startswith(b"HTTP/1.1 408 ") for a in answers) and any(answers), answers
    for s in slow:
        s.close()
    log = capfd.readouterr().err
    assert log.count("front: ") == 1 and "closing those idle longest" in log and len(log) < 1000, log


def test_503_only_when_every_connection_is_in_a_request(front, capfd):
    port = front.ports[0]
    busy = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        busy.append(s)
    deadline = time.monotonic() + 10
    while sum(c.busy for c in front.connections.open) < 40:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _get(port) == 503
    _Answer.release.set()
    for s in busy:
        s.settimeout(10)
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")
        s.close()
    assert _get(port) == 200
    log = capfd.readouterr().err
    assert log.count("front: ") == 1 and "all in a request: new ones get 503" in log, log


def test_the_log_says_each_trouble_once_a_minute_with_a_count(capsys):
    now = [0.0]
    log = front_module.Log(clock=lambda: now[0])
    for second in range(0, 150):
        now[0] = float(second)
        log("evicted", "closing")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["front: closing", "front: closing (60 times since the last such line)",
                     "front: closing (60 times since the last such line)"]


@pytest.mark.parametrize("soft, hard, limit", [(1024, 1024, 1024 - 64), (1024, 524288, 16384), (20000, 20000, 16384),
                                               (100, 100, 36), (10, 10, 1)])
def test_the_bound_follows_the_open_files_limit_raised_to_its_hard_limit(monkeypatch, soft, hard, limit):
    import resource

    raised = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: raised.append((which, value)))
    assert front_module.connection_limit() == limit
    assert raised == ([(resource.RLIMIT_NOFILE, (hard, hard))] if soft != hard else [])


def test_a_limit_that_cannot_be_raised_stays(monkeypatch):
    import resource

    def refuse(which, value):
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert front_module.connection_limit() == 1024 - 64
