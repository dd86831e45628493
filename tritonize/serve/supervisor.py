"""Keeps the embedded server's models serving when a Python backend stub dies.

A model whose stub died (the kernel's OOM killer, a crash) stays READY in Triton but fails every
request with "Stub process '<instance>' is not healthy." until it is unloaded and loaded again (a
plain `load` of an unchanged model does nothing). Every POLL_S the supervisor looks at each READY
model: a stub gone or replaced by another process, or a rise in the model's failed-request counter
(Triton's metrics), is confirmed with batch-1 requests of zeros (one per instance, and one more), and
only "is not healthy" counts: a config loaded with fewer instances (`tritonize tune`, `models load
--config`) drops stubs, a reload replaces them, a client sends a bad request, and none of that is a
crash. A crashed model is reloaded (unload + load through the model repository
API) while the others keep serving. One that keeps crashing is reloaded after the delays in
RELOAD_DELAYS_S, then given up: UNAVAILABLE with the reason, in Triton's repository index where
clients and `tritonize serve` read it.

It talks to the server over HTTP only, sending the control key when the server restricts its model
repository API: gRPC may be TLS with a certificate for another host name than the loopback address.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tritonize.access import ControlKey
from tritonize.progress import say
from tritonize.serve import unavailable
from tritonize.serve.process import clean_reason, model_states

POLL_S = 0.5
RELOAD_DELAYS_S = (0.0, 1.0, 5.0)  # back-off before the 1st, 2nd and 3rd reload within CRASH_WINDOW_S
CRASH_WINDOW_S = 600.0  # one crash more than RELOAD_DELAYS_S allows within this window: given up
REQUEST_TIMEOUT_S = 120.0  # a load of a torch model takes seconds; a probe may queue behind a load of requests
UNHEALTHY = "is not healthy"
STUB = b"triton_python_backend_stub"
INSTANCE = re.compile(r"(?P<model>[^/]+)_\d+_\d+")  # Triton's instance names: <model>_<group>_<index>


@dataclass
class _Model:
    stubs: dict[str, int]  # instance name -> stub pid, when last seen healthy
    failures: float  # failed-request count then
    crashes: list[float] = field(default_factory=list)  # monotonic times of the confirmed crashes
    reload_at: float | None = None  # a reload waiting out its back-off
    what: str = ""  # what happened, for the log line


class Supervisor:
    """Watches the models of one tritonserver from a daemon thread: `start()`, `stop()`."""

    def __init__(self, server_pid: int, http_url: str, metrics_url: str, key: ControlKey | None = None):
        self.server_pid, self.http_url, self.metrics_url, self.key = server_pid, http_url, metrics_url, key
        self.models: dict[str, _Model] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tritonize-supervisor", daemon=True)

    def start(self) -> None:
        self._check()  # what the models look like now, before anyone is told the server is ready
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)  # a reload under way ends anyway once the server stops

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self._check()

    def _check(self) -> None:
        try:
            self.check()
        except (OSError, ValueError):  # the server is starting, stopping or dead: the serve loop reports a dead one
            pass

    def check(self) -> None:
        """One round: every READY model's stubs and failure count, and the reloads that are due."""
        stubs = stub_processes(self.server_pid)
        failures = failure_counts(self.metrics_url)
        for name, (state, _) in model_states(self.http_url, self.key).items():
            if state != "READY":  # unloaded on purpose, or given up
                self.models.pop(name, None)
                continue
            mine = {i: pid for i, pid in stubs.items() if _model_of(i) == name}
            model = self.models.setdefault(name, _Model(mine, failures.get(name, 0.0)))
            if model.reload_at is not None:
                if time.monotonic() >= model.reload_at:
                    self._reload(name, model)
                continue
            if mine != model.stubs or failures.get(name, 0.0) > model.failures:  # a stub gone or replaced, or failing
                problem = self._probe(name, len(model.stubs) + 1)
                gone = sorted(i for i in model.stubs if i not in mine)
                if problem and gone:  # a stub died and none took its place
                    self._crashed(name, model, f"stub {', '.join(f'{i} (pid {model.stubs[i]})' for i in gone)} died")
                    continue
                hung = re.search(r"Stub process '([^']+)'", problem or "")
                # The error names the stub; an ensemble failing in a step names the step's, whose own check acts.
                if hung and hung[1] in mine:
                    # Alive but not answering: the unload would wait for it, and one that resumed after a
                    # reload crashed tritonserver 2.51 (seen once: SIGSTOP, reload, SIGCONT).
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(mine[hung[1]], signal.SIGKILL)
                    self._crashed(name, model, problem.rstrip("."))
                    continue
            model.stubs, model.failures = mine, failures.get(name, 0.0)

    def _probe(self, name: str, requests: int = 1) -> str | None:
        """The first error of up to `requests` batch-1 requests of zeros that says a stub is not healthy,
        else None (the requests spread over the instances). (JSON carries the dtypes `repo build` serves,
        FP32, UINT8 and BYTES; Triton refuses FP16 in JSON.)"""
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{name}/config", timeout=REQUEST_TIMEOUT_S) as response:
                config = json.loads(response.read())
        except urllib.error.HTTPError:  # unloaded meanwhile
            return None
        batch = [1] if int(config.get("max_batch_size", 0)) > 0 else []
        inputs = []
        for spec in config.get("input", []):
            dtype = spec.get("data_type", "TYPE_FP32").removeprefix("TYPE_").replace("STRING", "BYTES")
            shape = batch + [max(1, int(d)) for d in spec.get("dims", [])]
            zero = {"BYTES": "", "BOOL": False}.get(dtype, 0)
            inputs.append({"name": spec["name"], "shape": shape, "datatype": dtype, "data": [zero] * math.prod(shape)})
        body = json.dumps({"inputs": inputs}).encode()
        for _ in range(requests):
            problem = self._post(f"/v2/models/{name}/infer", body)
            if problem and UNHEALTHY in problem:
                return problem
        return None

    def _crashed(self, name: str, model: _Model, what: str) -> None:
        now = time.monotonic()
        model.crashes = [t for t in model.crashes if now - t < CRASH_WINDOW_S] + [now]
        model.what = what
        if len(model.crashes) > len(RELOAD_DELAYS_S):
            self._give_up(name, model)
            return
        model.reload_at = now + RELOAD_DELAYS_S[len(model.crashes) - 1]
        if model.reload_at <= now:
            self._reload(name, model)

    def _reload(self, name: str, model: _Model) -> None:
        start = time.monotonic()
        self._post(f"/v2/repository/models/{name}/unload")
        error = self._post(f"/v2/repository/models/{name}/load")
        model.reload_at = None
        if error:
            say(f"{name}: {model.what}; the reload failed, it is UNAVAILABLE: {error}")
            return
        model.stubs = {i: pid for i, pid in stub_processes(self.server_pid).items() if _model_of(i) == name}
        model.failures = failure_counts(self.metrics_url).get(name, 0.0)
        say(f"{name}: {model.what}; reloaded in {time.monotonic() - start:.1f} s (crash {len(model.crashes)} within "
            f"{CRASH_WINDOW_S / 60:.0f} min; crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)")

    def _give_up(self, name: str, model: _Model) -> None:
        reason = (f"{model.what}; it crashed {len(model.crashes)} times within {CRASH_WINDOW_S / 60:.0f} min, "
                  "so tritonize serve stopped reloading it: find the cause (memory? see `dmesg`), then restart the server")
        self._post(f"/v2/repository/models/{name}/unload")
        self._post(f"/v2/repository/models/{name}/load", unavailable.load_request(name, reason))  # fails, by design
        self.models.pop(name, None)
        say(f"{name}: UNAVAILABLE: {reason}")

    def _post(self, path: str, body: bytes = b"{}") -> str | None:
        """POST to the server's HTTP API (the control key with it); its error message, or None on success."""
        request = urllib.request.Request(f"{self.http_url}{path}", data=body, method="POST",
                                         headers=self.key.http_headers if self.key else {})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as e:
            return clean_reason(json.loads(e.read() or b"{}").get("error", str(e)))


def stub_processes(server_pid: int) -> dict[str, int]:
    """Instance name -> pid of the live Python backend stubs of the server (its children)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) != server_pid or fields[0] == "Z" or not argv[0].endswith(STUB):
            continue
        instance = next((a.decode() for a in argv[1:] if INSTANCE.fullmatch(a.decode(errors="replace"))), None)
        if instance:
            found[instance] = int(entry.name)
    return found


def failure_counts(metrics_url: str) -> dict[str, float]:
    """Model -> failed requests so far, all reasons and versions (Triton's nv_inference_request_failure)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("nv_inference_request_failure{"):
            model = re.search(r'model="([^"]*)"', line)
            if model:
                counts[model[1]] = counts.get(model[1], 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _model_of(instance: str) -> str:
    return INSTANCE.fullmatch(instance)["model"]  # type: ignore[index]
