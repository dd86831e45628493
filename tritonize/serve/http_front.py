"""The front's HTTP and metrics ports (serve/front.py holds their connections): each request read with h11 and passed
on to tritonserver's HTTP socket re-framed, under stricter rules than RFC 9112's, so that tritonserver's HTTP library
(libevhtp) frames every request exactly as the front did (tests/serve/test_front_framing.py holds the front against
libevhtp itself): header names are tokens; names, values and the target hold no control characters (nor bytes above
0x7e); one Content-Length; a chunked body is de-chunked and passed on with a Content-Length, its trailers dropped;
the target is a path with an optional query. A body sent as `application/x-www-form-urlencoded` loses that
Content-Type (Triton reads none): libevhtp parses such a body into two arrays of its size on the HTTP thread's stack,
and from about 4.2 MB the server dies (triton-inference-server/server#5840).

Bodies over MAX_BODY get 413, heads over MAX_HEAD 431, before any byte reaches tritonserver; 503 while no
tritonserver listens; a restricted API without the control key 403, as Triton words it. The metrics port serves
Triton's metrics followed by tritonize's own counters.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import re
from pathlib import Path

import h11

from tritonize.access import HTTP_REFUSAL, KEY_HEADER, http_api_open
from tritonize.serve import front_common as common  # its timeouts read when used: the tests shorten them
from tritonize.serve.front_common import CLOSE, IDLE, LINGER, MAX_HEAD, PARK, within

MAX_BODY = 64 * 2**20  # Triton's own --http-max-input-size default (25.06 on); 2.51 has no limit
MAX_BUFFERED = 4 * MAX_BODY  # chunked bodies held at once, all connections together
PIECE = 2**20  # bytes read at a time
METRICS_TIMEOUT_S = 10.0  # tritonserver's metrics; without them the port serves tritonize's own
FORM = b"application/x-www-form-urlencoded"
# Passed on to tritonserver as they came, and only these: the front frames the message itself.
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade",
               b"expect", b"content-length", KEY_HEADER.encode()}
_TARGET = re.compile(rb"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*(?:\?(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*)?")
_VALUE = re.compile(rb"[\x20-\x7e\t]*")
_METHODS = {b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH"}
_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            413: "Content Too Large", 431: "Request Header Fields Too Large", 501: "Not Implemented",
            502: "Bad Gateway", 503: "Service Unavailable"}


class Refused(Exception):
    """A request the front answers itself: the status and Triton's JSON error form."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@functools.lru_cache(maxsize=64)
def error_answer(status: int, message: str) -> bytes:
    """An error answer in Triton's form ({"error": ...}) that closes the connection."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def _h11_words(e: h11.RemoteProtocolError) -> str:
    if e.error_status_hint == 431:
        return f"the request line and headers are over {MAX_HEAD} bytes"
    return f"malformed request: {e}"


def checked(request: h11.Request) -> h11.Request:
    """`request`, once it is within the rules libevhtp reads as the front does (the module's docstring)."""
    if request.method not in _METHODS:
        raise Refused(405, f"method {request.method.decode()} is not one this server takes")
    names = {name for name, _ in request.headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        raise Refused(400, "ambiguous body length: Content-Length and Transfer-Encoding")
    if not _TARGET.fullmatch(request.target):
        raise Refused(400, "the request target must be a path (RFC 3986 characters), with an optional query")
    for name, value in request.headers:
        if not _VALUE.fullmatch(value):
            raise Refused(400, f"the value of header {name.decode()} holds a control character or a byte above 0x7e")
    return request


class HeadReader:
    """A client connection read with h11, one request at a time: `feed()` while parked (True once h11 has a head, an
    error or the end), the rest of a request read and its answer written by the task that serves it (`read()`,
    `write()`, each bounded by BODY_TIMEOUT_S). `front`: serve/front.py's Front (its loop, upstream, key check, log and
    the chunked bytes it holds); `connection`: its Connection (the socket, and `busy` while in a request)."""

    refuses = True  # answers 408 when a head does not come in time, 503 at the bound
    first = IDLE  # a new connection waits for its first byte as long as one between requests
    waits = True  # parked until its head is in

    def __init__(self, front, connection):
        self.front, self.connection = front, connection
        self.client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.event: object = h11.NEED_DATA
        self.fed = 0  # bytes given to h11 since this request began

    def feed(self, data: bytes) -> bool:
        self.fed += len(data)
        self.client.receive_data(data)
        return self._next()

    def _next(self) -> bool:
        try:
            self.event = self.client.next_event()
        except h11.RemoteProtocolError as e:
            self.event = e
        return self.event is not h11.NEED_DATA

    def started(self) -> bool:
        """Whether bytes of the next request are in (its head's deadline then runs)."""
        return bool(self.client.trailing_data[0])

    def request(self) -> h11.Request | None:
        """The request h11 found (checked), None when the client is done; Refused for a bad one."""
        event = self.event
        if isinstance(event, h11.RemoteProtocolError):
            raise Refused(event.error_status_hint, _h11_words(event))
        if not isinstance(event, h11.Request):  # ConnectionClosed, or PAUSED after a request that closes
            return None
        if self.fed - len(self.client.trailing_data[0]) > MAX_HEAD:  # h11 bounds only a head still incomplete
            raise Refused(431, f"the request line and headers are over {MAX_HEAD} bytes")
        return checked(event)

    def next_cycle(self) -> bool:
        """Ready for the client's next request; True when its whole head is already in (pipelined)."""
        self.client.start_next_cycle()
        self.fed = len(self.client.trailing_data[0])
        return self._next()

    async def read(self) -> bytes:
        try:
            return await within(self.front.loop.sock_recv(self.connection.sock, PIECE), common.BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise Refused(408, f"the request's body stalled for {common.BODY_TIMEOUT_S:g} s") from None

    async def write(self, data: bytes) -> None:
        """`data` to the client; a client that reads none of it for BODY_TIMEOUT_S is gone."""
        try:
            await within(self.front.loop.sock_sendall(self.connection.sock, data), common.BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ConnectionAbortedError from None  # the connection ends (front.py's _serve)

    async def refuse(self, refusal: Refused) -> str:
        await self.write(error_answer(refusal.status, str(refusal)))
        return LINGER

    def close(self) -> None:
        pass


class MetricsConnection(HeadReader):
    """GET /metrics: Triton's metrics (none while it restarts), then tritonize's."""

    async def serve(self) -> str:
        try:
            request = self.request()
        except Refused as refusal:
            return await self.refuse(refusal)
        if request is None:
            return CLOSE
        if request.target.split(b"?")[0] != b"/metrics":
            return await self.refuse(Refused(404, "the metrics are at /metrics"))
        try:
            triton = await within(_get(self.front.upstream.metrics, "/metrics"), METRICS_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            triton = b""
        body = triton + self.front.samples().encode()
        await self.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        return CLOSE


class HttpConnection(HeadReader):
    """One client's connection, passed on request by request over one connection to tritonserver (kept while the
    client's is)."""

    def __init__(self, front, connection):
        super().__init__(front, connection)
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter, h11.Connection] | None = None

    async def serve(self) -> str:
        """The requests h11 has whole, in turn; PARK when the next is still to come."""
        try:
            while True:
                request = self.request()
                if request is None:
                    return CLOSE
                self.connection.busy = True
                await self._exchange(request)
                if self.client.our_state is not h11.DONE or self.client.their_state is not h11.DONE:
                    return CLOSE  # either side closes the connection
                if not self.next_cycle():
                    return PARK
        except Refused as refusal:
            return await self.refuse(refusal)

    def close(self) -> None:
        if self.upstream is not None:
            self.upstream[1].close()
            self.upstream = None

    async def _exchange(self, request: h11.Request) -> None:
        """Pass `request` on (its body as it comes) and its answer back."""
        headers = {name: value for name, value in request.headers}
        path = request.target.split(b"?")[0].decode()
        if not http_api_open(path) and not self.front.authorized(headers.get(KEY_HEADER.encode())):
            raise Refused(403, HTTP_REFUSAL)
        chunked = headers.get(b"transfer-encoding") is not None
        length = int(headers.get(b"content-length", b"0"))
        if length > MAX_BODY:
            raise Refused(413, f"the request body of {length} bytes is over this server's limit of {MAX_BODY} bytes; "
                               "send large inputs over gRPC")
        if self.client.client_is_waiting_for_100_continue:
            await self.write(self.client.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = await self._body(MAX_BODY) if chunked else None
        try:
            upstream = await self._upstream()
            kept = [(n, v) for n, v in request.headers.raw_items()
                    if n.lower() not in _HOP_BY_HOP and not (n.lower() == b"content-type" and v.lower().startswith(FORM))]
            if not any(n.lower() == b"host" for n, _ in kept):
                kept.append((b"Host", b"localhost"))
            size = len(body) if chunked else length
            upstream[1].write(upstream[2].send(h11.Request(method=request.method, target=request.target,
                                                           headers=kept + [(b"Content-Length", b"%d" % size)])))
            if chunked:
                upstream[1].write(upstream[2].send(h11.Data(data=body)))
            else:
                await self._pass_body(upstream)
            upstream[1].write(upstream[2].send(h11.EndOfMessage()))
        finally:
            if chunked:
                self.front.buffered -= len(body)
        await self._answer_back(upstream)

    async def _events(self):
        """The client's body events, up to its EndOfMessage (whose trailers are dropped)."""
        while True:
            try:
                event = self.client.next_event()
            except h11.RemoteProtocolError as e:
                raise Refused(e.error_status_hint, _h11_words(e)) from None
            if event is h11.NEED_DATA:
                self.client.receive_data(await self.read())
            elif isinstance(event, h11.Data):
                yield event.data
            elif isinstance(event, h11.EndOfMessage):
                return
            else:  # the client went away mid-body
                raise ConnectionAbortedError

    async def _body(self, limit: int) -> bytearray:
        """A chunked body, whole, while its total stays within `limit` and the front's MAX_BUFFERED."""
        body = bytearray()
        try:
            async for data in self._events():
                if len(body) + len(data) > limit:
                    raise Refused(413, f"the chunked request body is over this server's limit of {limit} bytes; "
                                       "send large inputs over gRPC")
                if self.front.buffered + len(data) > MAX_BUFFERED:
                    raise Refused(503, "this server holds too many chunked bodies just now; retry, or send the body "
                                       "with a Content-Length")
                body += data
                self.front.buffered += len(data)
        except BaseException:
            self.front.buffered -= len(body)
            raise
        return body

    async def _pass_body(self, upstream) -> None:
        async for data in self._events():
            upstream[1].write(upstream[2].send(h11.Data(data=data)))
            await upstream[1].drain()

    async def _upstream(self):
        if self.upstream is not None and self.upstream[2].our_state is h11.IDLE:
            return self.upstream
        self.close()
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.front.upstream.http))
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                self.front.log("files", "no file left for a connection to tritonserver: new requests get 503")
                raise Refused(503, "this server has too many connections open just now; retry in a few seconds") from None
            raise Refused(503, "tritonserver is not listening (starting, or starting again after a crash); "
                               "retry in a few seconds") from None
        self.upstream = (reader, writer, h11.Connection(h11.CLIENT))
        return self.upstream

    async def _answer_back(self, upstream) -> None:
        """tritonserver's answer, passed back to the client as it comes (what is ready, in one write)."""
        reader, _, triton = upstream
        started, out = False, []
        while True:
            try:
                event = triton.next_event()
            except h11.RemoteProtocolError:
                event = h11.ConnectionClosed()
            if event is h11.NEED_DATA:
                if out:
                    await self.write(b"".join(out))
                    out.clear()
                triton.receive_data(await reader.read(PIECE))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.ConnectionClosed):  # tritonserver died or closed mid-answer
                self.upstream = None
                if not started:
                    raise Refused(503, "tritonserver closed the connection before it answered (did it crash? serve "
                                       "starts it again); retry in a few seconds")
                raise ConnectionAbortedError  # the client's connection ends: its answer cannot
            if isinstance(event, h11.Response):
                started = True
                event = h11.Response(status_code=event.status_code, reason=event.reason, headers=[
                    (n, v) for n, v in event.headers.raw_items() if n.lower() not in (b"connection", b"keep-alive")])
            out.append(self.client.send(event))
            if isinstance(event, h11.EndOfMessage):
                await self.write(b"".join(out))
                if triton.our_state is h11.DONE and triton.their_state is h11.DONE:
                    triton.start_next_cycle()
                else:
                    self.close()
                return


async def _get(socket_path: Path, path: str) -> bytes:
    """The body of a 200 answer to GET `path` from tritonserver at `socket_path` (HTTP/1.0: it closes after it); b""
    for any other answer."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return body if head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")) else b""
