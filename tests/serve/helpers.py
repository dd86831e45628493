"""Helpers for the tests that run `tritonize serve` itself and do things to its processes."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tritonize.serve.process import choose_ports


class Serve:
    """`tritonize serve REPOSITORY` (embedded engine, free ports) in a child process, ready once
    constructed. Its stderr lines are collected as they come; `expect` waits for the next ones."""

    def __init__(self, repository: Path):
        ports = choose_ports("127.0.0.1", None, None, None)
        self.grpc_url = f"127.0.0.1:{ports.grpc}"
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "tritonize"), "serve", str(repository), "--engine", "embedded",
             "--http-port", str(ports.http), "--grpc-port", str(ports.grpc), "--metrics-port", str(ports.metrics)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.stderr: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.table = []
        for line in self.process.stdout:  # the models table comes once the server is ready
            self.table.append(line.rstrip())
            if line.startswith("log "):
                break
        assert self.table and self.table[-1].startswith("log "), "\n".join(self.stderr)
        self.workdir = Path(self.table[-1].split()[1]).parent
        self.expect("serving; Ctrl-C or SIGTERM stops")
        self.server_pid = next(pid for pid, cmd in children(self.process.pid).items() if "bin/tritonserver" in cmd)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line.rstrip())
            self._lines.put(line.rstrip())

    def expect(self, start: str, timeout: float = 60.0) -> str:
        """The next stderr line that starts with `start` (the lines before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting {start!r} within {timeout} s; stderr:\n" + "\n".join(self.stderr)) from None
            if line.startswith(start):
                return line

    def stop(self) -> None:
        """Kill it all at once: a graceful stop waits for models to unload (tested elsewhere)."""
        self.process.kill()
        self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.server_pid, signal.SIGKILL)  # the server's group: tritonserver and its stubs
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Serve":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def children(pid: int) -> dict[int, str]:
    """pid -> command line of the live children of `pid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if entry.name.isdigit() and int(fields[1]) == pid and fields[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in process group `pgid`."""
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if entry.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
