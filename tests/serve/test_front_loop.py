"""The front (serve/front.py, http_front.py) with its event loop run on the test's own thread: a stand-in for
tritonserver (an asyncio server on the front's upstream Unix socket) and the test's clients run on the same loop, so
every decision the front makes is made here, in the order the test sets. Timeouts are shortened; the bound is small.
What a connection costs while it waits (no task, one place in the front's epoll and in a line of deadlines) is
checked too."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import h11
import pytest

from tritonize.access import ControlKey
from tritonize.serve import front as front_module, front_common, http_front
from tritonize.serve.front import Front
from tritonize.serve.front_common import Upstream

KEY = ControlKey("a-control-key-for-these-tests-0123")
METRICS = b"# HELP nv_inference_count x\r\n\r\nnv_inference_count 3\n"  # a blank CRLF line: the head ends at the first


class Tritonserver:
    """What tritonserver's HTTP and metrics sockets would answer, on this loop: each request recorded (method,
    target, headers, body) and its connections counted; `how`: "ok" (200, `b"ok"`), "close" (closed before
    answering), "cut-head" (closed mid-head), "cut" (closed mid-body), "continue" (a 100 first), "hang" (never
    answers; its metrics too: "stall")."""

    def __init__(self):
        self.requests, self.how, self.servers, self.connections = [], "ok", [], 0
        self.version = b"HTTP/1.1"  # of the metrics' answers

    async def start(self, upstream: Upstream) -> None:
        self.servers.append(await asyncio.start_unix_server(self.http, str(upstream.http)))
        self.servers.append(await asyncio.start_unix_server(self.metrics, str(upstream.metrics)))
        self.servers.append(await asyncio.start_unix_server(self.grpc, str(upstream.grpc)))

    async def grpc(self, reader, writer):
        """Reads what the relay sends (its preface first) and never answers."""
        self.connections += 1
        while await reader.read(65536):
            pass
        writer.close()

    async def http(self, reader, writer):
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=2**20)  # heads up to the front's MAX_HEAD
        self.connections += 1
        try:
            while True:
                event = parser.next_event()
                if event is h11.NEED_DATA:
                    parser.receive_data(await reader.read(65536))
                    continue
                if isinstance(event, h11.Request):
                    request = [event.method, event.target, list(event.headers.raw_items()), b""]
                    if self.how == "hang":  # takes the request and never answers
                        self.requests.append(tuple(request))
                        await asyncio.sleep(3600)
                elif isinstance(event, h11.Data):
                    request[3] += event.data
                elif isinstance(event, h11.EndOfMessage):
                    self.requests.append(tuple(request))
                    if self.how == "close":
                        return
                    if self.how == "close-after":  # answers, then ends its side (Connection: close)
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                        await writer.drain()
                        return
                    if self.how == "continue":
                        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    answer = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n"
                              b"Keep-Alive: timeout=5\r\nX-From: triton\r\n\r\nok")
                    writer.write({"cut-head": answer[:30], "cut": answer[:-1]}.get(self.how, answer))
                    await writer.drain()
                    if self.how.startswith("cut"):
                        return
                    parser.send(h11.Response(status_code=200, headers=[("Content-Length", "2")]))
                    parser.send(h11.Data(data=b"ok"))
                    parser.send(h11.EndOfMessage())
                    parser.start_next_cycle()
                else:
                    return
        finally:
            writer.close()

    async def metrics(self, reader, writer):
        """GET /metrics (else 404), answered as libevhtp does (HTTP/1.1, closed after); `how` "stall": never."""
        head = await reader.readuntil(b"\r\n\r\n")
        if self.how == "stall":
            await asyncio.sleep(3600)
        status = b"200 OK" if head.startswith(b"GET /metrics HTTP/1.0\r\n") else b"404 Not Found"
        writer.write(self.version + b" " + status + b"\r\nContent-Type: text/plain\r\n\r\n" + METRICS)
        await writer.drain()
        writer.close()

    def stop(self):
        for server in self.servers:
            server.close()


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """(front, tritonserver stand-in), listening, the loop not yet run."""
    from tritonize.serve.process import choose_ports

    monkeypatch.setattr(front_common, "HEAD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(front_common, "BODY_TIMEOUT_S", 0.5)
    monkeypatch.setattr(front_common, "LINGER_S", 0.5)
    monkeypatch.setattr(front_module, "MAX_CONNECTIONS", 8)
    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), Upstream(tmp_path), key=KEY,
                  samples=lambda: "tritonize_heals_total 1\n")
    front.listen()
    triton = Tritonserver()
    yield front, triton
    triton.stop()
    front.stop()


def run(front: Front, coroutine, seconds: float = 10):
    return front.loop.run_until_complete(asyncio.wait_for(coroutine, seconds))


async def connect(front: Front, port: int = 0):
    return await asyncio.open_connection("127.0.0.1", front.ports[port])


async def answer(reader, seconds: float = 5) -> bytes:
    """What the front sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), seconds)


async def one(reader) -> tuple[int, dict, bytes]:
    """One answer: status, headers, body."""
    head = await reader.readuntil(b"\r\n\r\n")
    line, *fields = head.decode().split("\r\n")[:-2]
    headers = {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    return int(line.split()[1]), headers, await reader.readexactly(int(headers.get("content-length", 0)))


async def until(condition, seconds: float = 2) -> None:
    """Wait (on the loop, so the front goes on) until `condition()` holds; the test then fails on what it asserts."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)


def error(data: bytes) -> tuple[int, str]:
    status, _, body = data.partition(b"\r\n")[0].split(b" ", 2)[1], None, data.partition(b"\r\n\r\n")[2]
    return int(status), json.loads(body)["error"]


def test_requests_pass_on_re_framed_and_their_answers_come_back(rig):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Connection: keep-alive\r\nX-A: b\r\nContent-Length: 3\r\n\r\nabc")
        first = await one(reader)
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/json\r\n\r\n2\r\nde\r\n1;x=y\r\nf\r\n0\r\nX-Trailer: t\r\n\r\n")
        second = await one(reader)
        writer.write(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")  # no Host (HTTP/1.0): one is added
        third = await one(reader)
        rest = await answer(reader)  # HTTP/1.0 without keep-alive: the front closes after the answer
        writer.close()
        return first, second, third, rest

    *answers, rest = run(front, go())
    assert [a[0] for a in answers] == [200] * 3 and all(a[2] == b"ok" for a in answers) and rest == b""
    assert answers[0][1]["x-from"] == "triton"
    assert "connection" not in answers[0][1] and "keep-alive" not in answers[0][1]  # tritonserver's, not passed on
    (m1, t1, h1, b1), (m2, t2, h2, b2), (m3, t3, h3, b3) = triton.requests
    assert (m1, t1, b1) == (b"POST", b"/v2/models/m/infer", b"abc")
    assert h1 == [(b"Host", b"h"), (b"X-A", b"b"), (b"Content-Length", b"3")]  # form type and Connection dropped
    assert (b2, h2) == (b"def", [(b"Host", b"h"), (b"Content-Type", b"application/json"),  # de-chunked, no trailer
                                 (b"Content-Length", b"3")])
    assert (m3, t3, h3, b3) == (b"GET", b"/v2/health/ready", [(b"Host", b"localhost"), (b"Content-Length", b"0")], b"")
    assert not front.connections.open
    assert front.buffered == 0


def test_pipelined_requests_are_answered_in_turn_on_one_connection_to_tritonserver(rig):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"GET /v2 HTTP/1.1\r\nHost: h\r\n\r\nGET /v2/health/live HTTP/1.1\r\nHost: h\r\n\r\n"
                     b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        return await answer(reader)

    data = run(front, go())
    assert data.count(b"HTTP/1.1 200 OK") == 3 and triton.connections == 1
    assert [r[1] for r in triton.requests] == [b"/v2", b"/v2/health/live", b"/v2/health/ready"]
    assert data.endswith(b"ok") and not front.connections.open


def test_a_client_that_expects_100_continue_gets_it_and_tritonservers_own_is_not_passed_twice(rig):
    front, triton = rig
    triton.how = "continue"

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        interim = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"xy")
        return interim, await one(reader)

    interim, (status, _, body) = run(front, go())
    assert interim == b"HTTP/1.1 100 \r\n\r\n" and (status, body) == (200, b"ok")
    assert triton.requests[0][2] == [(b"Host", b"h"), (b"Content-Length", b"2")]


@pytest.mark.parametrize("path, key, passed", [
    ("/v2/repository/index", None, False), ("/v2/repository/index", KEY.value, True),
    ("/v2/repository/index", "wrong-key-of-the-same-sort-012345", False), ("/v2/health/ready", None, True),
    ("/v2/health/ready?verbose=1", None, True), ("/v2/repository/index?/v2/health/ready", None, False)])
def test_the_control_key_opens_the_restricted_apis_and_never_goes_on(rig, path, key, passed):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        extra = f"tritonize-control-key: {key}\r\n" if key else ""
        writer.write(f"POST {path} HTTP/1.1\r\nHost: h\r\n{extra}Content-Length: 0\r\n\r\n".encode())
        return await one(reader)

    status, _, body = run(front, go())
    if passed:
        assert status == 200 and len(triton.requests) == 1
        assert not [n for n, _ in triton.requests[0][2] if n.lower() == b"tritonize-control-key"]
    else:
        assert status == 403 and triton.requests == [] and "tritonize-control-key" in json.loads(body)["error"]


AWAY = "tritonserver is not listening (starting, or starting again after a crash); retry in a few seconds"
CLOSED = ("tritonserver closed the connection before it answered (did it crash? serve starts it again); retry in a few "
          "seconds")


@pytest.mark.parametrize("how, status, words", [("absent", 503, AWAY), ("close", 503, CLOSED),
                                                ("cut-head", 503, CLOSED)])
def test_when_tritonserver_is_away_or_closes_the_client_gets_503(rig, how, status, words):
    front, triton = rig
    triton.how = how

    async def go():
        if how != "absent":
            await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        return await answer(reader)

    assert error(run(front, go())) == (status, words)


def test_an_answer_cut_short_ends_the_clients_connection(rig):
    front, triton = rig
    triton.how = "cut"

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        return await answer(reader)

    data = run(front, go())
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n\r\no") and not front.connections.open


def test_a_full_tritonserver_files_table_is_503_and_one_line(rig, tmp_path, monkeypatch, capsys):
    import errno

    front, _ = rig
    connect_upstream = asyncio.open_unix_connection

    async def refuse(path, *args, **kwargs):
        if not str(path).startswith(str(tmp_path)):  # another front of this worker (a session's server) goes on
            return await connect_upstream(path, *args, **kwargs)
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(asyncio, "open_unix_connection", refuse)

    async def go():
        answers = []
        for _ in range(2):
            reader, writer = await connect(front)
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
            answers.append(error(await answer(reader)))
        return answers

    answers = run(front, go())
    assert answers == [(503, "this server has too many connections open just now; retry in a few seconds")] * 2
    line = "front: no file left for a connection to tritonserver: new requests get 503\n"
    assert capsys.readouterr().err.count(line) == 1


@pytest.mark.parametrize("request_, status, words", [
    (b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431,
     "the request line and headers are over 65536 bytes"),
    (b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 140_000, 431,  # h11's own bound: still incomplete
     "the request line and headers are over 65536 bytes"),
    (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 67108865\r\n\r\n", 413,
     "the request body of 67108865 bytes is over this server's limit of 67108864 bytes; send large inputs over gRPC"),
    (b"GET /a HTTP/1.1\r\nHost: h\r\nX: \x01\r\n\r\n", 400, "the value of header x holds a control character"),
    (b"\x01GET /a HTTP/1.1\r\n\r\n", 400, "malformed request"),
    (b"PATCH /a?b HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "malformed request"),
    (b"GET /a HTTP/1.1\r\nHost: h\r\nX: y\r\n", 400, "malformed request: peer unexpectedly closed connection"),
    (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
     "malformed request: "),  # in the body: h11's words too
])
def test_what_is_refused_from_the_head_is_answered_and_the_connection_closes(rig, request_, status, words):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(request_)
        writer.write_eof()
        return await answer(reader)

    data = run(front, go())
    assert error(data)[0] == status and error(data)[1].startswith(words) and triton.requests == []
    head, _, body = data.partition(b"\r\n\r\n")  # one answer, nothing after it
    assert b"\r\nConnection: close\r\n" in head + b"\r\n"
    assert b"\r\nContent-Length: %d\r\n" % len(body) in head + b"\r\n"


def test_a_complete_head_over_the_limit_is_431_even_in_one_read(rig):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        sock = socket.create_connection(("127.0.0.1", front.ports[0]))
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 65_600 + b"\r\n\r\n")
        reader, writer = await asyncio.open_connection(sock=sock)
        return await answer(reader)

    assert error(run(front, go()))[0] == 431 and triton.requests == []


def test_a_refused_request_s_body_is_read_and_dropped_until_the_client_has_the_answer(rig):
    """A 413 comes from the head while the client still sends its body: the front reads and drops the rest (a
    lingering close), so the answer is not lost to a reset; then it closes."""
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 67108865\r\n\r\n")
        status = await one(reader)
        for _ in range(20):
            writer.write(b"x" * 65536)
            await writer.drain()
        writer.write_eof()
        rest = await answer(reader)
        await until(lambda: not front.connections.open)  # the front closes once it read the client's end
        return status, rest

    (status, headers, _), rest = run(front, go())
    assert status == 413 and headers["connection"] == "close" and rest == b"" and not front.connections.open


@pytest.mark.parametrize("body, status", [(b"ab", 408), (b"", 408)], ids=["body-stalls", "no-body"])
def test_a_body_that_stalls_is_408(rig, body, status):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\n" + body)
        return await answer(reader)

    assert error(run(front, go())) == (status, "the request's body stalled for 0.5 s")


def test_chunked_bodies_are_bounded_one_by_one_and_all_together(rig, monkeypatch):
    front, triton = rig
    monkeypatch.setattr(http_front, "MAX_BODY", 10)

    async def go():
        await triton.start(front.upstream)
        answers = []
        for chunks in (b"6\r\nabcdef\r\n5\r\nghijk\r\n0\r\n\r\n", b"5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n"):
            reader, writer = await connect(front)
            writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
            answers.append(await answer(reader) if chunks.startswith(b"6") else await one(reader))
        for room in (4, 3):  # other connections hold all but 4 bytes (the body fits exactly), then all but 3
            front.buffered = http_front.MAX_BUFFERED - room
            reader, writer = await connect(front)
            writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n")
            answers.append(await one(reader) if room == 4 else await answer(reader))
        return answers

    over, fits, exactly, crowded = run(front, go())
    assert error(over) == (413, "the chunked request body is over this server's limit of 10 bytes; send large inputs "
                                "over gRPC")
    assert fits[0] == 200 and triton.requests[0][3] == b"abcdefghij"  # MAX_BODY exactly
    assert exactly[0] == 200 and triton.requests[1][3] == b"abcd"
    assert error(crowded) == (503, "this server holds too many chunked bodies just now; retry, or send the body with a "
                                   "Content-Length")
    assert front.buffered == http_front.MAX_BUFFERED - 3  # each body gave its bytes back


def test_a_client_that_goes_away_mid_body_frees_what_it_held(rig):
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await asyncio.sleep(0.1)
        writer.close()
        await asyncio.sleep(0.2)

    run(front, go())
    assert front.buffered == 0 and not front.connections.open and triton.requests == []


@pytest.mark.parametrize("version", [b"HTTP/1.1", b"HTTP/1.0"])
def test_metrics_are_tritons_then_tritonizes_and_only_at_metrics(rig, version):
    front, triton = rig
    triton.version = version

    async def go():
        got = []
        for started in (False, True):
            if started:
                await triton.start(front.upstream)
            for target in (b"/metrics", b"/metrics?x=1", b"/other"):
                reader, writer = await connect(front, 2)
                writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: h\r\n\r\n")
                got.append(await answer(reader))
        reader, writer = await connect(front, 2)
        writer.write(b"BREW /metrics HTTP/1.1\r\nHost: h\r\n\r\n")
        got.append(await answer(reader))
        return got

    *answers, brewed = run(front, go())
    for i, data in enumerate(answers):
        head, _, body = data.partition(b"\r\n\r\n")
        if i % 3 == 2:
            assert error(data) == (404, "the metrics are at /metrics")
            continue
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Type: text/plain; version=0.0.4" in head
        assert body == (METRICS if i > 2 else b"") + b"tritonize_heals_total 1\n"
        assert b"\r\nContent-Length: %d\r\n" % len(body) in head + b"\r\n"
    assert error(brewed)[0] == 405


def test_heads_that_do_not_come_in_time_are_408_idle_connections_are_closed_and_each_has_no_task(rig, monkeypatch):
    front, triton = rig
    monkeypatch.setattr(front_common, "IDLE_TIMEOUT_S", 0.7)

    async def go():
        await triton.start(front.upstream)
        ours = len(asyncio.all_tasks())  # the test's own (wait_for's too, before Python 3.12)
        slow = []
        for _ in range(3):
            reader, writer = await connect(front)
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n")
            slow.append((reader, writer))  # held: a StreamWriter dropped closes its connection
        idle = [await connect(front, port) for port in (0, 2)]
        preface = await connect(front, 1)  # gRPC: the preface is due within the head timeout too
        await asyncio.sleep(0.2)
        parked = (len(front.by_fd), len(asyncio.all_tasks()) - ours, {k: len(v) for k, v in front.lines.items()})
        timed_out = [await answer(r) for r, _ in slow]
        closed = [await answer(r, 2) for r, _ in idle + [preface]]
        return parked, timed_out, closed

    (count, tasks, lines), timed_out, closed = run(front, go())
    assert count == 6 and tasks == 0 and lines == {"idle": 2, "head": 4, "linger": 0}
    assert all(error(data) == (408, "the request's head did not arrive within 0.5 s") for data in timed_out)
    assert closed == [b"", b"", b""] and not front.connections.open and not front.by_fd
    assert all(not line for line in front.lines.values())


def test_deadlines_are_acted_on_in_turns_of_a_batch(rig, monkeypatch):
    front, triton = rig
    monkeypatch.setattr(front_module, "SWEEP_BATCH", 2)
    monkeypatch.setattr(front_common, "IDLE_TIMEOUT_S", 1.0)

    async def go():
        clients = [await connect(front) for _ in range(5)]
        await until(lambda: len(front.lines["idle"]) == 5)
        time.sleep(1.1)  # the loop held: all 5 deadlines are due when the sweep first runs, however slow the machine
        seen = []
        while front.lines["idle"]:
            seen.append(len(front.lines["idle"]))
            await asyncio.sleep(0)
        return clients, seen

    clients, seen = run(front, go())
    assert list(dict.fromkeys(seen)) == [5, 3, 1]  # 5 -> 3 -> 1 -> 0: a batch of 2 at a turn


def test_at_the_bound_the_connection_idle_longest_makes_room_and_503_when_all_are_busy(rig, capsys):
    front, triton = rig
    front.connections.limit = 3

    async def go():
        await triton.start(front.upstream)
        first = await connect(front)
        await asyncio.sleep(0.05)
        others = [await connect(front) for _ in range(3)]  # the third closes the first
        evicted = await answer(first[0], 2)
        for connection in front.connections.open:
            connection.busy = True
        reader, writer = await connect(front)
        full = await answer(reader)
        grpc = await connect(front, 1)
        grpc_full = await answer(grpc[0])
        return evicted, full, grpc_full, others

    evicted, full, grpc_full, _ = run(front, go())
    assert evicted == b"" and grpc_full == b""
    assert error(full) == (503, "this server has 3 connections open, its limit, all in a request; retry in a few "
                                "seconds")
    log = capsys.readouterr().err
    assert "front: 3 connections open, the limit: closing those idle longest for new ones (slow or idle clients?)\n" in log
    assert "front: 3 connections open, the limit, all in a request: new ones get 503\n" in log


def test_a_client_that_resets_while_parked_is_closed(rig):
    import struct

    front, _ = rig

    async def go():
        sock = socket.create_connection(("127.0.0.1", front.ports[0]))
        await asyncio.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset
        for _ in range(50):
            if not front.connections.open:
                return
            await asyncio.sleep(0.01)

    run(front, go())
    assert not front.connections.open and not front.by_fd


@pytest.mark.parametrize("context, words", [({"message": "something odd", "exception": ValueError("x")},
                                               "ValueError('x')"), ({"message": "something odd"}, "'something odd'")])
def test_the_event_loop_s_own_errors_are_one_log_line(rig, capsys, context, words):
    """The exception where there is one, else the loop's message; and one line a minute."""
    front, _ = rig
    front.loop.call_exception_handler(context)
    front.loop.call_exception_handler({"message": "again"})
    err = capsys.readouterr().err
    assert err.count("front: unexpected") == 1 and f"front: unexpected: {words}\n" in err


def test_a_bug_in_a_handler_is_one_line_and_the_connection_ends(rig, monkeypatch, capsys):
    front, _ = rig

    async def broken(self):
        raise KeyError("bug")

    monkeypatch.setattr(http_front.HttpConnection, "serve", broken)

    async def go():
        reader, writer = await connect(front)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        return await answer(reader)

    assert run(front, go()) == b"" and "front: unexpected KeyError('bug')" in capsys.readouterr().err
    front.loop.call_exception_handler({"message": "something odd"})  # unexpected too: within the minute, no line
    assert "front: " not in capsys.readouterr().err


@pytest.mark.parametrize("host, addresses", [("", {"0.0.0.0", "::"}), ("127.0.0.1", {"127.0.0.1"})],
                         ids=["every-interface", "one-address"])
def test_listen_binds_every_address_and_a_taken_port_is_an_error(rig, host, addresses):
    front, _ = rig
    assert {s.getsockname()[0] for s in front._listeners} == {"127.0.0.1"}  # the front's host, not every interface
    wanted = {a[4][0] for a in socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)}
    assert wanted <= addresses and "0.0.0.0" in wanted or host  # the machine's own answer: IPv6 may be off
    sockets = front_module.listen(host, 0)
    try:
        assert {s.getsockname()[0] for s in sockets} == wanted and len(sockets) == len(wanted)
        assert all(not s.getblocking() and s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) for s in sockets)
        assert all(s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) for s in sockets if s.family == socket.AF_INET6)
    finally:
        for s in sockets:
            s.close()
    with pytest.raises(OSError):
        front_module.listen("127.0.0.1", front.ports[0])
    taken = Front("127.0.0.1", front.ports, front.upstream)
    with pytest.raises(OSError):
        taken.start()
    assert taken.loop.is_closed()


def test_an_error_answer_is_tritons_json_and_closes():
    data = http_front.error_answer(404, 'the "thing" is gone')
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [b"HTTP/1.1 404 Not Found", b"Content-Type: application/json",
                                   b"Content-Length: %d" % len(body), b"Connection: close"]
    assert json.loads(body) == {"error": 'the "thing" is gone'}


@pytest.mark.parametrize("request_, status, words", [
    (h11.Request(method="BREW", target="/a", headers=[("Host", "h")]), 405, "method BREW is not one this server takes"),
    (h11.Request(method="POST", target="/a", headers=[("Host", "h"), ("Content-Length", "1"),
                                                       ("Transfer-Encoding", "chunked")]), 400,
     "ambiguous body length: Content-Length and Transfer-Encoding"),
    (h11.Request(method="GET", target="/a#b", headers=[("Host", "h")]), 400,
     "the request target must be a path (RFC 3986 characters), with an optional query"),
    (h11.Request(method="GET", target="/a", headers=[("Host", "h"), ("X", "\x7f")]), 400,
     "the value of header x holds a control character or a byte above 0x7e"),
])
def test_checked_refuses_what_libevhtp_would_read_otherwise(request_, status, words):
    with pytest.raises(http_front.Refused) as refused:
        http_front.checked(request_)
    assert refused.value.status == status and str(refused.value) == words


def test_checked_passes_the_usual():
    ok = h11.Request(method="POST", target="/v2/models/m/infer?x=%41&y=/z", headers=[("Host", "h"), ("X", "a\tb ~")])
    assert http_front.checked(ok) is ok


def test_without_tritonservers_metrics_in_time_the_port_serves_tritonizes_own(rig, monkeypatch):
    front, triton = rig
    triton.how = "stall"
    monkeypatch.setattr(http_front, "METRICS_TIMEOUT_S", 0.3)

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front, 2)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n")
        return await answer(reader, 2)

    data = run(front, go())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\ntritonize_heals_total 1\n")


def test_stop_ends_the_requests_in_progress(rig):
    """An HTTP request tritonserver never answers and a relayed gRPC connection: stop() cancels their tasks and
    waits until they have ended (the relay's takes turns of the loop: it ends its two directions first)."""
    from tritonize.serve.grpc_front import PREFACE

    front, triton = rig
    triton.how = "hang"

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        grpc = await connect(front, 1)
        grpc[1].write(PREFACE)
        await until(lambda: triton.requests and triton.connections == 2)
        return reader, writer, grpc

    clients = run(front, go())
    assert triton.connections == 2 and len([c for c in front.connections.open if c.task is not None]) == 2
    triton.stop()
    front.stop()
    assert front.loop.is_closed() and not [t for t in asyncio.all_tasks(front.loop) if not t.done()]
    del clients


def test_start_serves_from_a_daemon_thread_of_its_own_and_stop_ends_it(tmp_path):
    """serve may exit without stop() (a daemon thread does not hold the process), and the thread is named in a
    dump of serve's threads."""
    from tritonize.serve.process import choose_ports

    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), Upstream(tmp_path))
    others = set(threading.enumerate())  # a session's server in this worker has a front of its own
    front.start()
    try:
        thread = [t for t in threading.enumerate() if t.name == "tritonize-front" and t not in others]
        assert len(thread) == 1 and thread[0].daemon
        with socket.create_connection(("127.0.0.1", ports.http), timeout=10) as sock:
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 503 ")  # no tritonserver behind it
    finally:
        front.stop()
    assert not thread[0].is_alive() and front.loop.is_closed()


def test_grpc_over_tls_is_offered_h2_and_its_connections_are_served_at_once(tmp_path):
    """With `tls`, the gRPC port speaks TLS with the server's certificate and offers ALPN h2 (gRPC clients insist);
    such a connection is not parked (its bytes are the handshake's), but served from the start."""
    import ssl

    from tests.serve.helpers import make_certificates
    from tritonize.access import ServerTLS
    from tritonize.serve.process import choose_ports

    files = make_certificates(tmp_path / "tls")
    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), Upstream(tmp_path),
                  tls=ServerTLS(files / "server.pem", files / "server.key"))
    front.listen()
    context = ssl.create_default_context(cafile=str(files / "ca.pem"))
    context.set_alpn_protocols(["h2"])

    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", ports.grpc, ssl=context,
                                                       server_hostname="localhost")
        protocol = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        served = [c.task is not None and not c.parked for c in front.connections.open]
        writer.close()
        return protocol, served

    try:
        assert run(front, go()) == ("h2", [True])
    finally:
        front.stop()


@pytest.mark.parametrize("after, line", [(b"GET /v2 HTTP/1.1\r\nHo", "head"), (b"", "idle")])
def test_the_start_of_the_next_head_after_an_answer_has_the_head_timeout(rig, after, line):
    """A request answered and the next one's first bytes already in: the connection waits in the head line (408 after
    HEAD_TIMEOUT_S); with none, in the idle line (closed after IDLE_TIMEOUT_S, without an answer)."""
    front, triton = rig

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n" + after)
        first = await one(reader)
        await until(lambda: front.by_fd)
        lines = [c.line for c in front.connections.open]
        return first, lines, (await answer(reader, 2) if after else None), writer

    first, lines, rest, _ = run(front, go())
    assert first[0] == 200 and lines == [line]
    if after:
        assert error(rest) == (408, "the request's head did not arrive within 0.5 s")


def test_at_the_bound_the_connection_idle_longest_goes_whatever_its_age(rig):
    """Closed at the bound: the connection idle longest since its last answer, not the oldest (A, which was just
    answered), and one that was in a request before goes as cleanly as one that never was."""
    front, triton = rig
    front.connections.limit = 3

    async def go():
        await triton.start(front.upstream)
        a, b = await connect(front), await connect(front)
        for reader, writer in (b, a):  # b answered first: idle longest from then on
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
            assert (await one(reader))[0] == 200
        await until(lambda: len(front.by_fd) == 2)
        c = await connect(front)
        await until(lambda: len(front.by_fd) == 3)
        d = await connect(front)  # the bound: b goes
        closed = await answer(b[0], 2)
        a[1].write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        return closed, await one(a[0]), (c, d)

    closed, (status, _, _), _ = run(front, go())
    assert closed == b"" and status == 200


def test_after_tritonserver_closes_its_side_the_next_request_goes_on_a_new_connection(rig):
    front, triton = rig
    triton.how = "close-after"

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        answers = []
        for _ in range(2):
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
            answers.append(await one(reader))
        return answers

    answers = run(front, go())
    assert [a[0] for a in answers] == [200, 200] and triton.connections == 2 and len(triton.requests) == 2


def test_a_body_of_max_body_exactly_passes_and_one_byte_more_is_413(rig, monkeypatch):
    front, triton = rig
    monkeypatch.setattr(http_front, "MAX_BODY", 10)

    async def go():
        await triton.start(front.upstream)
        got = []
        for size in (10, 11):
            reader, writer = await connect(front)
            writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % size
                         + b"x" * size)
            got.append(await one(reader))
        return got

    (fits, _, _), (status, _, body) = run(front, go())
    assert fits == 200 and triton.requests[0][3] == b"x" * 10 and len(triton.requests) == 1
    assert (status, json.loads(body)["error"]) == (413, "the request body of 11 bytes is over this server's limit of "
                                                        "10 bytes; send large inputs over gRPC")


def test_parked_connections_are_read_in_turns_of_a_batch(rig, monkeypatch):
    """5 parked connections whose requests are all in: READS_BATCH (2 here) are read at a turn of the loop, so that
    thousands at once do not hold the loop."""
    front, triton = rig
    triton.how = "hang"
    monkeypatch.setattr(front_module, "READS_BATCH", 2)

    async def go():
        await triton.start(front.upstream)
        clients = [await connect(front) for _ in range(5)]
        await until(lambda: len(front.by_fd) == 5)
        for _, writer in clients:
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
            await writer.drain()
        time.sleep(0.3)  # the loop held: every request is in before the front reads one
        seen = []
        while len(seen) < 50 and (not seen or seen[-1] < 5):
            seen.append(sum(c.task is not None for c in front.connections.open))
            await asyncio.sleep(0)
        return clients, seen

    _, seen = run(front, go())
    assert seen[-1] == 5 and max(b - a for a, b in zip(seen, seen[1:])) == 2, seen


def test_upstream_names_tritonservers_sockets_and_clears_those_a_server_left(tmp_path):
    """The flags tritonserver listens by (the embedded engine's, and a container's with the directory as it sees it),
    and the sockets a dead server left removed before the next one binds (libevhtp cannot bind over one)."""
    upstream = Upstream(tmp_path)
    assert upstream.flags() == [f"--http-address=unix:{tmp_path}/http.sock", f"--grpc-address=unix:{tmp_path}/grpc.sock",
                                "--grpc-port=8001", f"--metrics-address=unix:{tmp_path}/metrics.sock"]
    assert upstream.flags("/run/s") == ["--http-address=unix:/run/s/http.sock", "--grpc-address=unix:/run/s/grpc.sock",
                                        "--grpc-port=8001", "--metrics-address=unix:/run/s/metrics.sock"]
    assert (upstream.http, upstream.grpc, upstream.metrics) == (tmp_path / "http.sock", tmp_path / "grpc.sock:8001",
                                                                tmp_path / "metrics.sock")
    for path in (upstream.http, upstream.grpc, upstream.metrics, tmp_path / "other.sock"):
        path.touch()
    upstream.clear()
    upstream.clear()  # none left: no error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sock"]


@pytest.mark.parametrize("size, status", [(65536, 200), (65537, 431), (40_000, 200)],
                         ids=["MAX_HEAD", "one-byte-over", "the-next-in-the-same-read"])
def test_a_head_of_max_head_bytes_exactly_passes_even_with_the_next_request_behind_it(rig, size, status):
    """The bound counts the head's own bytes, up to its blank line: not the pipelined request behind it, even where
    one read took both."""
    front, triton = rig
    start = b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nX: "
    head = start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"
    assert len(head) == size and front_common.MAX_HEAD == 65536

    async def go():
        await triton.start(front.upstream)
        reader, writer = await connect(front)
        writer.write(head + b"GET /v2 HTTP/1.1\r\nHost: h\r\nX: " + b"b" * 30_000 + b"\r\n\r\n")
        return await one(reader), (await one(reader) if status == 200 else None)

    (got, _, _), second = run(front, go())
    assert got == status and (second is None or second[0] == 200)
    assert [r[1] for r in triton.requests] == ([b"/v2/health/ready", b"/v2"] if status == 200 else [])


def test_out_of_files_at_accept_pauses_the_listener_a_second_with_one_line(rig, monkeypatch, capsys):
    """accept() failing for want of files: the listener rests a second (not a busy loop on a readable socket), one
    log line says why, and the client waiting in the kernel's queue is then served."""
    import errno

    front, _ = rig
    real, failed = socket.socket.accept, []

    def accept(self):
        if self.fileno() in {s.fileno() for s in front._listeners} and not failed:
            failed.append(front.loop.time())
            raise OSError(errno.EMFILE, "Too many open files")
        return real(self)

    monkeypatch.setattr(socket.socket, "accept", accept)

    async def go():
        reader, writer = await connect(front)
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        data = await answer(reader, 5)
        return data, front.loop.time()

    data, answered = run(front, go())
    assert error(data)[0] == 503 and failed and answered - failed[0] >= 1  # served after the pause: no tritonserver
    assert capsys.readouterr().err == ("front: cannot accept connections (Too many open files): paused a second at a "
                                       "time\n")
