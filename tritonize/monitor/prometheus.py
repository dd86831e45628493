"""A real Prometheus on a monitoring bundle, as a plain process (no service manager), and its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.processes import die_with_parent, stop_process_group

INSTALL_HINT = ("Debian/Ubuntu: `apt-get install prometheus` (gives prometheus and promtool; on Debian as root "
                "`make test` does it); elsewhere the release tarball from prometheus.io, `brew install prometheus`, "
                "or the prom/prometheus container")
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Tools:
    prometheus: Path
    promtool: Path


def find_tools() -> Tools:
    """prometheus and promtool on PATH, or an error saying how to get them."""
    found = {name: shutil.which(name) for name in ("prometheus", "promtool")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise TritonizeError(f"{' and '.join(missing)} not found on PATH; {INSTALL_HINT}")
    return Tools(Path(found["prometheus"]), Path(found["promtool"]))


class Prometheus:
    """`prometheus` on `config` listening on host:port, its data in a temporary directory removed on
    stop. `start()` returns the base URL once it is ready; also a context manager."""

    def __init__(self, config: Path, *, host: str = "127.0.0.1", port: int = 9090):
        self.config, self.host, self.port = Path(config).resolve(), host, port
        self.api = PrometheusAPI(f"http://{host}:{port}")
        self.process: subprocess.Popen | None = None
        self.workdir: Path | None = None  # data and log
        self.log_path: Path | None = None

    def start(self) -> str:
        binary = find_tools().prometheus
        try:
            socket.create_server((self.host, self.port)).close()
        except OSError as e:
            raise TritonizeError(f"port {self.port} on {self.host} is not available ({os.strerror(e.errno)}): another "
                                 "Prometheus? Choose another with --prometheus-port") from None
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonize-prometheus-"))
        self.log_path = self.workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(binary), f"--config.file={self.config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address={self.host}:{self.port}", "--storage.tsdb.retention.time=1d",
                 "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise TritonizeError(f"prometheus did not start on {self.config}:\n{tail}")
            time.sleep(0.1)
        return self.api.url

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api.url}/-/ready", timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def log_tail(self, lines: int = 10) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:] if self.log_path else []
        return "\n".join(f"  | {line}" for line in text) or "  | (no output)"

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
            self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> "Prometheus":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class PrometheusAPI:
    """The HTTP API of the Prometheus at `url`."""

    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **params) -> dict | list:
        """GET /api/v1/<path>; a query error is a TritonizeError with Prometheus' message."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise TritonizeError(f"prometheus {path} {params}: {body.get('error', 'no answer')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """Instant vector at `at` (default now): [{"metric": {labels}, "value": [time, "value"]}, ...]."""
        return self.get("query", query=expr, **({"time": at} if at else {}))["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """Range matrix: [{"metric": {labels}, "values": [[time, "value"], ...]}, ...]."""
        return self.get("query_range", query=expr, start=start, end=end, step=step)["result"]

    def targets(self) -> list[dict]:
        """Active scrape targets: scrapeUrl, health (up/down/unknown), lastError."""
        return self.get("targets", state="active")["activeTargets"]
