"""The serving front: the HTTP, gRPC and metrics ports clients reach, for both engines. tritonserver itself listens
only on Unix sockets in the server's private directory (mode 700, serve/process.py's workdir), so the front is the
one way in for every other user and machine, and the control key is checked here (access.py): tritonserver runs
without it, so it is in no process's arguments or environment.

- HTTP is read with h11 and passed on re-framed, under stricter rules than RFC 9112's, so that tritonserver's HTTP
  library (libevhtp) frames every request exactly as the front did (tests/serve/test_front_framing.py holds the front
  against libevhtp itself): header names are tokens; names, values and the target hold no control characters (nor
  bytes above 0x7e); one Content-Length; a chunked body is de-chunked and passed on with a Content-Length, its
  trailers dropped; the target is a path with an optional query. A body sent as `application/x-www-form-urlencoded`
  loses that Content-Type (Triton reads none): libevhtp parses such a body into two arrays of its size on the HTTP
  thread's stack, and from about 4.2 MB the server dies (triton-inference-server/server#5840). Bodies over MAX_BODY
  get 413, heads over MAX_HEAD 431, before any byte reaches tritonserver; 503 while no tritonserver listens.
- gRPC (serve/grpc_front.py) is relayed frame by frame, messages untouched.
- The metrics port serves Triton's metrics followed by `samples()`, tritonize's own counters.

Every connection is bounded in time (a head within HEAD_TIMEOUT_S of its first byte, no body or answer stalled for
BODY_TIMEOUT_S) and in number (MAX_CONNECTIONS, fewer where the open-files limit is lower): at the bound the
connection idle longest is closed for the new one, and only when every connection is in a request is the new one
refused (HTTP: 503). Each kind of trouble is logged in one line at most once a minute, never per connection.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hmac
import json
import re
import resource
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h11

from tritonize.access import HTTP_REFUSAL, KEY_HEADER, ControlKey, ServerTLS, http_api_open
from tritonize.progress import say

MAX_BODY = 64 * 2**20  # Triton's own --http-max-input-size default (25.06 on); 2.51 has no limit
MAX_HEAD = 64 * 2**10
MAX_BUFFERED = 4 * MAX_BODY  # chunked bodies held at once, all connections together
PIECE = 2**20  # bytes read at a time
HEAD_TIMEOUT_S = 10.0  # from a request's first byte to the end of its head
BODY_TIMEOUT_S = 30.0  # the longest a body, or an answer to a client, may stall
IDLE_TIMEOUT_S = 600.0  # a connection between requests
LINGER_S = 5.0  # how long the body of a refused request is read and dropped
MAX_CONNECTIONS = 16384  # about 4 KB of serve's memory each while idle (benchmarks/front_connections.py)
RESERVED_FILES = 64  # file descriptors kept for everything else serve does
LOG_EVERY_S = 60.0
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


@dataclass(frozen=True)
class Upstream:
    """Where tritonserver listens: a Unix socket each for HTTP, gRPC and metrics, in one private directory."""

    directory: Path
    GRPC_PORT = 8001  # tritonserver names its gRPC socket ADDRESS:PORT

    @property
    def http(self) -> Path:
        return self.directory / "http.sock"

    @property
    def grpc(self) -> Path:
        return self.directory / f"grpc.sock:{self.GRPC_PORT}"

    @property
    def metrics(self) -> Path:
        return self.directory / "metrics.sock"

    def flags(self, inside: str | None = None) -> list[str]:
        """tritonserver's options to listen there (`inside`: the directory as a container sees it)."""
        d = inside or str(self.directory)
        return [f"--http-address=unix:{d}/http.sock", f"--grpc-address=unix:{d}/grpc.sock",
                f"--grpc-port={self.GRPC_PORT}", f"--metrics-address=unix:{d}/metrics.sock"]

    def clear(self) -> None:
        """Remove the sockets a server before left (libevhtp does not, and then cannot bind)."""
        for path in (self.http, self.grpc, self.metrics):
            path.unlink(missing_ok=True)


class Log:
    """One line per kind of trouble, at most once every LOG_EVERY_S, with the count since the last line."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock, self.last, self.counts = clock, {}, {}

    def __call__(self, kind: str, line: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self.clock()
        if kind not in self.last or now - self.last[kind] >= LOG_EVERY_S:
            count = self.counts.pop(kind)
            say(f"front: {line}" + (f" ({count} times since the last such line)" if count > 1 else ""))
            self.last[kind] = now


def connection_limit() -> int:
    """MAX_CONNECTIONS, or fewer where the open-files limit (raised to its hard limit first) is lower. A connection
    holds one file until its request's head is in, a second (to tritonserver) while it is in a request; a request
    that finds no file left gets 503."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return max(1, min(MAX_CONNECTIONS, soft - RESERVED_FILES))


class Connection:
    """One client connection as the bound sees it: `busy` while a request is in progress; `close()` ends it."""

    def __init__(self, task: asyncio.Task | None):
        self.task, self.busy = task, False

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()


class Connections:
    """The open connections of every port, at most `limit`, in the order they last became idle (a dict keeps it: the
    one to close at the bound is found in its first entries, not by a scan of thousands at each new connection)."""

    def __init__(self, limit: int, log: Log):
        self.limit, self.log, self.open = limit, log, {}

    def admit(self, connection: Connection) -> bool:
        """Make room for `connection` (closing the one idle longest at the bound); False: every one is busy."""
        if len(self.open) >= self.limit:
            victim = next((c for c in self.open if not c.busy), None)
            if victim is None:
                self.log("full", f"{len(self.open)} connections open, the limit, all in a request: new ones get 503")
                return False
            self.log("evicted", f"{len(self.open)} connections open, the limit: closing those idle longest for new ones "
                                "(slow or idle clients?)")
            del self.open[victim]
            victim.close()
        self.open[connection] = None
        return True

    def idle(self, connection: Connection) -> None:
        """`connection` waits for its next request: it goes last in line to be closed."""
        connection.busy = False
        if self.open.pop(connection, False) is None:
            self.open[connection] = None

    def remove(self, connection: Connection) -> None:
        self.open.pop(connection, None)


class Front:
    """The HTTP, gRPC and metrics listeners on `host`, in a thread of their own: `start()`, `stop()`. `upstream`:
    tritonserver's sockets; `key`: the control key the restricted APIs want (None: open); `tls`: gRPC over TLS;
    `samples()`: the lines added to Triton's metrics. `ports`: (HTTP, gRPC, metrics)."""

    def __init__(self, host: str, ports: tuple[int, int, int], upstream: Upstream, *, key: ControlKey | None = None,
                 tls: ServerTLS | None = None, samples: Callable[[], str] = lambda: ""):
        self.host, self.ports, self.upstream, self.key, self.tls, self.samples = host, ports, upstream, key, tls, samples
        self.log = Log()
        self.connections = Connections(connection_limit(), self.log)
        self.buffered = 0  # bytes of chunked bodies held
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(lambda _loop, context: self.log(
            "error", f"unexpected: {context.get('exception') or context.get('message')!r}"))
        self._servers: list[asyncio.AbstractServer] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="tritonize-front", daemon=True)

    def start(self) -> None:
        """Listen (an OSError when a port is taken), then serve from the thread."""
        from tritonize.serve.grpc_front import relay

        grpc = functools.partial(relay, self)
        try:
            for handler, port, tls in ((self._http, self.ports[0], None), (grpc, self.ports[1], self._tls_context()),
                                       (self._metrics, self.ports[2], None)):
                self._servers.append(self._loop.run_until_complete(asyncio.start_server(
                    self._bounded(handler, refuse=handler == self._http), self.host, port, limit=MAX_HEAD,
                    reuse_address=True, ssl=tls, backlog=4096)))
        except BaseException:
            self.stop()
            raise
        self._thread.start()

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls.cert, self.tls.key)
        context.set_alpn_protocols(["h2"])  # gRPC clients insist on it
        return context

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._close())
            self._loop.close()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _bounded(self, handler, refuse: bool):
        """`handler` for each connection the bound admits; the others are refused (HTTP: 503) or closed."""
        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connection = Connection(asyncio.current_task())
            try:
                if self.connections.admit(connection):
                    await handler(reader, writer, connection)
                elif refuse:
                    await _answer(writer, 503, f"this server has {self.connections.limit} connections open, its limit, "
                                               "all in a request; retry in a few seconds")
            except asyncio.CancelledError:  # closed for a new connection, or the front stops
                pass
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):  # the client went away
                pass
            except Exception as e:  # noqa: BLE001 - a bug: one line, and the other connections go on
                self.log("error", f"unexpected {e!r}")
            finally:
                self.connections.remove(connection)
                writer.close()
        return run

    def authorized(self, value: bytes | None) -> bool:
        """Whether `value` (a request's key header) is the control key; any request is, when there is none."""
        return self.key is None or (value is not None and hmac.compare_digest(value, self.key.value.encode()))

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: Connection) -> None:
        await HttpConnection(self, reader, writer, connection).serve()

    async def _metrics(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _connection) -> None:
        """GET /metrics: Triton's metrics (none while it restarts), then tritonize's."""
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            request = await _next_request(client, reader)
        except Refused as refusal:
            return await _answer(writer, refusal.status, str(refusal))
        if request is None:
            return
        if request.target.split(b"?")[0] != b"/metrics":
            return await _answer(writer, 404, "the metrics are at /metrics")
        try:
            triton = await asyncio.wait_for(_get(self.upstream.metrics, "/metrics"), 10)
        except (OSError, asyncio.TimeoutError, ValueError):
            triton = b""
        body = triton + self.samples().encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await asyncio.wait_for(writer.drain(), BODY_TIMEOUT_S)


async def _next_request(client: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next request's head, within HEAD_TIMEOUT_S of its first byte (a connection between requests waits up to
    IDLE_TIMEOUT_S); None when the client is done."""
    if not client.trailing_data[0]:  # the usual case: nothing of this head read yet
        head = await _head(reader)
        client.receive_data(head)
        if not head:
            return None
    deadline, fed = None, len(client.trailing_data[0])
    while True:
        try:
            event = client.next_event()
        except h11.RemoteProtocolError as e:
            raise Refused(e.error_status_hint, _h11_words(e)) from None
        if isinstance(event, h11.Request):
            if fed - len(client.trailing_data[0]) > MAX_HEAD:  # h11 bounds only a head still incomplete
                raise Refused(431, f"the request line and headers are over {MAX_HEAD} bytes")
            return checked(event)
        if event is not h11.NEED_DATA:  # ConnectionClosed, or PAUSED after a request that closes the connection
            return None
        if deadline is None and client.trailing_data[0]:
            deadline = time.monotonic() + HEAD_TIMEOUT_S
        wait = IDLE_TIMEOUT_S if deadline is None else deadline - time.monotonic()
        try:
            data = await _read(reader, max(wait, 0))
        except asyncio.TimeoutError:
            if deadline is None:
                return None
            raise Refused(408, f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s") from None
        if deadline is None and data:
            deadline = time.monotonic() + HEAD_TIMEOUT_S
        fed += len(data)
        client.receive_data(data)


async def _head(reader: asyncio.StreamReader) -> bytes:
    """A request head up to its empty line, waited for up to IDLE_TIMEOUT_S, then HEAD_TIMEOUT_S from its first byte
    (b"" when the client closes first). StreamReader finds the end as bytes come, without waking the parser for each:
    a slow client costs little."""
    first = await _within(reader.read(1), IDLE_TIMEOUT_S)
    if not first:
        return b""
    try:
        return first + await _within(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise Refused(408, f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s") from None
    except asyncio.LimitOverrunError:
        raise Refused(431, f"the request line and headers are over {MAX_HEAD} bytes") from None
    except asyncio.IncompleteReadError as e:  # the client closed mid-head: h11 says what that is
        return first + e.partial


async def _within(awaitable, seconds: float):
    """`awaitable`'s result; asyncio.TimeoutError after `seconds` (a timer, not wait_for's task per read: a read is
    the front's most frequent wait)."""
    task, fired = asyncio.current_task(), []
    timer = asyncio.get_running_loop().call_later(seconds, lambda: (fired.append(True), task.cancel()))
    try:
        return await awaitable
    except asyncio.CancelledError:
        if fired:  # the connection ends: what the read may have got meanwhile goes with it
            raise asyncio.TimeoutError from None
        raise
    finally:
        timer.cancel()


async def _read(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What `reader` has next; asyncio.TimeoutError after `seconds`."""
    return await _within(reader.read(PIECE), seconds)


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


class HttpConnection:
    """One client's connection, passed on request by request over one connection to tritonserver."""

    def __init__(self, front: Front, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: Connection):
        self.front, self.reader, self.writer, self.connection = front, reader, writer, connection
        self.client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter, h11.Connection] | None = None

    async def serve(self) -> None:
        try:
            while True:
                self.front.connections.idle(self.connection)
                request = await _next_request(self.client, self.reader)
                if request is None:
                    return
                self.connection.busy = True
                await self._exchange(request)
                if self.client.our_state is not h11.DONE or self.client.their_state is not h11.DONE:
                    return  # either side closes the connection
                self.client.start_next_cycle()
        except Refused as refusal:
            await _answer(self.writer, refusal.status, str(refusal), self.reader)
        finally:
            if self.upstream is not None:
                self.upstream[1].close()

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
            self.writer.write(self.client.send(h11.InformationalResponse(status_code=100, headers=[])))
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

    async def _read(self) -> bytes:
        try:
            return await _read(self.reader, BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise Refused(408, f"the request's body stalled for {BODY_TIMEOUT_S:g} s") from None

    async def _events(self):
        """The client's body events, up to its EndOfMessage (whose trailers are dropped)."""
        while True:
            try:
                event = self.client.next_event()
            except h11.RemoteProtocolError as e:
                raise Refused(e.error_status_hint, _h11_words(e)) from None
            if event is h11.NEED_DATA:
                self.client.receive_data(await self._read())
            elif isinstance(event, h11.Data):
                yield event.data
            elif isinstance(event, h11.EndOfMessage):
                return
            else:  # the client went away mid-body
                raise asyncio.IncompleteReadError(b"", None)

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
        if self.upstream is not None:
            self.upstream[1].close()
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.front.upstream.http), limit=MAX_HEAD)
        except OSError as e:
            self.upstream = None
            if e.errno in (errno.EMFILE, errno.ENFILE):
                self.front.log("files", "no file left for a connection to tritonserver: new requests get 503")
                raise Refused(503, "this server has too many connections open just now; retry in a few seconds") from None
            raise Refused(503, "tritonserver is not listening (starting, or starting again after a crash); "
                               "retry in a few seconds") from None
        self.upstream = (reader, writer, h11.Connection(h11.CLIENT))
        return self.upstream

    async def _answer_back(self, upstream) -> None:
        """tritonserver's answer, passed back to the client as it comes."""
        reader, _, triton = upstream
        started, out = False, []
        while True:
            try:
                event = triton.next_event()
            except h11.RemoteProtocolError:
                event = h11.ConnectionClosed()
            if event is h11.NEED_DATA:
                await self._send(out)
                triton.receive_data(await reader.read(PIECE))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.ConnectionClosed):  # tritonserver died or closed mid-answer
                self.upstream = None
                if not started:
                    raise Refused(503, "tritonserver closed the connection before it answered (did it crash? serve "
                                       "starts it again); retry in a few seconds")
                raise asyncio.IncompleteReadError(b"", None)
            if isinstance(event, h11.Response):
                started = True
                event = h11.Response(status_code=event.status_code, reason=event.reason, headers=[
                    (n, v) for n, v in event.headers.raw_items() if n.lower() not in (b"connection", b"keep-alive")])
            out.append(self.client.send(event))
            if isinstance(event, h11.EndOfMessage):
                await self._send(out)
                if triton.our_state is h11.DONE and triton.their_state is h11.DONE:
                    triton.start_next_cycle()
                else:
                    self.upstream[1].close()
                    self.upstream = None
                return


    async def _send(self, out: list[bytes]) -> None:
        """What is ready for the client, in one write; waits only while the client is slow to read it."""
        if out:
            self.writer.write(b"".join(out))
            out.clear()
            await _drain(self.writer)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait (up to BODY_TIMEOUT_S) while `writer` holds more than its transport's high-water mark; a client that does
    not read for that long is gone."""
    if writer.transport.get_write_buffer_size():
        try:
            await asyncio.wait_for(writer.drain(), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise asyncio.IncompleteReadError(b"", None) from None


async def _answer(writer: asyncio.StreamWriter, status: int, message: str,
                  reader: asyncio.StreamReader | None = None) -> None:
    """An error in Triton's form ({"error": ...}); the connection closes after it. What the client still sends
    meanwhile (`reader`: the body of a refused request) is read and dropped for up to LINGER_S, as a server's
    lingering close does: closed at once, the connection would be reset before the client read the answer."""
    body = json.dumps({"error": message}).encode()
    try:
        writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await asyncio.wait_for(writer.drain(), BODY_TIMEOUT_S)
        if reader is not None and writer.can_write_eof():
            writer.write_eof()
            await asyncio.wait_for(_drop(reader), LINGER_S)
    except (OSError, asyncio.TimeoutError):
        pass


async def _drop(reader: asyncio.StreamReader) -> None:
    while await reader.read(PIECE):
        pass


async def _get(socket_path: Path, path: str) -> bytes:
    """The body of a 200 answer to GET `path` from tritonserver at `socket_path` (HTTP/1.0: it closes after it);
    ValueError otherwise."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        raise ValueError(head[:40])
    return body
