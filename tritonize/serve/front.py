"""The embedded engine's front: it holds the user's HTTP and metrics ports and passes them on to tritonserver's own,
on loopback, so that no HTTP request can take the server down and the ports answer while it restarts.

tritonserver's HTTP library (libevhtp) reads a body sent as `Content-Type: application/x-www-form-urlencoded` (curl's
default) as form fields, into two arrays of the body's size on the HTTP thread's stack: a body of about half the
thread's stack (4,194,000 bytes under the usual 8 MiB RLIMIT_STACK) kills the server with SIGSEGV (upstream
triton-inference-server/server#5840; the parsing is unchanged up to 2.73 / 26.09, see
docs/serving-other-machines.md). Triton reads no Content-Type, so the front drops that one and passes the rest of a
request on byte for byte. It refuses a body over MAX_BODY with 413, and a request line and headers over MAX_HEAD with
431, before any byte reaches tritonserver, and answers 503 while no tritonserver listens.

On the metrics port it serves Triton's metrics followed by `samples()`: tritonize's own counters, which outlive a
restart of tritonserver.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Callable

MAX_BODY = 64 * 2**20  # Triton's own --http-max-input-size default (25.06 on); 2.51 has no limit
MAX_HEAD = 64 * 2**10
PIECE = 2**20  # bytes copied at a time
LINGER_S = 5.0  # how long the body of a refused request is read and dropped
FORM = "application/x-www-form-urlencoded"
_CONTENT_TYPE = re.compile(rb"content-type[ \t]*:[ \t]*" + re.escape(FORM.encode()), re.IGNORECASE)  # as evhtp matches it
_REASONS = {400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 431: "Request Header Fields Too Large",
            501: "Not Implemented", 503: "Service Unavailable"}


class Refused(Exception):
    """A request the front answers itself: the status and Triton's JSON error form."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Request:
    """A request's head as the front passes it on, and how its body is framed."""

    def __init__(self, head: bytes):
        lines = head.split(b"\r\n")[:-2]  # the head ends with an empty line
        if len(lines[0].split(b" ")) != 3 or not lines[0].endswith((b" HTTP/1.1", b" HTTP/1.0")):
            raise Refused(400, "not an HTTP/1.x request line")
        kept, lengths, encodings = [lines[0]], set(), []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
                raise Refused(400, "malformed header line")
            name, value = name.lower(), value.strip()
            if name == b"content-length":
                lengths.add(value)
            elif name == b"transfer-encoding":
                encodings.append(value.lower())
            if not _CONTENT_TYPE.match(line):
                kept.append(line)
        if encodings and lengths or len(lengths) > 1:
            raise Refused(400, "ambiguous body length (Content-Length and Transfer-Encoding, or two lengths)")
        if encodings and encodings != [b"chunked"]:
            raise Refused(501, "the only Transfer-Encoding taken is chunked")
        self.chunked = bool(encodings)
        self.length = 0
        if lengths:
            value = lengths.pop()
            if not value.isdigit():
                raise Refused(400, "Content-Length is not a number")
            self.length = int(value)
        if self.length > MAX_BODY:
            raise Refused(413, f"the request body of {self.length} bytes is over this server's limit of {MAX_BODY} "
                               "bytes; send large inputs over gRPC")
        self.head = b"\r\n".join(kept) + b"\r\n\r\n"


class Front:
    """The HTTP and metrics listeners on `host`, in a thread of their own: `start()`, `stop()`. `upstream` is
    tritonserver's (HTTP port, metrics port) on 127.0.0.1; `samples()` gives the lines added to its metrics."""

    def __init__(self, host: str, http_port: int, metrics_port: int, upstream: tuple[int, int],
                 samples: Callable[[], str] = lambda: ""):
        self.host, self.ports, self.upstream, self.samples = host, (http_port, metrics_port), upstream, samples
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="tritonize-front", daemon=True)

    def start(self) -> None:
        """Listen (an OSError when a port is taken), then serve from the thread."""
        try:
            for handler, port in zip((self._http, self._metrics), self.ports):
                self._servers.append(self._loop.run_until_complete(
                    asyncio.start_server(handler, self.host, port, limit=MAX_HEAD, reuse_address=True)))
        except BaseException:
            self.stop()
            raise
        self._thread.start()

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

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection, passed on over one connection to tritonserver; the answers go back as they come."""
        upstream: asyncio.StreamWriter | None = None
        answers: asyncio.Task | None = None
        try:
            while True:
                try:
                    request = Request(await reader.readuntil(b"\r\n\r\n"))
                except asyncio.IncompleteReadError:  # the client is done
                    return
                except asyncio.LimitOverrunError:
                    raise Refused(431, f"the request line and headers are over {MAX_HEAD} bytes") from None
                if upstream is None:
                    try:
                        upstream_reader, upstream = await asyncio.open_connection("127.0.0.1", self.upstream[0])
                    except OSError:
                        raise Refused(503, "tritonserver is not listening (starting, or starting again after a crash); "
                                           "retry in a few seconds") from None
                    answers = asyncio.create_task(_copy(upstream_reader, writer))
                upstream.write(request.head)
                await (_chunks(reader, upstream) if request.chunked else _exactly(reader, upstream, request.length))
                if answers.done():  # tritonserver closed the connection
                    return
        except Refused as refusal:
            if answers is not None:  # nothing of tritonserver's may follow the refusal
                answers.cancel()
            await _answer(writer, refusal.status, str(refusal), reader)
        except (OSError, asyncio.IncompleteReadError):  # either side went away
            pass
        finally:
            if answers is not None and not answers.done() and not upstream.is_closing():
                upstream.write_eof()  # the client is done: tritonserver answers what it has, then closes
                try:
                    await asyncio.wait_for(answers, 5)
                except (asyncio.TimeoutError, OSError):
                    pass
            for stream in (upstream, writer):
                if stream is not None:
                    stream.close()

    async def _metrics(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """GET /metrics: Triton's metrics (none while it restarts), then tritonize's."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            if path.split(b"?")[0] != b"/metrics":
                raise Refused(404, "the metrics are at /metrics")
            try:
                triton = await asyncio.wait_for(_get("127.0.0.1", self.upstream[1], "/metrics"), 10)
            except (OSError, asyncio.TimeoutError, ValueError):
                triton = b""
            body = triton + self.samples().encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        except Refused as refusal:
            await _answer(writer, refusal.status, str(refusal))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Until `reader` ends (or either side breaks); then `writer` is closed. Cancelled, it leaves `writer` open."""
    try:
        while data := await reader.read(PIECE):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    writer.close()


async def _exactly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int) -> None:
    while length:
        data = await reader.read(min(length, PIECE))
        if not data:
            raise asyncio.IncompleteReadError(b"", length)
        writer.write(data)
        await writer.drain()
        length -= len(data)


async def _chunks(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked body, passed on chunk by chunk while its total stays within MAX_BODY."""
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size = line.split(b";")[0].strip()
        if not size or not all(c in b"0123456789abcdefABCDEF" for c in size):
            raise Refused(400, "malformed chunk size")
        total += int(size, 16)
        if total > MAX_BODY:
            raise Refused(413, f"the chunked request body is over this server's limit of {MAX_BODY} bytes; "
                               "send large inputs over gRPC")
        writer.write(line)
        if int(size, 16) == 0:  # trailers, up to an empty line
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                writer.write(line)
            writer.write(line)
            await writer.drain()
            return
        await _exactly(reader, writer, int(size, 16) + 2)  # the data and its CRLF


async def _answer(writer: asyncio.StreamWriter, status: int, message: str,
                  reader: asyncio.StreamReader | None = None) -> None:
    """An error in Triton's form ({"error": ...}); the connection closes after it. What the client still sends
    meanwhile (`reader`: the body of a refused request) is read and dropped for up to LINGER_S, as a server's
    lingering close does: closed at once, the connection would be reset before the client read the answer."""
    body = json.dumps({"error": message}).encode()
    try:
        writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        if reader is not None:
            writer.write_eof()
            await asyncio.wait_for(_drop(reader), LINGER_S)
    except (OSError, asyncio.TimeoutError):
        pass


async def _drop(reader: asyncio.StreamReader) -> None:
    while await reader.read(PIECE):
        pass


async def _get(host: str, port: int, path: str) -> bytes:
    """The body of a 200 answer to GET `path` (HTTP/1.0: the server closes after it); ValueError otherwise."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        raise ValueError(head[:40])
    return body
