"""The front's gRPC relay (serve/grpc_front.py) in front of a gRPC server of grpcio's on its Unix socket (what
tritonserver would be), reached with grpcio's client: the methods Triton leaves open pass; the restricted ones pass
only with the key, which the server behind never sees; a refused call is answered as Triton answers it and leaves the
connection usable (its HPACK contexts and flow-control windows intact); messages pass byte for byte."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from tritonize.access import GRPC_KEY_HEADER, GRPC_REFUSAL, ControlKey

SERVICE = "inference.GRPCInferenceService"


class Backend:
    """Echoes each message; records the metadata of every call it gets."""

    def __init__(self, path):
        self.calls: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        handlers = {name: grpc.unary_unary_rpc_method_handler(self._echo(name)) for name in
                    ("ServerLive", "ModelInfer", "RepositoryIndex", "ModelStatistics")}
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(self._stream("ModelStreamInfer"))
        handlers["SystemSharedMemoryRegister"] = grpc.stream_stream_rpc_method_handler(
            self._stream("SystemSharedMemoryRegister"))
        self.server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", -1),
                                                                          ("grpc.max_send_message_length", -1)])
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self.server.add_insecure_port(f"unix:{path}")
        self.server.start()

    def _record(self, name, context):
        with self.lock:
            self.calls.append((name, dict(context.invocation_metadata())))

    def _echo(self, name):
        def echo(request, context):
            self._record(name, context)
            return request
        return echo

    def _stream(self, name):
        def stream(requests, context):
            self._record(name, context)
            yield from requests
        return stream


@pytest.fixture
def rig(tmp_path):
    """(a channel to the front, the backend, the key)."""
    from tritonize.serve.front import Front, Upstream
    from tritonize.serve.process import choose_ports

    upstream = Upstream(tmp_path)
    backend = Backend(upstream.grpc)
    key = ControlKey.generate()
    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), upstream, key=key)
    front.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{ports.grpc}", options=[("grpc.max_receive_message_length", -1),
                                                                         ("grpc.max_send_message_length", -1)])
    yield channel, backend, key
    channel.close()
    front.stop()
    backend.server.stop(None)


def _call(channel, method, payload=b"x", key=None, other=()):
    metadata = ([(GRPC_KEY_HEADER, key)] if key else []) + list(other)
    return channel.unary_unary(f"/{SERVICE}/{method}")(payload, metadata=metadata, timeout=10)


def test_open_methods_pass_and_restricted_ones_want_the_key(rig):
    channel, backend, key = rig
    assert _call(channel, "ServerLive", b"live") == b"live"
    for wrong in (None, "not-the-key-but-long-enough", key.value + "x"):
        with pytest.raises(grpc.RpcError) as refused:
            _call(channel, "RepositoryIndex", key=wrong)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and refused.value.details() == GRPC_REFUSAL
    assert [name for name, _ in backend.calls] == ["ServerLive"]
    assert _call(channel, "RepositoryIndex", b"index", key=key.value) == b"index"
    assert _call(channel, "ServerLive", key=key.value, other=[("x-other", "kept")]) == b"x"
    assert [name for name, _ in backend.calls] == ["ServerLive", "RepositoryIndex", "ServerLive"]
    assert not [m for _, m in backend.calls if GRPC_KEY_HEADER in m]  # the key never goes on
    assert backend.calls[-1][1]["x-other"] == "kept"


def test_refusals_and_calls_interleaved_on_one_connection(rig):
    """Each refused header block is decoded and not passed on: the HPACK contexts on either side stay in step (a
    desync would garble the next call's headers), call after call, with headers that go into the tables."""
    channel, backend, key = rig
    for i in range(60):
        extra = [("x-request", f"r{i % 7}")]
        if i % 3 == 0:
            with pytest.raises(grpc.RpcError):
                _call(channel, "ModelStatistics", other=extra)
        else:
            assert _call(channel, "ModelInfer", b"%d" % i, key=key.value if i % 2 else None, other=extra) == b"%d" % i
    assert len(backend.calls) == 40 and all(m["x-request"].startswith("r") for _, m in backend.calls)


def test_messages_pass_byte_for_byte(rig):
    channel, _, _ = rig
    payload = bytes(range(256)) * (5 * 2**20 // 256)  # a batch-8 request's size
    assert _call(channel, "ModelInfer", payload) == payload
    stream = channel.stream_stream(f"/{SERVICE}/ModelStreamInfer")
    assert list(stream(iter([b"a" * 100_000, b"b", payload]), timeout=10)) == [b"a" * 100_000, b"b", payload]


def test_a_refused_stream_gives_its_window_back(rig):
    """A client streaming into a refused call has its DATA dropped: the front returns the connection's flow-control
    window for them, or the connection would stall after 64 KiB."""
    channel, backend, key = rig
    register = channel.stream_stream(f"/{SERVICE}/SystemSharedMemoryRegister")
    for _ in range(5):
        with pytest.raises(grpc.RpcError) as refused:
            list(register(iter([b"z" * 200_000] * 3), timeout=10))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _call(channel, "ModelInfer", b"y" * 300_000, key=key.value) == b"y" * 300_000
    assert list(register(iter([b"ok"]), metadata=[(GRPC_KEY_HEADER, key.value)], timeout=10)) == [b"ok"]


class _Collect:
    """A stand-in for a StreamWriter: what was written."""

    def __init__(self):
        self.data = bytearray()

    def write(self, data):
        self.data += data


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    from tritonize.serve.grpc_front import _header

    found, pos = [], 0
    while pos < len(data):
        length, kind, flags, stream = _header(data, pos)
        found.append((kind, flags, stream, bytes(data[pos + 9:pos + 9 + length])))
        pos += 9 + length
    return found


@pytest.mark.parametrize("ended", [False, True], ids=["client-still-sending", "client-done"])
def test_a_refusal_is_tritons_trailers_only_answer_and_leaves_the_clients_hpack_table_alone(ended):
    import hpack

    from tritonize.serve import grpc_front as g

    client, upstream = _Collect(), _Collect()
    relay = g.Relay(None, client, upstream, None)
    decoder = hpack.Decoder()  # the client's, holding what tritonserver's answers put in its table
    decoder.decode(hpack.Encoder().encode([("x-earlier", "kept")]))
    table = list(decoder.header_table.dynamic_entries)
    relay._refuse(7, g.END_STREAM if ended else 0)
    frames = _frames(client.data)
    kind, flags, stream, block = frames[0]
    assert (kind, flags, stream) == (g.HEADERS, g.END_HEADERS | g.END_STREAM, 7)
    assert decoder.decode(block) == [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "14"),
                                     ("grpc-message", GRPC_REFUSAL)]
    assert list(decoder.header_table.dynamic_entries) == table and upstream.data == b""
    if ended:
        assert len(frames) == 1 and 7 not in relay.refused
    else:
        assert frames[1] == (g.RST_STREAM, 0, 7, bytes(4)) and len(frames) == 2 and 7 in relay.refused


def test_the_refusal_message_is_percent_encoded_as_grpc_wants():
    from tritonize.serve.grpc_front import _percent

    assert _percent("a b%c\né~") == b"a b%25c%0A%C3%A9~"


def test_a_frames_length_takes_its_three_bytes():
    from tritonize.serve.grpc_front import DATA, _header, frame

    for size in (0, 255, 256, 300, 70_000):
        assert _header(frame(DATA, 1, 3, b"x" * size), 0) == (size, DATA, 1, 3)


class _Front:
    def __init__(self, key: str | None):
        self.key = key

    def authorized(self, value):
        return self.key is None or value == self.key.encode()


class _Connection:
    busy = False


def _relay(key: str | None = "k" * 20):
    from tritonize.serve import grpc_front as g

    client, upstream = _Collect(), _Collect()
    return g.Relay(_Front(key), client, upstream, _Connection()), client, upstream


def _request(path: str, extra=(), encoder=None):
    import hpack

    return (encoder or hpack.Encoder()).encode([(":method", "POST"), (":scheme", "http"), (":path", path),
                                                (":authority", "x"), *extra])


def test_a_header_block_in_pieces_padded_and_prioritized_goes_on_whole_and_without_the_key():
    import hpack

    from tritonize.serve import grpc_front as g

    relay, client, upstream = _relay()
    block = _request(f"/{SERVICE}/RepositoryIndex", [(GRPC_KEY_HEADER, "k" * 20), ("x-a", "b")])
    first = bytes([3]) + bytes(5) + block[:10] + b"\0\0\0"  # pad length 3, priority (5 bytes), padding
    relay._special(g.HEADERS, g.PADDED | g.PRIORITY_FLAG, 1, first)
    assert upstream.data == b"" and relay.block is not None
    relay._special(g.CONTINUATION, 0, 1, block[10:20])
    relay._special(g.CONTINUATION, g.END_HEADERS, 1, block[20:])
    (kind, flags, stream, passed), = _frames(upstream.data)
    assert (kind, flags, stream) == (g.HEADERS, g.END_HEADERS, 1) and relay.open == {1} and relay.block is None
    assert hpack.Decoder().decode(passed) == [(":method", "POST"), (":scheme", "http"),
                                              (":path", f"/{SERVICE}/RepositoryIndex"), (":authority", "x"), ("x-a", "b")]
    with pytest.raises(g.ProtocolError):
        relay._special(g.CONTINUATION, g.END_HEADERS, 3, b"")  # no block open
    relay._special(g.HEADERS, 0, 3, _request("/x"))
    with pytest.raises(g.ProtocolError):
        relay._special(g.DATA, 0, 3, b"x")  # a block interrupted


@pytest.mark.parametrize("case", ["no key", "wrong key", "two keys", "two paths"])
def test_what_is_refused_goes_nowhere_and_what_follows_on_its_stream_is_dropped(case):
    from tritonize.serve import grpc_front as g

    relay, client, upstream = _relay()
    extra = {"no key": [], "wrong key": [(GRPC_KEY_HEADER, "x" * 20)],
             "two keys": [(GRPC_KEY_HEADER, "k" * 20), (GRPC_KEY_HEADER, "k" * 20)],
             "two paths": [(":path", f"/{SERVICE}/ModelInfer"), (GRPC_KEY_HEADER, "x" * 20)]}[case]
    relay._special(g.HEADERS, g.END_HEADERS, 5, _request(f"/{SERVICE}/ModelStatistics", extra))
    assert upstream.data == b"" and 5 in relay.refused and relay.open == set()
    client.data.clear()
    relay._special(g.DATA, 0, 5, b"x" * 1000)
    assert _frames(client.data) == [(g.WINDOW_UPDATE, 0, 0, (1000).to_bytes(4, "big"))]
    relay._special(g.WINDOW_UPDATE, 0, 5, bytes(4))
    relay._special(g.DATA, g.END_STREAM, 5, b"")
    assert 5 not in relay.refused and upstream.data == b""


def test_an_open_method_or_no_key_set_passes_and_the_servers_settings_are_followed():
    import hpack

    from tritonize.serve import grpc_front as g

    relay, _, upstream = _relay(key=None)
    relay._settings(bytes.fromhex("0001 00000000 0005 00004000".replace(" ", "")))  # table 0, frames 16384
    assert relay.encoder.header_table_size == 0 and relay.decoder.max_allowed_table_size == 0
    relay.frame_size = 20
    client_encoder = hpack.Encoder()
    client_encoder.header_table_size = 0  # as the client does once it has tritonserver's SETTINGS
    relay._special(g.HEADERS, g.END_HEADERS | g.END_STREAM, 1, _request(f"/{SERVICE}/ModelStatistics",
                                                                        encoder=client_encoder))
    frames = _frames(upstream.data)
    assert [f[0] for f in frames] == [g.HEADERS] + [g.CONTINUATION] * (len(frames) - 1) and len(frames) > 1
    assert frames[0][1] == g.END_STREAM and frames[-1][1] == g.END_HEADERS and all(len(f[3]) <= 20 for f in frames)
    assert all(f[1] == 0 for f in frames[1:-1])
    assert hpack.Decoder().decode(b"".join(f[3] for f in frames))[2] == (":path", f"/{SERVICE}/ModelStatistics")
    relay._special(g.RST_STREAM, 0, 1, bytes(4))  # the client ends the call: passed on, no longer open
    assert relay.open == set() and _frames(upstream.data)[-1] == (g.RST_STREAM, 0, 1, bytes(4))


class _Drained(_Collect):
    """A StreamWriter stand-in that counts its writes."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, data):
        super().write(data)
        self.writes += 1

    async def drain(self):
        pass


def _through(step, chunks: list[bytes]) -> None:
    """Run `step` (a relay's from_client or from_server) on a reader whose reads give `chunks`, one each."""
    import asyncio

    class Reader:
        async def read(self, _n):
            return chunks.pop(0) if chunks else b""

    asyncio.run(step(Reader()))


def test_the_servers_frames_go_to_the_client_whole_and_are_noted():
    """Frames cut anywhere by the reads reach the client as whole frames (the front's own go between them); the
    server's SETTINGS are followed, its ACK of the client's not; a stream ends with END_STREAM or RST_STREAM."""
    from tritonize.serve import grpc_front as g

    relay, _, _ = _relay()
    relay.client = _Drained()
    relay.open = {1, 3, 5, 7, 9}
    relay.connection.busy = True
    # Read 2 bytes off, setting 3 (max streams) would be a setting 5 (frame size) of 0x00010001; the frame after the
    # SETTINGS, read on as settings, would set the frame size to 0x100.
    settings = g.frame(g.SETTINGS, 0, 0, bytes.fromhex("0005 00008000 0003 00050001 0001 00000800".replace(" ", "")))
    frames = [settings, g.frame(g.DATA, 0, 0x500, b"\0\1\0" + b"p" * 10),
              g.frame(g.SETTINGS, g.ACK, 0, bytes.fromhex("000500004000")),
              g.frame(g.HEADERS, g.END_HEADERS, 1, b"h" * 30), g.frame(g.DATA, 0, 1, b"d" * 100),
              g.frame(g.DATA, g.END_STREAM, 1, b""), g.frame(g.HEADERS, g.END_HEADERS | g.END_STREAM, 3, b"t"),
              g.frame(g.HEADERS, g.END_HEADERS, 9, b"h"), g.frame(g.DATA, 0, 9, b"d"),
              g.frame(g.RST_STREAM, 0, 5, bytes(4)), g.frame(g.PING, 0, 0, bytes(8)), g.frame(g.SETTINGS, g.ACK, 0)]
    data = b"".join(frames)
    cuts = [0, 5, 150, 160, 161, 200, len(data) - 9, len(data)]
    _through(relay.from_server, [data[a:b] for a, b in zip(cuts, cuts[1:])])
    assert bytes(relay.client.data) == data and _frames(relay.client.data) == _frames(data)
    assert relay.client.writes <= len(cuts) - 1
    assert relay.frame_size == 0x8000 and relay.encoder.header_table_size == 0x800
    assert relay.decoder.max_allowed_table_size == 0x800
    assert relay.open == {7, 9} and relay.connection.busy is True
    relay.open.clear()
    _through(relay.from_server, [g.frame(g.PING, 0, 0, bytes(8))])
    assert relay.connection.busy is False


def test_each_write_to_the_client_ends_on_a_frame():
    from tritonize.serve import grpc_front as g

    relay, _, _ = _relay()
    writes = []

    class Writer(_Drained):
        def write(self, data):
            writes.append(bytes(data))
            super().write(data)

    relay.client = Writer()
    data = g.frame(g.DATA, 0, 1, b"a" * 50) + g.frame(g.DATA, 0, 1, b"b" * 50)
    _through(relay.from_server, [data[:30], data[30:70], data[70:]])
    assert writes == [data[:59], data[59:]]


def test_the_clients_runs_pass_unchanged_and_its_header_blocks_are_taken_out():
    """from_client: the frames around a header block go on as they came, in the order they came, whatever the reads'
    cuts; the block goes on re-encoded (here, without the key); a stream refused has its frames dropped."""
    import hpack

    from tritonize.serve import grpc_front as g

    relay, client, _ = _relay()
    relay.upstream = _Drained()
    ping, window = g.frame(g.PING, 0, 0, bytes(8)), g.frame(g.WINDOW_UPDATE, 0, 0, (5).to_bytes(4, "big"))
    allowed = _request(f"/{SERVICE}/ModelInfer", [(GRPC_KEY_HEADER, "k" * 20)])
    refused = _request(f"/{SERVICE}/RepositoryIndex")
    data = (g.frame(g.SETTINGS, 0, 0, b"") + ping + g.frame(g.HEADERS, g.END_HEADERS, 1, allowed) +
            g.frame(g.DATA, g.END_STREAM, 1, b"m" * 70) + window + g.frame(g.HEADERS, g.END_HEADERS, 3, refused) +
            g.frame(g.DATA, 0, 3, b"n" * 40) + ping)
    _through(relay.from_client, [data[i:i + 23] for i in range(0, len(data), 23)])
    passed = _frames(relay.upstream.data)
    assert [(k, f, s) for k, f, s, _ in passed] == [(g.SETTINGS, 0, 0), (g.PING, 0, 0), (g.HEADERS, g.END_HEADERS, 1),
                                                    (g.DATA, g.END_STREAM, 1), (g.WINDOW_UPDATE, 0, 0), (g.PING, 0, 0)]
    assert hpack.Decoder().decode(passed[2][3])[2:] == [(":path", f"/{SERVICE}/ModelInfer"), (":authority", "x")]
    assert passed[3][3] == b"m" * 70 and relay.open == {1} and relay.connection.busy is True
    answered = _frames(client.data)
    assert [(k, s) for k, _, s, _ in answered] == [(g.HEADERS, 3), (g.RST_STREAM, 3), (g.WINDOW_UPDATE, 0)]
    assert answered[2][3] == (40).to_bytes(4, "big") and relay.refused == {3: None}


def test_refused_streams_are_remembered_up_to_a_bound():
    from tritonize.serve import grpc_front as g

    relay, _, _ = _relay()
    for stream in range(1, 2 * g.MAX_REFUSED + 10, 2):
        relay._refuse(stream, 0)
    assert len(relay.refused) == g.MAX_REFUSED and next(iter(relay.refused)) == 11  # 1, 3, 5, 7, 9 forgotten


def test_a_last_frame_without_payload_is_passed_at_once_and_an_endless_header_block_is_refused():
    from tritonize.serve import grpc_front as g
    from tritonize.serve.front import MAX_HEAD

    relay, _, _ = _relay()
    relay.upstream = _Drained()
    ack = g.frame(g.SETTINGS, g.ACK, 0, b"")
    _through(relay.from_client, [ack])
    assert bytes(relay.upstream.data) == ack
    relay, _, _ = _relay()
    relay.upstream = _Drained()
    opened = g.frame(g.HEADERS, 0, 1, _request("/x")[:5])
    with pytest.raises(g.ProtocolError):  # a CONTINUATION announcing more than a head may hold
        _through(relay.from_client, [opened + g._FRAME.pack((MAX_HEAD + 1) >> 8, (MAX_HEAD + 1) & 0xFF, g.CONTINUATION, 0, 1)])


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A front whose gRPC port leads to a Unix socket that this test accepts on itself: (front, listener)."""
    import socket

    from tritonize.serve import front as front_module
    from tritonize.serve.front import Front, Upstream
    from tritonize.serve.process import choose_ports

    monkeypatch.setattr(front_module, "HEAD_TIMEOUT_S", 1.0)
    upstream = Upstream(tmp_path)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(upstream.grpc))
    listener.listen(8)
    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), upstream)
    front.start()
    yield front, listener
    front.stop()
    listener.close()


def test_a_client_that_sends_no_preface_is_closed_after_the_head_timeout(bare):
    import socket
    import time

    front, listener = bare
    with socket.create_connection(("127.0.0.1", front.ports[1]), timeout=10) as client:
        started = time.monotonic()
        assert client.recv(100) == b"" and time.monotonic() - started < 5


def test_when_tritonserver_goes_away_the_client_is_closed(bare):
    import socket

    from tritonize.serve.grpc_front import PREFACE

    front, listener = bare
    with socket.create_connection(("127.0.0.1", front.ports[1]), timeout=10) as client:
        client.sendall(PREFACE)
        server, _ = listener.accept()
        server.settimeout(10)
        assert server.recv(100) == PREFACE
        server.close()  # tritonserver died: the front ends the client's connection too
        assert client.recv(100) == b""
