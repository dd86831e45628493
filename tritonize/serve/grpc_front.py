"""The front's gRPC port (serve/front.py): HTTP/2 relayed frame by frame between a client and tritonserver's gRPC
socket. Messages are never read: DATA frames and the frames of the connection pass as they came, in runs. Only the
client's header blocks are decoded (hpack, python-hyper's HPACK codec) and encoded again toward tritonserver:

- the control key's header (`triton-grpc-protocol-tritonize-control-key`) is taken out, so tritonserver never sees it;
- a call of a restricted method (access.py) without the key never reaches tritonserver: the front answers it as
  Triton would (UNAVAILABLE, "This protocol is restricted, expecting header ..."), in a trailers-only response
  encoded without touching the client's HPACK table, ends the stream (RST_STREAM NO_ERROR, RFC 9113 8.1), drops what
  the client still sends on it and gives the connection's flow-control window back for it.

Re-encoding every client header block keeps the two HPACK contexts (client to front, front to tritonserver) each
consistent when a refused block is not passed on; the table size and frame size tritonserver announces in its
SETTINGS are followed. tritonserver's frames to the client are passed in whole frames, so that the front's own
frames fall between them.
"""

from __future__ import annotations

import asyncio
import struct

import hpack

from tritonize.access import GRPC_KEY_HEADER, GRPC_REFUSAL, grpc_method_open

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x1, 0x5
NO_ERROR = 0
DEFAULT_FRAME_SIZE = 16384  # RFC 9113's initial SETTINGS_MAX_FRAME_SIZE
READ = 2**20
MAX_REFUSED = 1024  # refused streams remembered (to drop what the client still sends on them)
UNAVAILABLE = b"14"
_KEY = GRPC_KEY_HEADER.encode()
_FRAME = struct.Struct(">HBBBI")  # length (24 bits, as 16 + 8), type, flags, stream


class ProtocolError(Exception):
    """The client broke HTTP/2 in a way the front cannot relay; the connection is closed."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) >> 8, len(payload) & 0xFF, kind, flags, stream) + payload


def _header(buf: bytearray | bytes, pos: int) -> tuple[int, int, int, int]:
    high, low, kind, flags, stream = _FRAME.unpack_from(buf, pos)
    return (high << 8) | low, kind, flags, stream & 0x7FFFFFFF


async def relay(front, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection) -> None:
    """One client connection, relayed over one connection to tritonserver until either side ends it."""
    from tritonize.serve.front import HEAD_TIMEOUT_S

    try:
        upstream_reader, upstream = await asyncio.open_unix_connection(str(front.upstream.grpc))
    except OSError:  # no tritonserver: the client sees the connection close (UNAVAILABLE) and retries
        return
    try:
        if await asyncio.wait_for(reader.readexactly(len(PREFACE)), HEAD_TIMEOUT_S) != PREFACE:
            return
        upstream.write(PREFACE)
        relay = Relay(front, writer, upstream, connection)
        tasks = [asyncio.ensure_future(relay.from_client(reader)), asyncio.ensure_future(relay.from_server(upstream_reader))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        upstream.close()


class Relay:
    """The state of one relayed connection: the two HPACK contexts, the streams refused and those open."""

    def __init__(self, front, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter, connection):
        self.front, self.client, self.upstream, self.connection = front, client, upstream, connection
        self.decoder, self.encoder = hpack.Decoder(), hpack.Encoder()
        self.frame_size = DEFAULT_FRAME_SIZE  # tritonserver's SETTINGS_MAX_FRAME_SIZE
        self.last_stream = 0
        self.open: set[int] = set()  # streams passed on and not yet ended by tritonserver
        self.refused: dict[int, None] = {}
        self.block: tuple[int, int, bytearray] | None = None  # a header block waiting for its CONTINUATION frames

    async def from_client(self, reader: asyncio.StreamReader) -> None:
        from tritonize.serve.front import MAX_HEAD

        buf = bytearray()
        while data := await reader.read(READ):
            buf += data
            pos = run = 0
            while len(buf) - pos >= 9:
                length, kind, flags, stream = _header(buf, pos)
                end = pos + 9 + length
                if end > len(buf):
                    if self.block is not None and length > MAX_HEAD:
                        raise ProtocolError("header block too large")
                    break
                if self.block is None and kind not in (HEADERS, CONTINUATION, RST_STREAM) and stream not in self.refused:
                    pos = end  # passed on as it came, with the run it belongs to
                    continue
                if pos > run:
                    self.upstream.write(bytes(buf[run:pos]))
                self._special(kind, flags, stream, bytes(buf[pos + 9:end]))
                pos = run = end
            if pos > run:
                self.upstream.write(bytes(buf[run:pos]))
            del buf[:pos]
            self.connection.busy = bool(self.open)
            await self.upstream.drain()

    def _special(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        """A client frame that is not passed on in a run: a header block's, a RST_STREAM, or one of a refused stream."""
        from tritonize.serve.front import MAX_HEAD

        if self.block is not None and (kind != CONTINUATION or stream != self.block[0]):
            raise ProtocolError("a header block interrupted")
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]] if payload else b""
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self.block = (stream, flags, bytearray(payload))
        elif kind == CONTINUATION:
            if self.block is None:
                raise ProtocolError("CONTINUATION without HEADERS")
            self.block[2].extend(payload)
        elif stream not in self.refused:  # the client ends a call
            self.open.discard(stream)
            self.upstream.write(frame(kind, flags, stream, payload))
            return
        else:  # a refused stream's: dropped, its DATA's share of the connection's window given back
            if kind == DATA and payload:
                self.client.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload))))
            if kind == RST_STREAM or flags & END_STREAM and kind == DATA:
                self.refused.pop(stream, None)
            return
        if len(self.block[2]) > MAX_HEAD:
            raise ProtocolError("header block too large")
        if flags & END_HEADERS:
            stream, first_flags, block = self.block
            self.block = None
            self._headers(stream, first_flags & END_STREAM, bytes(block))

    def _headers(self, stream: int, end_stream: int, block: bytes) -> None:
        """A whole header block of the client's: passed on re-encoded without the key, or its stream refused."""
        try:
            headers = self.decoder.decode(block, raw=True)
        except hpack.HPACKError as e:
            raise ProtocolError(f"HPACK: {e}") from None
        if stream in self.refused:  # the trailers of a refused stream
            if end_stream:
                self.refused.pop(stream, None)
            return
        keys = [value for name, value in headers if name == _KEY]
        kept = [(name, value) for name, value in headers if name != _KEY]
        if stream > self.last_stream:  # a new call
            self.last_stream = stream
            paths = [value for name, value in headers if name == b":path"]
            if not (len(paths) == 1 and grpc_method_open(paths[0])) and \
                    not self.front.authorized(keys[0] if len(keys) == 1 else None):
                return self._refuse(stream, end_stream)
            self.open.add(stream)
        encoded = self.encoder.encode(kept)
        pieces = [encoded[i:i + self.frame_size] for i in range(0, len(encoded), self.frame_size)] or [b""]
        for i, piece in enumerate(pieces):
            last = END_HEADERS if i == len(pieces) - 1 else 0
            self.upstream.write(frame(HEADERS, last | end_stream, stream, piece) if i == 0 else
                                frame(CONTINUATION, last, stream, piece))

    def _refuse(self, stream: int, ended: int) -> None:
        """Triton's answer to a restricted call without the key, from the front (a trailers-only response)."""
        block = hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(name, value) for name, value in (
            (b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", UNAVAILABLE),
            (b"grpc-message", _percent(GRPC_REFUSAL)))])
        self.client.write(frame(HEADERS, END_HEADERS | END_STREAM, stream, block))
        if not ended:
            self.client.write(frame(RST_STREAM, 0, stream, struct.pack(">I", NO_ERROR)))
            self.refused[stream] = None
            while len(self.refused) > MAX_REFUSED:
                self.refused.pop(next(iter(self.refused)))

    async def from_server(self, reader: asyncio.StreamReader) -> None:
        """tritonserver's frames to the client, in whole frames; its SETTINGS followed, its ended streams noted."""
        from tritonize.serve.front import BODY_TIMEOUT_S

        buf = bytearray()
        while data := await reader.read(READ):
            buf += data
            pos = 0
            while len(buf) - pos >= 9:
                length, kind, flags, stream = _header(buf, pos)
                if len(buf) < pos + 9 + length:
                    break
                if kind == SETTINGS and not flags & ACK:
                    self._settings(bytes(buf[pos + 9:pos + 9 + length]))
                elif kind == RST_STREAM or kind in (HEADERS, DATA) and flags & END_STREAM:
                    self.open.discard(stream)
                pos += 9 + length
            if pos:
                self.client.write(bytes(buf[:pos]))
                del buf[:pos]
                self.connection.busy = bool(self.open)
                await asyncio.wait_for(self.client.drain(), BODY_TIMEOUT_S)

    def _settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            setting, value = struct.unpack_from(">HI", payload, i)
            if setting == SETTINGS_HEADER_TABLE_SIZE:  # tritonserver's decoder table: our encoder's bound, the
                self.encoder.header_table_size = value  # client's encoder's too (it gets these SETTINGS)
                self.decoder.max_allowed_table_size = value
            elif setting == SETTINGS_MAX_FRAME_SIZE:
                self.frame_size = value


def _percent(message: str) -> bytes:
    """grpc-message's percent-encoding (gRPC's PROTOCOL-HTTP2: bytes outside 0x20-0x7E, and %)."""
    return "".join(c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
                   for c in message).encode()
