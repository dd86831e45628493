"""What the front's modules share: where tritonserver listens (Upstream), the bounds of a request's head and of its
time (and `within`, the bound on one wait), and the names of the states a client connection goes through.
serve/front.py holds the connections (accepted, parked, bounded); serve/http_front.py and serve/grpc_front.py what
their ports' bytes mean.

The timeouts are read where they are used (`front_common.HEAD_TIMEOUT_S`), not copied at import: the tests shorten
them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

MAX_HEAD = 64 * 2**10  # a request's line and headers (HTTP), the bytes read at a time from a parked connection
HEAD_TIMEOUT_S = 10.0  # from a request's first byte to the end of its head (gRPC: of the connection preface)
BODY_TIMEOUT_S = 30.0  # the longest a body, or an answer to a client, may stall
IDLE_TIMEOUT_S = 600.0  # a connection between requests
LINGER_S = 5.0  # how long the body of a refused request is read and dropped

IDLE, HEAD, LINGER = "idle", "head", "linger"  # the lines a parked connection waits in (Front.lines)
PARK, CLOSE = "park", "close"  # what a handler's serve() leaves its connection to (or LINGER): the next head, the end


async def within(awaitable, seconds: float):
    """`awaitable`'s result; asyncio.TimeoutError after `seconds`. A timer, not wait_for's task per read (a read is
    the front's most frequent wait), and a cancellation from elsewhere goes through: Python 3.11's wait_for drops one
    that comes as its awaitable completes, and a connection the front ends by cancelling its task went on."""
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
