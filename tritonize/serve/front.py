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

A slow or idle client costs little: until its request's head is in (gRPC: the connection preface), a connection is
parked, a socket in the front's own epoll with the bytes h11 has so far, and no task, transport or timer of its own.
Its deadline waits in a line of deadlines of one span (so in order), whose due ones one timer finds at the front.
New connections are accepted as many as the kernel holds at each wake (benchmarks/front_connections.py: 10,000 slow
clients arriving at once).
"""

from __future__ import annotations

import asyncio
import collections
import errno
import functools
import hmac
import json
import re
import resource
import select
import socket
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


IDLE, HEAD, LINGER = "idle", "head", "linger"  # the lines a parked connection waits in (Front.lines)
PARK, CLOSE = "park", "close"  # what a handler's serve() leaves its connection to (or LINGER): the next head, the end
BACKLOG = 4096  # connections the kernel holds for accept(), all accepted at each wake of a listener
READS_BATCH = 1024  # parked connections read at a turn of the event loop
SWEEP_BATCH = 256  # deadlines acted on at a turn of the event loop


def _span(line: str) -> float:
    """How long a connection waits in `line` (read when it starts waiting: the tests shorten them)."""
    return {IDLE: IDLE_TIMEOUT_S, HEAD: HEAD_TIMEOUT_S, LINGER: LINGER_S}[line]


class Connection:
    """One client connection: `sock` (None once an asyncio transport owns it), its port's `handler`, `busy` while a
    request is in progress. Between requests it is parked (`parked`, no task): the front's own epoll watches it, and
    it waits in one of the front's lines (`line`) for its deadline. In a request, `task` serves it."""

    __slots__ = ("front", "sock", "fd", "handler", "busy", "task", "line", "parked")

    def __init__(self, front: Front, sock: socket.socket):
        self.front, self.sock, self.fd, self.handler, self.busy = front, sock, sock.fileno(), None, False
        self.task, self.line, self.parked = None, None, False

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()  # its end closes it
        else:
            self.front.close(self)


class Connections:
    """The open connections of every port, at most `limit`, in the order they last became idle (an OrderedDict keeps
    it: the one to close at the bound is found in its first entries, not by a scan of thousands at each new
    connection)."""

    def __init__(self, limit: int, log: Log):
        self.limit, self.log, self.open = limit, log, collections.OrderedDict()

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
        if connection in self.open:
            self.open.move_to_end(connection)

    def remove(self, connection: Connection) -> None:
        self.open.pop(connection, None)


def listen(host: str, port: int) -> list[socket.socket]:
    """Non-blocking listening sockets on every address of `host` (as asyncio.start_server binds them)."""
    sockets = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(socket.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Front:
    """The HTTP, gRPC and metrics listeners on `host`, in a thread of their own: `start()`, `stop()`. `upstream`:
    tritonserver's sockets; `key`: the control key the restricted APIs want (None: open); `tls`: gRPC over TLS;
    `samples()`: the lines added to Triton's metrics. `ports`: (HTTP, gRPC, metrics).

    A connection is parked between requests (Connection); what its bytes mean is its port's handler's (HttpConnection,
    MetricsConnection, grpc_front.GrpcConnection): `feed(data)` takes what came, True once there is something to act
    on (a whole head, an error, the end); `serve()` acts on it in a task and says what follows (PARK or CLOSE)."""

    def __init__(self, host: str, ports: tuple[int, int, int], upstream: Upstream, *, key: ControlKey | None = None,
                 tls: ServerTLS | None = None, samples: Callable[[], str] = lambda: ""):
        self.host, self.ports, self.upstream, self.key, self.tls, self.samples = host, ports, upstream, key, tls, samples
        self.log = Log()
        self.connections = Connections(connection_limit(), self.log)
        self.buffered = 0  # bytes of chunked bodies held
        self.lines = {line: collections.OrderedDict() for line in (IDLE, HEAD, LINGER)}  # connection -> deadline
        self.parked = select.epoll()  # the parked connections' sockets: one file in the event loop's selector
        self.by_fd: dict[int, Connection] = {}  # the parked connections
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(lambda _loop, context: self.log(
            "error", f"unexpected: {context.get('exception') or context.get('message')!r}"))
        self.tls_context: ssl.SSLContext | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._listeners: list[socket.socket] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="tritonize-front", daemon=True)

    def start(self) -> None:
        """Listen (an OSError when a port is taken), then serve from the thread."""
        self.listen()
        self._thread.start()

    def listen(self) -> None:
        """Listen on the ports, served by the event loop once it runs (start(); tests run it on their own thread)."""
        from tritonize.serve.grpc_front import GrpcConnection

        self.tls_context = self._tls_context()
        self.loop.add_reader(self.parked.fileno(), self.readable)
        try:
            for handler, port in ((HttpConnection, self.ports[0]), (GrpcConnection, self.ports[1]),
                                  (MetricsConnection, self.ports[2])):
                for listener in listen(self.host, port):
                    self._listeners.append(listener)
                    self.loop.add_reader(listener.fileno(), self.accept, listener, handler)
        except BaseException:
            self.stop()
            raise

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls.cert, self.tls.key)
        context.set_alpn_protocols(["h2"])  # gRPC clients insist on it
        return context

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
        if not self.loop.is_closed():
            self.loop.run_until_complete(self._stop())
            self.loop.close()
            self.parked.close()

    async def _stop(self) -> None:
        for listener in self._listeners:
            self.loop.remove_reader(listener.fileno())
            listener.close()
        self.loop.remove_reader(self.parked.fileno())
        for connection in list(self.connections.open):
            connection.close()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def authorized(self, value: bytes | None) -> bool:
        """Whether `value` (a request's key header) is the control key; any request is, when there is none."""
        return self.key is None or (value is not None and hmac.compare_digest(value, self.key.value.encode()))

    # The event loop's side: connections accepted, parked, read as their bytes come, their deadlines in lines.

    def accept(self, listener: socket.socket, handler: type) -> None:
        """The new connections on `listener` (BACKLOG at most: the kernel holds no more)."""
        for _ in range(BACKLOG):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:  # out of files: the bound is too high for what else runs; wait a moment
                self.log("files", f"cannot accept connections ({e.strerror}): paused a second at a time")
                self.loop.remove_reader(listener.fileno())
                self.loop.call_later(1, self.loop.add_reader, listener.fileno(), self.accept, listener, handler)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # answers go out as they are written
            connection = Connection(self, sock)
            if not self.connections.admit(connection):
                if handler.refuses:
                    _send_now(sock, _error(503, f"this server has {self.connections.limit} connections open, its "
                                                "limit, all in a request; retry in a few seconds"))
                sock.close()
                continue
            connection.handler = handler(self, connection)
            if connection.handler.waits:
                self.park(connection, handler.first)
                self.read(connection)  # a client that waited in the kernel's queue has sent its request meanwhile
            else:
                self.serve(connection)

    def park(self, connection: Connection, line: str) -> None:
        """`connection` waits, read by `readable`, in `line` (IDLE: for a first byte; HEAD: for the rest of a head;
        LINGER: for the client to close)."""
        self.connections.idle(connection)
        if not connection.parked:
            self.parked.register(connection.fd, select.EPOLLIN)
            self.by_fd[connection.fd] = connection
            connection.parked = True
        self.wait(connection, line)

    def unpark(self, connection: Connection) -> None:
        if connection.parked:
            self.parked.unregister(connection.fd)
            del self.by_fd[connection.fd]
            connection.parked = False

    def readable(self) -> None:
        """The parked connections that have bytes or an end to read (READS_BATCH at most at a turn of the loop)."""
        for fd, _ in self.parked.poll(0, READS_BATCH):
            self.read(self.by_fd[fd])

    def read(self, connection: Connection) -> None:
        """A parked connection's bytes, to its handler, which is served once it has something to act on."""
        try:
            data = connection.sock.recv(MAX_HEAD)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the client reset the connection
            return self.close(connection)
        if connection.line == LINGER:  # a refused request's rest, dropped until the client closes
            if not data:
                self.close(connection)
        elif connection.handler.feed(data):
            self.serve(connection)
        elif connection.line == IDLE:  # the first byte of a head: it has HEAD_TIMEOUT_S to be whole
            self.wait(connection, HEAD)

    def serve(self, connection: Connection) -> None:
        self.unpark(connection)
        self.unwait(connection)
        connection.task = self.loop.create_task(self._serve(connection))

    async def _serve(self, connection: Connection) -> None:
        then = CLOSE
        try:
            then = await connection.handler.serve()
        except asyncio.CancelledError:  # closed for a new connection, or the front stops
            pass
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):  # the client went away
            pass
        except Exception as e:  # noqa: BLE001 - a bug: one line, and the other connections go on
            self.log("error", f"unexpected {e!r}")
        finally:
            connection.task = None
            if then == PARK:
                self.park(connection, HEAD if connection.handler.started() else IDLE)
            elif then == LINGER:
                self.linger(connection)
            else:
                self.close(connection)

    def linger(self, connection: Connection) -> None:
        """After an answer that ends the connection: the client's sending side is read and dropped for up to LINGER_S,
        as a server's lingering close does (closed at once, the connection would be reset before the client read the
        answer)."""
        try:
            connection.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return self.close(connection)
        self.park(connection, LINGER)

    def close(self, connection: Connection) -> None:
        self.connections.remove(connection)
        self.unwait(connection)
        if connection.handler is not None:
            connection.handler.close()
        self.unpark(connection)
        if connection.sock is not None:
            connection.sock.close()
            connection.sock = None

    def wait(self, connection: Connection, line: str) -> None:
        """`connection` waits in `line` from now: last in it, as its deadline is the latest (each line's span is one)."""
        self.unwait(connection)
        when = self.loop.time() + _span(line)
        self.lines[line][connection] = when
        connection.line = line
        if self._timer is None or when < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(when, self.sweep)

    def unwait(self, connection: Connection) -> None:
        if connection.line is not None:
            del self.lines[connection.line][connection]
            connection.line = None

    def sweep(self) -> None:
        """Act on the deadlines that are due (SWEEP_BATCH at a turn of the loop), then wait for the next one."""
        self._timer, now, done = None, self.loop.time(), 0
        for line, waiting in self.lines.items():
            while waiting and done < SWEEP_BATCH:
                connection, when = next(iter(waiting.items()))
                if when > now:
                    break
                self.unwait(connection)
                self.expire(connection, line)
                done += 1
        if done == SWEEP_BATCH:
            self._timer = self.loop.call_at(now, self.sweep)
        else:
            firsts = [next(iter(waiting.values())) for waiting in self.lines.values() if waiting]
            if firsts:
                self._timer = self.loop.call_at(min(firsts), self.sweep)

    def expire(self, connection: Connection, line: str) -> None:
        """`connection`'s time in `line` is up: a head that did not come in time is answered 408 (where the port's
        protocol answers) and the connection lingers; anything else is closed."""
        if line == HEAD and connection.handler.refuses:
            _send_now(connection.sock, _error(408, f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s"))
            self.linger(connection)
        else:
            self.close(connection)


def _send_now(sock: socket.socket, data: bytes) -> None:
    """`data` (a short answer) to a socket whose buffer is empty, without waiting."""
    try:
        sock.send(data)
    except OSError:
        pass


@functools.lru_cache(maxsize=64)
def _error(status: int, message: str) -> bytes:
    """An error answer in Triton's form ({"error": ...}) that closes the connection."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


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
    `write()`, each bounded by BODY_TIMEOUT_S)."""

    refuses = True  # answers 408 when a head does not come in time, 503 at the bound
    first = IDLE  # a new connection waits for its first byte as long as one between requests
    waits = True  # parked until its head is in

    def __init__(self, front: Front, connection: Connection):
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
            return await _within(self.front.loop.sock_recv(self.connection.sock, PIECE), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise Refused(408, f"the request's body stalled for {BODY_TIMEOUT_S:g} s") from None

    async def write(self, data: bytes) -> None:
        """`data` to the client; a client that reads none of it for BODY_TIMEOUT_S is gone."""
        try:
            await _within(self.front.loop.sock_sendall(self.connection.sock, data), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise asyncio.IncompleteReadError(b"", None) from None

    async def refuse(self, refusal: Refused) -> str:
        await self.write(_error(refusal.status, str(refusal)))
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
            triton = await asyncio.wait_for(_get(self.front.upstream.metrics, "/metrics"), 10)
        except (OSError, asyncio.TimeoutError, ValueError):
            triton = b""
        body = triton + self.front.samples().encode()
        await self.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        return CLOSE


class HttpConnection(HeadReader):
    """One client's connection, passed on request by request over one connection to tritonserver (kept while the
    client's is)."""

    def __init__(self, front: Front, connection: Connection):
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
        self.close()
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.front.upstream.http), limit=MAX_HEAD)
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
                raise asyncio.IncompleteReadError(b"", None)
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
