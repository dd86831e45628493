"""libevhtp as the tests see it: the oracle server of tests/serve/evhtp_oracle.c, built against Debian's libevhtp
(`make test` installs libevhtp-dev where it can), and what it framed."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "evhtp_oracle.c"
FORM = b"application/x-www-form-urlencoded"


def build(directory: Path) -> Path:
    """The oracle's binary; RuntimeError saying what is missing."""
    if not shutil.which("gcc"):
        raise RuntimeError("no gcc")
    if not Path("/usr/include/evhtp/evhtp.h").exists():
        raise RuntimeError("no libevhtp headers (Debian: apt-get install libevhtp-dev)")
    binary = Path(directory) / "evhtp_oracle"
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(binary), str(SOURCE), "-levhtp", "-levent"], check=True,
                   capture_output=True, text=True)
    return binary


@dataclass(frozen=True)
class Framed:
    """One request as evhtp framed it."""

    method: str
    path: bytes
    query: bytes | None
    content_type: bytes | None  # what evhtp's lookup of "content-type" finds
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @property
    def parsed_as_form(self) -> bool:
        """evhtp parses the body as form fields (htp__should_parse_query_body_: a body of known length and a
        Content-Type starting, in any case, with application/x-www-form-urlencoded; the query string stands in for it
        only while the body is short of the stack size that kills the server)."""
        return bool(self.body) and (self.content_type or b"")[:len(FORM)].lower() == FORM


class Oracle:
    """The oracle listening at `address` (evhtp_bind_socket's form: 127.0.0.1 with a port, or unix:/path) until
    `stop()`; `framed()` gives the requests it framed since the last call."""

    def __init__(self, binary: Path, address: str, port: int = 0):
        self.process = subprocess.Popen([str(binary), address, str(port)], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        assert self.process.stdout.readline() == b"listening\n"
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)

    def framed(self, wait: float = 0.3) -> list[Framed]:
        found = []
        while True:
            try:
                line = self._lines.get(timeout=wait)
            except queue.Empty:
                return found
            r = json.loads(line)
            h = lambda v: None if v is None else bytes.fromhex(v)  # noqa: E731
            found.append(Framed(r["method"], h(r["path"]), h(r["query"]), h(r["content_type"]),
                                tuple((h(k), h(v)) for k, v in r["headers"]), h(r["body"])))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()
