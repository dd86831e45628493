"""How a started tritonserver is watched: its readiness (with the models' loading progress from its log), the log's
relevant tail, and its death in words."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.processes import signal_name
from tritonize.progress import Ticker
from tritonize.serve.healing import LOADED


class ServerDied(TritonizeError):
    """tritonserver exited (status `code`, as Popen gives it) `during` what ("before it was ready")."""

    def __init__(self, code: int, during: str, detail: str = ""):
        super().__init__(f"tritonserver {exit_words(code)} {during}" + (f"\n{detail}" if detail else ""))
        self.code, self.during = code, during


def exit_words(code: int) -> str:
    """A Popen return code in words: `was killed by SIGSEGV`, `exited with code 1`."""
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"


def wait_until_ready(process: subprocess.Popen, http_url: str, grpc_url: str, timeout: float, log_path: Path,
                     every: float = 2.0, not_built: dict[str, str] | None = None) -> None:
    """Poll the server's readiness until `timeout`, saying every `every` seconds which models have loaded (from
    its log: the repository index may need the control key; `not_built` as in loading_progress); a server that
    exits or never gets ready is an error carrying the log's relevant tail."""
    start = time.monotonic()
    deadline, next_note = start + timeout, start + every
    ticker = Ticker()
    try:
        while True:
            if time.monotonic() >= next_note:
                next_note += every
                ticker.say(f"  loading: {loading_progress(log_path, not_built)}", time.monotonic() - start)
            code = process.poll()
            if code is not None:
                raise ServerDied(code, "before it was ready", log_tail(log_path))
            if _http_ok(f"{http_url}/v2/health/ready") and _tcp_open(grpc_url):
                return
            if time.monotonic() > deadline:
                raise TritonizeError(
                    f"tritonserver was not ready within {timeout:.0f} s (raise --ready-timeout if loading is slow)\n"
                    f"{log_tail(log_path)}"
                )
            time.sleep(0.1)
    finally:
        ticker.done()


_FAILED = re.compile(r"failed to load '([^']+)'")


def loading_progress(log_path: Path, not_built: dict[str, str] | None = None) -> str:
    """What the server's log says so far: the models loaded (the last few named) and those that failed. A model of
    `not_built` (name -> the note `repo build` left) fails to load by design: its note's first sentence says why."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return "starting"
    not_built = not_built or {}
    loaded, failed = list(dict.fromkeys(LOADED.findall(text))), list(dict.fromkeys(_FAILED.findall(text)))
    if not loaded and not failed:
        return "starting, no model loaded yet"
    line = f"{len(loaded)} model(s) loaded" + (f", latest {', '.join(loaded[-3:])}" if loaded else "")
    line += "".join(f"; {not_built[name].split('. ')[0]}" for name in failed if name in not_built)
    failed = [name for name in failed if name not in not_built]
    return line + (f"; failed: {', '.join(failed)}" if failed else "")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tcp_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def log_tail(log_path: Path, lines: int = 15, errors: int = 10) -> str:
    """The server log's error lines (glog `E...`) and its last lines, in log order, without repeats."""
    try:
        text = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return f"(no server log at {log_path})"
    keep = set(range(max(0, len(text) - lines), len(text)))
    keep |= set([i for i, line in enumerate(text) if line.startswith("E")][-errors:])
    body = "\n".join(f"  | {text[i]}" for i in sorted(keep))
    return f"server log {log_path} (errors and last lines):\n{body}"
