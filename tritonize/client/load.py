"""The built-in load generator: perf_analyzer's synchronous concurrency mode, in a process of its own.

The measuring process (`client perf`, `tune`) must not compete with the load loop for the cores, and
the loop must do nothing per request that the measurement does not need, or it measures itself (on a
2-core machine a Python client and the server share the CPUs). So the loop runs in a child process
(`python -m tritonize.client.load`) that imports only grpc, receives every request already serialized
(one `ModelInferRequest` per worker, built once by the parent), and per request only calls
`ModelInfer` with those bytes and notes the send and completion times; responses are not decoded.
Like perf_analyzer --sync, each of the `concurrency` workers is a thread with one request in flight.

A level runs in three phases, driven by the parent over stdin/stdout (one JSON object per line):
warm-up (every worker completes `warmup` requests and waits), the parent reads the server's statistics
with nothing in flight and says `measure`; then the window: `seconds` long, counting the requests that
completed inside it as perf_analyzer's time windows do, or exactly `count` requests; never past `limit`.
Workers then finish their request in flight and stop; the parent reads the statistics again.

A request that fails in the window is counted (its error kept, the first one reported) and the worker
goes on after RETRY_PAUSE, as a client that retries would: a stub that dies and heals shows as failures
between successes, and the level keeps what it measured. A failure in the warm-up ends the level (nothing
measured yet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

METHOD = "/inference.GRPCInferenceService/ModelInfer"
EXITED = "EXITED"  # LoadError code: the load process itself stopped
CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
RETRY_PAUSE = 0.1  # seconds a worker waits after a failed request (a dead stub fails at once: no busy loop)


@dataclass
class Window:
    """What the child measured in one window: (sent, completed) perf_counter pairs of the requests that succeeded,
    the window's length, and the requests that failed in it with the first one's error ("CODE: details").
    `answered`: every success since the window opened, those completed after its end included (what the server
    counts between the statistics reads around it)."""

    requests: list[tuple[float, float]]
    seconds: float
    failures: int = 0
    error: str | None = None
    answered: int = 0


class LoadError(Exception):
    """A request failed in the load process: `code` is the gRPC status name ("UNAVAILABLE": server gone)."""

    def __init__(self, code: str, details: str):
        super().__init__(details)
        self.code, self.details = code, details


# --- the parent's side --------------------------------------------------------------------------------

class LoadProcess:
    """The child process, started once for a set of serialized requests (one per worker slot)."""

    def __init__(self, url: str, requests: list[bytes], timeout: float, root_certificates: str | None = None):
        """`root_certificates`: a CA file, for a server that serves gRPC over TLS (`serve --tls-cert`)."""
        self._dir = tempfile.TemporaryDirectory(prefix="tritonize-load-")
        files = []
        for slot, payload in enumerate(requests):
            path = Path(self._dir.name) / f"request_{slot}.bin"
            path.write_bytes(payload)
            files.append(str(path))
        self.process = subprocess.Popen([sys.executable, "-m", "tritonize.client.load"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=_child_env())
        self._send({"url": url, "requests": files, "timeout": timeout, "root_certificates": root_certificates})
        self._expect("started")

    def run(self, concurrency: int, warmup: int, seconds: float | None, count: int | None, limit: float,
            between=lambda: None) -> Window:
        """One level. `between()` runs after the warm-up, just before the window opens (statistics)."""
        self._send({"command": "run", "concurrency": concurrency, "warmup": warmup})
        self._expect("warm")
        between()
        self._send({"command": "measure", "seconds": seconds, "count": count, "limit": limit})
        done = self._expect("done")
        return Window([tuple(r) for r in done["requests"]], done["seconds"], done["failures"], done["error"], done["answered"])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._dir.cleanup()

    def __enter__(self) -> "LoadProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except OSError:
            raise LoadError(EXITED, f"the load process exited (code {self.process.poll()})") from None

    def _expect(self, event: str) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise LoadError(EXITED, f"the load process exited (code {self.process.wait()})")
        message = json.loads(line)
        if message["event"] == "error":
            raise LoadError(message["code"], message["details"])
        assert message["event"] == event, message
        return message


def _child_env() -> dict[str, str]:
    """The child imports the same tritonize as this process (a source tree on PYTHONPATH included)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


# --- the child's side -----------------------------------------------------------------------------------

class _Level:
    """The worker threads of one level and what they record."""

    def __init__(self, call, payloads: list[bytes], timeout: float, concurrency: int, warmup: int):
        self.call, self.payloads, self.timeout = call, payloads, timeout
        self.warmup, self.stop, self.go = warmup, threading.Event(), threading.Event()
        self.warmed = threading.Barrier(concurrency + 1)
        self.tickets: Iterator[int] | None = None  # count mode: requests left to send (next() is atomic)
        self.completions: list[tuple[float, float]] = []  # list.append is atomic: no lock per request
        self.failures: list[tuple[float, str]] = []  # (when, "CODE: details") of requests that failed in the window
        self.error: tuple[str, str] | None = None  # what ended the warm-up
        self.threads = [threading.Thread(target=self._work, args=(slot,), daemon=True) for slot in range(concurrency)]
        for thread in self.threads:
            thread.start()

    def _work(self, slot: int) -> None:
        import grpc

        payload, call, timeout, record = self.payloads[slot], self.call, self.timeout, self.completions.append
        try:
            for _ in range(self.warmup):
                call(payload, timeout=timeout)
            self.warmed.wait()
        except grpc.RpcError as e:
            self._fail(e)
            return
        except threading.BrokenBarrierError:
            return
        self.go.wait()  # the parent reads the server's statistics with nothing in flight
        while not self.stop.is_set() and (self.tickets is None or next(self.tickets, None) is not None):
            sent = time.perf_counter()
            try:
                call(payload, timeout=timeout)
            except grpc.RpcError as e:
                self.failures.append((time.perf_counter(), f"{e.code().name}: {e.details() or e}"))
                self.stop.wait(RETRY_PAUSE)
                continue
            record((sent, time.perf_counter()))

    def _fail(self, error) -> None:
        if self.error is None:
            self.error = (error.code().name, error.details() or str(error))
        self.stop.set()
        self.warmed.abort()

    def measure(self, seconds: float | None, count: int | None, limit: float) -> Window:
        """Time mode: the requests completed within `seconds`. Count mode: exactly `count` requests, the window
        ending with the last. The load stops then; what is in flight completes before the statistics are read."""
        if count is not None:
            self.tickets = iter(range(count))
        start = time.perf_counter()
        deadline = start + min(seconds if seconds is not None else limit, limit)
        self.go.set()
        while not self.stop.is_set() and time.perf_counter() < deadline and any(t.is_alive() for t in self.threads):
            time.sleep(0.002)
        end = min(time.perf_counter(), deadline)
        self.finish()
        if count is not None and len(self.completions) + len(self.failures) == count:
            end = max(done for done in [*(d for _, d in self.completions), *(t for t, _ in self.failures)])
        failed = sorted(f for f in self.failures if f[0] <= end)
        return Window(sorted((r for r in self.completions if r[1] <= end), key=lambda r: r[1]), end - start,
                      len(failed), failed[0][1] if failed else None, len(self.completions))

    def finish(self) -> None:
        self.stop.set()
        self.go.set()
        for thread in self.threads:
            thread.join()


def _child() -> None:
    import grpc

    out = sys.stdout

    def emit(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    spec = json.loads(sys.stdin.readline())
    payloads = [Path(p).read_bytes() for p in spec["requests"]]
    if spec["root_certificates"]:
        credentials = grpc.ssl_channel_credentials(Path(spec["root_certificates"]).read_bytes())
        channel = grpc.secure_channel(spec["url"], credentials, options=CHANNEL_OPTIONS)
    else:
        channel = grpc.insecure_channel(spec["url"], options=CHANNEL_OPTIONS)
    call = channel.unary_unary(METHOD)  # no (de)serializer: the request goes as the bytes given, the response is not decoded
    emit({"event": "started"})
    for line in sys.stdin:
        command = json.loads(line)
        level = _Level(call, payloads, spec["timeout"], command["concurrency"], command["warmup"])
        try:
            level.warmed.wait()
        except threading.BrokenBarrierError:
            pass
        if level.error is None:
            emit({"event": "warm"})
            line = sys.stdin.readline()
            if not line:  # the parent gave up between warm-up and window (e.g. the server went away)
                level.finish()
                break
            measure = json.loads(line)
            window = level.measure(measure["seconds"], measure["count"], measure["limit"])
        else:
            level.finish()
        if level.error is not None:
            emit({"event": "error", "code": level.error[0], "details": level.error[1]})
            continue
        emit({"event": "done", "requests": window.requests, "seconds": window.seconds, "failures": window.failures,
              "error": window.error, "answered": window.answered})
    channel.close()


if __name__ == "__main__":
    _child()
