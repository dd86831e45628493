"""The serving front: the HTTP, gRPC and metrics ports clients reach, for both engines. tritonserver itself listens
only on Unix sockets in the server's private directory (mode 700, serve/process.py's workdir), so the front is the
one way in for every other user and machine, and the control key is checked here (access.py): tritonserver runs
without it, so it is in no process's arguments or environment.

This module holds the connections of all three ports; what their bytes mean is each port's handler's:
- HTTP and metrics: serve/http_front.py (read with h11, re-framed under rules libevhtp reads as the front does);
- gRPC: serve/grpc_front.py (relayed frame by frame, messages untouched);
- serve/front_common.py: what they share (where tritonserver listens, the bounds of a request in size and time).

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
import hmac
import resource
import select
import socket
import ssl
import threading
import time
from typing import Callable

from tritonize.access import ControlKey, ServerTLS
from tritonize.progress import say
from tritonize.serve import front_common as common  # its timeouts read when used: the tests shorten them
from tritonize.serve.front_common import CLOSE, HEAD, IDLE, LINGER, MAX_HEAD, PARK, Upstream
from tritonize.serve.grpc_front import GrpcConnection
from tritonize.serve.http_front import HttpConnection, MetricsConnection, error_answer

MAX_CONNECTIONS = 16384  # about 4 KB of serve's memory each while idle (benchmarks/front_connections.py)
RESERVED_FILES = 64  # file descriptors kept for everything else serve does
LOG_EVERY_S = 60.0


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


BACKLOG = 4096  # connections the kernel holds for accept(), all accepted at each wake of a listener
READS_BATCH = 1024  # parked connections read at a turn of the event loop
SWEEP_BATCH = 256  # deadlines acted on at a turn of the event loop


def _span(line: str) -> float:
    """How long a connection waits in `line` (read when it starts waiting: the tests shorten them)."""
    return {IDLE: common.IDLE_TIMEOUT_S, HEAD: common.HEAD_TIMEOUT_S, LINGER: common.LINGER_S}[line]


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
                    _send_now(sock, error_answer(503, f"this server has {self.connections.limit} connections open, its "
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
            _send_now(connection.sock, error_answer(
                408, f"the request's head did not arrive within {common.HEAD_TIMEOUT_S:g} s"))
            self.linger(connection)
        else:
            self.close(connection)


def _send_now(sock: socket.socket, data: bytes) -> None:
    """`data` (a short answer) to a socket whose buffer is empty, without waiting."""
    try:
        sock.send(data)
    except OSError:
        pass
