"""The front's gRPC port (serve/front.py): HTTP/2 relayed frame by frame between a client and tritonserver's gRPC
socket. Frames are read with python-hyper's hyperframe (the frame layer of the h2 library) and header blocks with its
hpack. Messages are never read: DATA frames and the frames of the connection pass on as they came (a frame's header
read, its payload passed in the pieces the reads give, uncopied). Only the client's header blocks are taken whole,
decoded and encoded again toward tritonserver:

- the control key's header (`triton-grpc-protocol-tritonize-control-key`, in any case) is taken out, so tritonserver
  never sees it;
- a call of a restricted method (access.py) without the key never reaches tritonserver: the front answers it as
  Triton would (UNAVAILABLE, "This protocol is restricted, expecting header ..."), in a trailers-only response
  encoded without touching the client's HPACK table, ends the stream (RST_STREAM NO_ERROR, RFC 9113 8.1), drops what
  the client still sends on it and gives the connection's flow-control window back for it.

Re-encoding every client header block keeps the two HPACK contexts (client to front, front to tritonserver) each
consistent when a refused block is not passed on; the table size and frame size tritonserver announces in its
SETTINGS are followed (a client frame over that size ends the connection, as it would at tritonserver). A client
that breaks the framing (a header block interrupted, bad padding, a PUSH_PROMISE, a frame on the wrong stream) has
its connection closed: what tritonserver would read differently never reaches it. tritonserver's frames to the client
are passed in whole frames, so that the front's own frames fall between them.
"""

from __future__ import annotations

import asyncio

import hpack
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tritonize.access import GRPC_KEY_HEADER, GRPC_REFUSAL, grpc_method_open
from tritonize.serve import front_common as common  # its timeouts read when used: the tests shorten them
from tritonize.serve.front_common import CLOSE, HEAD, MAX_HEAD, within

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER = 9  # bytes of a frame's header
DEFAULT_FRAME_SIZE = 16384  # RFC 9113's initial SETTINGS_MAX_FRAME_SIZE
READ = 2**20
MAX_REFUSED = 1024  # refused streams remembered (to drop what the client still sends on them)
UNAVAILABLE = b"14"
_KEY = GRPC_KEY_HEADER.encode()


class ProtocolError(Exception):
    """The client broke HTTP/2 in a way the front cannot relay; the connection is closed."""


def read_header(header) -> tuple[Frame, int]:
    """A frame's 9-byte header: the frame (its body not read yet) and its payload's length."""
    try:
        return Frame.parse_frame_header(header)
    except HyperframeError as e:  # a frame on a stream its type forbids
        raise ProtocolError(str(e)) from None


class GrpcConnection:
    """A client connection to the gRPC port (serve/front.py's handler): parked until the connection preface is in, then
    relayed over an asyncio transport (over TLS, the handshake first)."""

    refuses = False  # HTTP/2 has no answer to a connection that never began: it is closed
    first = HEAD  # the preface is due within HEAD_TIMEOUT_S of the connection

    def __init__(self, front, connection):
        self.front, self.connection, self.data = front, connection, bytearray()
        self.waits = front.tls_context is None

    def feed(self, data: bytes) -> bool:
        self.data += data
        return not data or len(self.data) >= len(PREFACE) or not PREFACE.startswith(self.data)

    def started(self) -> bool:
        return True

    def close(self) -> None:
        pass

    async def serve(self) -> str:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_HEAD)
        protocol = asyncio.StreamReaderProtocol(reader)
        sock, self.connection.sock = self.connection.sock, None  # the transport's from here on
        tls = self.front.tls_context
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=tls,
                                                          ssl_handshake_timeout=common.HEAD_TIMEOUT_S if tls else None)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        reader.feed_data(bytes(self.data))
        try:
            await relay(self.front, reader, writer, self.connection)
        finally:
            writer.close()
        return CLOSE


async def relay(front, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection) -> None:
    """One client connection, relayed over one connection to tritonserver until either side ends it."""
    try:
        if await within(reader.readexactly(len(PREFACE)), common.HEAD_TIMEOUT_S) != PREFACE:
            return
    except (asyncio.TimeoutError, asyncio.IncompleteReadError):
        return
    try:
        upstream_reader, upstream = await asyncio.open_unix_connection(str(front.upstream.grpc))
    except OSError:  # no tritonserver: the client sees the connection close (UNAVAILABLE) and retries
        return
    try:
        upstream.write(PREFACE)
        relay = Relay(front, writer, upstream, connection)
        tasks = [asyncio.ensure_future(relay.from_client(reader)), asyncio.ensure_future(relay.from_server(upstream_reader))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        upstream.close()


class Relay:
    """The state of one relayed connection: the two HPACK contexts, the streams refused and those open, and where the
    client's frames are: `take()` reads them as they come, `from_server()` passes tritonserver's back."""

    def __init__(self, front, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter, connection):
        self.front, self.client, self.upstream, self.connection = front, client, upstream, connection
        self.decoder, self.encoder = hpack.Decoder(), hpack.Encoder()
        self.frame_size = DEFAULT_FRAME_SIZE  # tritonserver's SETTINGS_MAX_FRAME_SIZE
        self.last_stream = 0
        self.open: set[int] = set()  # streams passed on and not yet ended by tritonserver
        self.refused: dict[int, None] = {}
        self.block: tuple[int, bool, bytearray] | None = None  # a header block waiting for its CONTINUATION frames
        self.held = bytearray()  # the start of a frame cut by a read: its header, or a header block frame's payload
        self.frame: HeadersFrame | ContinuationFrame | None = None  # the header block frame being held whole
        self.length = 0  # its payload's length
        self.passing = 0  # bytes of a frame's payload still to pass on as they come
        self.dropping = 0  # bytes of a refused stream's frame still to drop

    async def from_client(self, reader: asyncio.StreamReader) -> None:
        while data := await reader.read(READ):
            self.take(data)
            self.connection.busy = bool(self.open)
            await self.upstream.drain()

    def take(self, data: bytes) -> None:
        """The client's next bytes: frames passed on as they came (payloads in the reads' pieces), header block frames
        held until whole and read, a refused stream's frames dropped. `run`: where the bytes to pass on begin."""
        view, pos, run = memoryview(data), 0, 0
        try:
            while pos < len(view):
                if self.passing:
                    step = min(self.passing, len(view) - pos)
                    self.passing -= step
                    pos += step
                elif self.dropping:
                    self._pass(view[run:pos])
                    step = min(self.dropping, len(view) - pos)
                    self.dropping -= step
                    pos = run = pos + step
                elif self.frame is not None:
                    self._pass(view[run:pos])
                    step = min(HEADER + self.length - len(self.held), len(view) - pos)
                    self.held += view[pos:pos + step]
                    pos = run = pos + step
                    if len(self.held) == HEADER + self.length:
                        frame, self.frame = self.frame, None
                        self._header_block(frame, memoryview(bytes(self.held))[HEADER:])
                        self.held.clear()
                elif self.held or len(view) - pos < HEADER:  # a header cut by the read
                    self._pass(view[run:pos])
                    step = min(HEADER - len(self.held), len(view) - pos)
                    self.held += view[pos:pos + step]
                    pos = run = pos + step
                    if len(self.held) == HEADER:
                        header = bytes(self.held)
                        self.held.clear()
                        if self._frame(header):
                            self._pass(header)
                elif self._frame(view[pos:pos + HEADER]):
                    pos += HEADER
                else:
                    self._pass(view[run:pos])
                    pos = run = pos + HEADER
        finally:  # what came before a frame refused goes on too, as tritonserver would have read it
            self._pass(view[run:pos])

    def _pass(self, data) -> None:
        if data:
            self.upstream.write(data)

    def _frame(self, header) -> bool:
        """A client frame's header: True when the frame passes on as it came (its payload then passes too)."""
        frame, length = read_header(header)
        if length > self.frame_size:
            raise ProtocolError(f"a frame of {length} bytes, over the {self.frame_size} tritonserver takes")
        stream = frame.stream_id
        if self.block is not None and (not isinstance(frame, ContinuationFrame) or stream != self.block[0]):
            raise ProtocolError("a header block interrupted")
        if isinstance(frame, (HeadersFrame, ContinuationFrame)):
            if isinstance(frame, ContinuationFrame) and self.block is None:
                raise ProtocolError("CONTINUATION without HEADERS")
            if length:
                self.frame, self.length = frame, length
                self.held += header
            else:
                self._header_block(frame, memoryview(b""))
            return False
        if isinstance(frame, PushPromiseFrame):
            raise ProtocolError("PUSH_PROMISE from a client")  # RFC 9113 8.4; its header block would go unread
        if stream not in self.refused:
            if isinstance(frame, RstStreamFrame):  # the client ends a call
                self.open.discard(stream)
            self.passing = length
            return True
        # a refused stream's: dropped, its DATA's share of the connection's window given back
        if isinstance(frame, DataFrame) and length:
            self.client.write(WindowUpdateFrame(0, window_increment=length).serialize())
        self.dropping = length
        return False

    def _header_block(self, frame: HeadersFrame | ContinuationFrame, payload: memoryview) -> None:
        """A header block frame, whole: its fragment added to the block, which is read once it ends."""
        try:
            frame.parse_body(payload)  # padding and priority taken off
        except HyperframeError as e:
            raise ProtocolError(str(e)) from None
        if isinstance(frame, HeadersFrame):
            self.block = (frame.stream_id, "END_STREAM" in frame.flags, bytearray(frame.data))
        else:
            self.block[2].extend(frame.data)
        if len(self.block[2]) > MAX_HEAD:
            raise ProtocolError("header block too large")
        if "END_HEADERS" in frame.flags:
            stream, end_stream, block = self.block
            self.block = None
            self._headers(stream, end_stream, bytes(block))

    def _headers(self, stream: int, end_stream: bool, block: bytes) -> None:
        """A whole header block of the client's: passed on re-encoded without the key, or its stream refused."""
        try:
            headers = self.decoder.decode(block, raw=True)
        except hpack.HPACKError as e:
            raise ProtocolError(f"HPACK: {e}") from None
        if stream in self.refused:  # the trailers of a refused stream
            return
        keys = [value for name, value in headers if name.lower() == _KEY]
        kept = [(name, value) for name, value in headers if name.lower() != _KEY]
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
            flags = ["END_HEADERS"] if i == len(pieces) - 1 else []
            if i == 0:
                self.upstream.write(HeadersFrame(stream, piece, flags=flags + ["END_STREAM"] * end_stream).serialize())
            else:
                self.upstream.write(ContinuationFrame(stream, piece, flags=flags).serialize())

    def _refuse(self, stream: int, ended: bool) -> None:
        """Triton's answer to a restricted call without the key, from the front (a trailers-only response)."""
        block = hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(name, value) for name, value in (
            (b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", UNAVAILABLE),
            (b"grpc-message", _percent(GRPC_REFUSAL)))])
        self.client.write(HeadersFrame(stream, block, flags=["END_HEADERS", "END_STREAM"]).serialize())
        if not ended:
            self.client.write(RstStreamFrame(stream, error_code=0).serialize())
        self.refused[stream] = None  # whatever comes on it is dropped (the last MAX_REFUSED streams)
        while len(self.refused) > MAX_REFUSED:
            self.refused.pop(next(iter(self.refused)))

    async def from_server(self, reader: asyncio.StreamReader) -> None:
        """tritonserver's frames to the client, in whole frames; its SETTINGS followed, its ended streams noted."""
        held = b""
        while data := await reader.read(READ):
            data = held + data if held else data
            end = self.whole_frames(data)
            if end:
                self.client.write(memoryview(data)[:end])
                self.connection.busy = bool(self.open)
                await within(self.client.drain(), common.BODY_TIMEOUT_S)
            held = data[end:]

    def whole_frames(self, data: bytes) -> int:
        """Where the whole frames at the start of `data` end; the SETTINGS among them followed, the streams they end
        noted."""
        pos = 0
        while len(data) - pos >= HEADER:
            frame, length = read_header(memoryview(data)[pos:pos + HEADER])
            if len(data) < pos + HEADER + length:
                break
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                self._settings(frame, memoryview(data)[pos + HEADER:pos + HEADER + length])
            elif isinstance(frame, RstStreamFrame) or isinstance(frame, (HeadersFrame, DataFrame)) and \
                    "END_STREAM" in frame.flags:
                self.open.discard(frame.stream_id)
            pos += HEADER + length
        return pos

    def _settings(self, frame: SettingsFrame, payload: memoryview) -> None:
        try:
            frame.parse_body(payload)
        except HyperframeError as e:
            raise ProtocolError(str(e)) from None
        for setting, value in frame.settings.items():
            if setting == SettingsFrame.HEADER_TABLE_SIZE:  # tritonserver's decoder table: our encoder's bound, the
                self.encoder.header_table_size = value  # client's encoder's too (it gets these SETTINGS)
                self.decoder.max_allowed_table_size = value
            elif setting == SettingsFrame.MAX_FRAME_SIZE:
                self.frame_size = value


def _percent(message: str) -> bytes:
    """grpc-message's percent-encoding (gRPC's PROTOCOL-HTTP2: bytes outside 0x20-0x7E, and %)."""
    return "".join(c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
                   for c in message).encode()
