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
    return channel.unary_unary(f"/{SERVICE}/{method}")(payload, metadata=metadata, timeout=30)


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
    assert list(stream(iter([b"a" * 100_000, b"b", payload]), timeout=30)) == [b"a" * 100_000, b"b", payload]


def test_a_refused_stream_gives_its_window_back(rig):
    """A client streaming into a refused call has its DATA dropped: the front returns the connection's flow-control
    window for them, or the connection would stall after 64 KiB."""
    channel, backend, key = rig
    register = channel.stream_stream(f"/{SERVICE}/SystemSharedMemoryRegister")
    for _ in range(5):
        with pytest.raises(grpc.RpcError) as refused:
            list(register(iter([b"z" * 200_000] * 3), timeout=30))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _call(channel, "ModelInfer", b"y" * 300_000, key=key.value) == b"y" * 300_000
    assert list(register(iter([b"ok"]), metadata=[(GRPC_KEY_HEADER, key.value)], timeout=30)) == [b"ok"]
