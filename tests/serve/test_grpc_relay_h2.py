"""The gRPC relay (serve/grpc_front.py) reads a client's frames as h2 does: generated client byte streams (calls
with header blocks in pieces, padding and priority, bodies, the connection's frames, and what a smuggler would try:
CONTINUATION interleaved or on another stream, padding lengths past the payload, a priority cut short, oversized
frames, PUSH_PROMISE, frames on stream 0, broken HPACK, the key in another case or in a CONTINUATION) go through
`Relay.take` in random read sizes. h2's own server state machine reads the same stream (the reference), and reads
what the relay passed on (what tritonserver gets). Everything the relay passes is what h2 read from the client, minus
the key's header and the calls refused for want of it; nothing of a refused call goes on; the client is told of
each refusal and given its DATA's flow-control window back; and the relay ends the connection only where h2 would."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import pytest
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import Frame
from hypothesis import given, strategies as st

from tritonize.access import GRPC_KEY_HEADER, OPEN_GRPC_METHODS
from tritonize.serve import grpc_front as g

SERVICE = "inference.GRPCInferenceService"
KEY = b"the-control-key-0123456789"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x4, 0x8, 0x20


def raw(kind: int, flags: int, stream: int, payload: bytes = b"", length: int | None = None) -> bytes:
    return (len(payload) if length is None else length).to_bytes(3, "big") + bytes([kind, flags]) + \
        stream.to_bytes(4, "big") + payload


def split(data: bytes) -> list[bytes]:
    """`data` cut into its frames (by hyperframe's reading of each header)."""
    frames, pos = [], 0
    while pos < len(data):
        _, length = Frame.parse_frame_header(memoryview(data)[pos:pos + 9])
        frames.append(data[pos:pos + 9 + length])
        pos += 9 + length
    return frames


def h2_reads(frames: list[bytes]) -> tuple[list, bool]:
    """What h2, as a server, reads from a client that sends the preface then `frames`: its events up to the frame it
    refuses (and whether it refused one)."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=False, header_encoding=None, validate_inbound_headers=False, normalize_inbound_headers=False))
    server.initiate_connection()
    events = server.receive_data(g.PREFACE)
    for frame in frames:
        try:
            events += server.receive_data(frame)
        except (h2.exceptions.ProtocolError, HyperframeError):
            return events, True
    return events, False


class _Front:
    def authorized(self, value):
        return value == KEY


class _Collect:
    def __init__(self):
        self.data = bytearray()

    def write(self, data):
        self.data += data


class _Connection:
    busy = False


def _without_key(headers):
    return [(n, v) for n, v in headers if n.lower() != GRPC_KEY_HEADER.encode()]


def _refused(headers) -> bool:
    """Triton's rule as the relay applies it (access.py): an open method, or exactly one key header with the key."""
    paths = [v for n, v in headers if n == b":path"]
    keys = [v for n, v in headers if n.lower() == GRPC_KEY_HEADER.encode()]
    return not (len(paths) == 1 and paths[0].decode() in OPEN_GRPC_METHODS) and keys != [KEY]


def project(events, refused: set[int] | None = None) -> list[tuple]:
    """Events as tritonserver would act on them. `refused`: None for what the relay passed on; for the client's
    stream, the set to fill with the calls refused, whose events are left out as the relay leaves them out."""
    out, requested = [], set()
    for e in events:
        stream = e.frame.stream_id if isinstance(e, h2.events.UnknownFrameReceived) else getattr(e, "stream_id", 0)
        if isinstance(e, h2.events.RequestReceived) and refused is not None and stream not in requested:
            requested.add(stream)
            if _refused(e.headers):
                refused.add(stream)
        if refused is not None and stream in refused:
            continue
        if isinstance(e, (h2.events.RequestReceived, h2.events.TrailersReceived)):
            out.append((type(e).__name__, stream, _without_key(e.headers)))
        elif isinstance(e, h2.events.DataReceived):
            out.append(("data", stream, e.data, e.flow_controlled_length))
        elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.WindowUpdated)):
            out.append((type(e).__name__, stream, getattr(e, "error_code", None), getattr(e, "delta", None)))
        elif isinstance(e, h2.events.PingReceived):
            out.append(("ping", e.ping_data))
        elif isinstance(e, h2.events.RemoteSettingsChanged):
            out.append(("settings", {k: v.new_value for k, v in e.changed_settings.items()}))
        elif isinstance(e, h2.events.UnknownFrameReceived):
            out.append(("unknown", e.frame.type))
        elif not isinstance(e, h2.events.PriorityUpdated):  # the relay re-frames HEADERS without their priority
            out.append((type(e).__name__,))
    return out


# The client's frames. Calls are mostly well formed; at most one thing in a stream is what a smuggler would try.
FAULTS = ["none"] * 6 + ["interleaved", "continuation-of-another-stream", "padding-over-payload", "priority-cut",
                         "hpack", "oversized", "continuation-alone", "headers-on-stream-0", "push-promise",
                         "data-on-stream-0", "short-ping"]


@st.composite
def client_frames(draw) -> tuple[list[bytes], str]:
    encoder = hpack.Encoder()
    fault = draw(st.sampled_from(FAULTS))
    frames, stream = [raw(SETTINGS, 0, 0, b"")], 1
    calls = draw(st.integers(1, 5))
    faulty = draw(st.integers(0, calls - 1))
    for call in range(calls):
        here = fault if call == faulty else "none"
        for _ in range(draw(st.integers(0, 2))):  # the connection's frames between calls
            frames.append(draw(st.sampled_from([
                raw(PING, 0, 0, b"12345678"), raw(WINDOW_UPDATE, 0, 0, (1000).to_bytes(4, "big")),
                raw(PRIORITY, 0, stream + 10, (1).to_bytes(4, "big") + b"\x10"), raw(0x20, 0x3, 7, b"unknown"),
                raw(SETTINGS, 0, 0, bytes.fromhex("000300000064"))])))  # max concurrent streams 100
        if here in ("oversized", "continuation-alone", "headers-on-stream-0", "push-promise", "data-on-stream-0",
                    "short-ping"):
            frames.append({"oversized": raw(DATA, 0, 1, b"x" * 16385),
                           "continuation-alone": raw(CONTINUATION, END_HEADERS, stream, b"\x82"),
                           "headers-on-stream-0": raw(HEADERS, END_HEADERS, 0, b"\x82"),
                           "push-promise": raw(PUSH_PROMISE, END_HEADERS, 1, bytes([0, 0, 0, 2, 0x82])),
                           "data-on-stream-0": raw(DATA, 0, 0, b"x"),
                           "short-ping": raw(PING, 0, 0, b"1234567")}[here])
        path = draw(st.sampled_from([f"/{SERVICE}/ModelInfer", f"/{SERVICE}/ServerLive",
                                     f"/{SERVICE}/RepositoryIndex", f"/{SERVICE}/ModelStatistics"]))
        keys = draw(st.sampled_from([[], [(GRPC_KEY_HEADER, KEY)], [(GRPC_KEY_HEADER, b"not-the-key")],
                                     [(GRPC_KEY_HEADER.upper(), KEY)], [(GRPC_KEY_HEADER, KEY)] * 2,
                                     [("Triton-Grpc-Protocol-Tritonize-Control-Key", KEY)],
                                     [(":path", f"/{SERVICE}/ServerLive")]]))  # a second path
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
                   ("content-type", "application/grpc"), ("x-n", draw(st.text("abc", max_size=30)))]
        at = draw(st.integers(4, len(headers)))
        block = encoder.encode(headers[:at] + keys + headers[at:]) if here != "hpack" else b"\xff\xff\xff\xff\x0f"
        cuts = sorted(draw(st.lists(st.integers(0, len(block)), max_size=3)))
        if here in ("interleaved", "continuation-of-another-stream") and not cuts:
            cuts = [len(block) // 2]  # a CONTINUATION for the smuggler to use
        pieces = [block[a:b] for a, b in zip([0] + cuts, cuts + [len(block)])]
        body = draw(st.lists(st.binary(max_size=60), max_size=3))
        ending = draw(st.sampled_from(["data", "data", "reset", "trailers", "open"])) if body else "headers"
        flags = (END_STREAM if ending == "headers" else 0) | (END_HEADERS if len(pieces) == 1 else 0)
        payload = pieces[0]
        if draw(st.booleans()) or here == "priority-cut":
            flags |= PRIORITY_FLAG
            payload = (stream - 2 if stream > 2 else 0).to_bytes(4, "big") + bytes([draw(st.integers(0, 255))]) + \
                payload
            if here == "priority-cut":
                payload = payload[:3]
        # (hyperframe, and so h2, refuse padding that leaves no byte of payload, which RFC 9113 allows: not made)
        if payload and here != "priority-cut" and draw(st.booleans()) or here == "padding-over-payload":
            flags |= PADDED
            pad = draw(st.integers(0, 20))
            payload = bytes([pad + len(payload) + 1 if here == "padding-over-payload" else pad]) + payload + bytes(pad)
        frames.append(raw(HEADERS, flags, stream, payload))
        for i, piece in enumerate(pieces[1:], 1):
            if i == 1 and here == "interleaved":
                frames.append(draw(st.sampled_from([raw(PING, 0, 0, b"12345678"), raw(DATA, 0, stream, b"x"),
                                                    raw(HEADERS, END_HEADERS, stream + 2, b"\x82")])))
            on = stream + 2 if here == "continuation-of-another-stream" else stream
            frames.append(raw(CONTINUATION, END_HEADERS if i == len(pieces) - 1 else 0, on, piece))
        for i, data in enumerate(body):
            last = i == len(body) - 1 and ending == "data"
            if data and draw(st.booleans()):
                pad = draw(st.integers(0, 10))
                frames.append(raw(DATA, PADDED | (END_STREAM if last else 0), stream, bytes([pad]) + data + bytes(pad)))
            else:
                frames.append(raw(DATA, END_STREAM if last else 0, stream, data))
        if ending == "reset":
            frames.append(raw(RST_STREAM, 0, stream, (8).to_bytes(4, "big")))
        elif ending == "trailers":
            frames.append(raw(HEADERS, END_HEADERS | END_STREAM, stream,
                              encoder.encode([("x-trailer", "t")] + keys[:1])))
        stream += 2
    return frames, fault


@given(case=client_frames(), reads=st.lists(st.integers(1, 200), min_size=1, max_size=20))
def test_the_relay_reads_a_clients_frames_as_h2_does(case, reads):
    frames, fault = case
    stream = b"".join(frames)
    reference, h2_refused_one = h2_reads(frames)
    client, upstream = _Collect(), _Collect()
    relay = g.Relay(_Front(), client, upstream, _Connection())
    relay_refused_one, pos, i = False, 0, 0
    try:
        while pos < len(stream):
            relay.take(stream[pos:pos + reads[i % len(reads)]])
            pos += reads[i % len(reads)]
            i += 1
    except g.ProtocolError:
        relay_refused_one = True
    assert h2_refused_one == (fault != "none"), (fault, frames)
    # Where h2 refuses a frame the relay reads (a header block, or a frame's header), the relay ends the connection;
    # a frame it passes as it came (a PING of 7 bytes) goes on, and tritonserver refuses it as h2 does.
    assert relay_refused_one == (h2_refused_one and fault != "short-ping"), (fault, frames)
    passed, backend_refused_one = h2_reads(split(bytes(upstream.data)))
    refused: set[int] = set()
    assert project(passed) == project(reference, refused), (fault, frames)
    assert backend_refused_one == (h2_refused_one and not relay_refused_one), (fault, frames)

    answered = g.Relay(None, None, None, None)  # read back what the relay told the client
    told, windows = set(), 0
    for frame in split(bytes(client.data)):
        kind, stream_id = frame[3], int.from_bytes(frame[5:9], "big")
        if kind == HEADERS:
            assert dict(answered.decoder.decode(frame[9:]))["grpc-status"] == "14"
            told.add(stream_id)
        elif kind == WINDOW_UPDATE:
            windows += int.from_bytes(frame[9:13], "big")
    if relay_refused_one or not h2_refused_one:  # else the relay read on where h2 stopped (the short PING)
        assert told == refused, (fault, frames)
        assert windows == sum(e.flow_controlled_length for e in reference
                              if isinstance(e, h2.events.DataReceived) and e.stream_id in refused)


@pytest.mark.parametrize("where", ["in the HEADERS frame", "in a CONTINUATION"])
def test_the_key_in_a_continuation_or_in_another_case_is_read_as_h2_reads_it(where):
    encoder = hpack.Encoder()
    block = encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/RepositoryIndex"),
                            (":authority", "x"), (GRPC_KEY_HEADER.upper(), KEY)])
    cut = len(block) - 3 if where == "in a CONTINUATION" else len(block)
    frames = [raw(SETTINGS, 0, 0), raw(HEADERS, END_STREAM, 1, block[:cut]), raw(CONTINUATION, END_HEADERS, 1, block[cut:])]
    upstream = _Collect()
    g.Relay(_Front(), _Collect(), upstream, _Connection()).take(b"".join(frames))
    passed, _ = h2_reads(split(bytes(upstream.data)))
    (request,) = [e for e in passed if isinstance(e, h2.events.RequestReceived)]
    assert request.headers == [(b":method", b"POST"), (b":scheme", b"http"), (b":path", f"/{SERVICE}/RepositoryIndex".encode()),
                               (b":authority", b"x")]
