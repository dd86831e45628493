"""Keeps a server's models serving when a Python backend stub dies or hangs.

A model whose stub died (the kernel's OOM killer, a crash) stays READY in Triton but fails every
request with "Stub process '<instance>' is not healthy." until it is loaded again (a plain `load` of an
unchanged model does nothing). The supervisor acts only on such crashes, and tells them from the ordinary
comings and goings of stubs without sending a request:
- A stub that tritonserver ends itself (an unload; a config loaded with fewer instances: `tritonize tune`,
  `models load --config`) is reaped by it at once. A stub that died on its own stays a zombie child of
  tritonserver, with the signal that killed it, until its instance unloads. The supervisor waits on every
  stub (a pidfd) and looks at it the moment it ends.
- A stub that is alive but answers nothing (stopped, frozen) shows only in requests. When a model's
  failed-request counter (Triton's metrics) rises, the supervisor sends a probe: batch-1 requests of valid
  input (zeros; a small PNG where the model takes encoded images), one per instance and one more, and only
  an error saying a stub of the model "is not healthy" counts; that stub is killed. Triton gives each
  request to a free instance, so beside a healthy instance the probe may never reach a stopped one (it
  fails one request a second meanwhile): a stub stopped then (its state in /proc) is killed too. A valid
  probe fails only on such a stub, its own failure is no news to the next round (the counter is read again after it), a
  model is probed at most every PROBE_INTERVAL_S, and ensembles are never probed (a step whose stub fails
  counts the failure in its own counter too). So a client's bad request costs at most one probe, which
  succeeds. (A bad image fails in the preprocess step's response, which Triton 2.51 counts a success of
  the step and two failures of the ensemble: no probe at all.)
A crashed model is loaded again with the config it serves, marked with the crash in its parameters
(RELOADED) and without its warmup: for a changed config Triton loads a new copy while the old one keeps
serving, then switches, so the model never goes UNAVAILABLE and only the requests that reach the dead stub
before the switch fail (an unload then load refused every request for the whole load; it is kept for when the
config cannot be read). The warmup at max batch took 1.5 s of a 1.8 s reload under load (resnet18, 2 cores):
the copy's first requests pay for it instead.
Then the dead stub's shared-memory region is removed: its instance never finishes unloading once a request
failed on it. A model that keeps crashing is reloaded after the delays in RELOAD_DELAYS_S, then given up:
UNAVAILABLE with the reason, in Triton's repository index where clients and `tritonize serve` read it.

It talks to the server over HTTP only, sending the control key when the server restricts its model
repository API: gRPC may be TLS with a certificate for another host name than the loopback address. Where
the server's processes cannot be seen (`server_pid` None: a container on another machine's Docker engine),
only the probes find crashes.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import math
import os
import re
import select
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tritonize.access import ControlKey
from tritonize.processes import signal_name, start_time
from tritonize.progress import say
from tritonize.repository_index import clean_reason, model_states
from tritonize.serve import shm, unavailable

POLL_S = 0.5
PROBE_INTERVAL_S = 5.0  # at most one probe of a model in this time
RELOAD_DELAYS_S = (0.0, 1.0, 5.0)  # back-off before the 1st, 2nd and 3rd reload within CRASH_WINDOW_S
CRASH_WINDOW_S = 600.0  # one crash more than RELOAD_DELAYS_S allows within this window: given up
WINDOW = f"{CRASH_WINDOW_S / 60:g} min"  # the window in the log lines
REQUEST_TIMEOUT_S = 120.0  # a load of a torch model takes seconds; a probe may queue behind a load of requests
METRICS_TIMEOUT_S = 10.0
STOP_WAIT_S = 10.0  # how long stop() waits for a round under way (it ends anyway once the server stops)
UNHEALTHY = "is not healthy"
RELOADED = "tritonize.reloaded"  # the config parameter of a model reloaded after a crash: when, and why
STUB = b"triton_python_backend_stub"
FAILURES = "nv_inference_request_failure"  # Triton's counter of failed requests, per model, version and reason
INSTANCE = re.compile(r"(?P<model>[^/]+)_\d+_\d+")  # Triton's instance names: <model>_<group>_<index>


@dataclass(frozen=True)
class Stub:
    """A Python backend stub: its process and its shared-memory region (a name in /dev/shm)."""

    pid: int
    started: str  # the process's start time: tells it from a later process with the same pid
    region: str


@dataclass
class _Model:
    stubs: dict[str, Stub]  # instance name -> its stub, while alive
    failures: float  # failed-request count when last looked at
    probed: float = -math.inf  # monotonic time of the last probe
    exited: set[int] = field(default_factory=set)  # stubs seen dead with status 0: a crash if still unreaped
    crashes: list[float] = field(default_factory=list)  # monotonic times of the confirmed crashes
    dead: list[Stub] = field(default_factory=list)  # stubs of the crash being handled
    reload_at: float | None = None  # a reload waiting out its back-off
    what: str = ""  # what happened, for the log line


class Supervisor:
    """Watches the models of one tritonserver from a daemon thread: `start()`, `stop()`."""

    def __init__(self, server_pid: int | None, http_url: str, metrics_url: str, key: ControlKey | None = None,
                 clock=time.monotonic):
        self.server_pid, self.http_url, self.metrics_url, self.key = server_pid, http_url, metrics_url, key
        self.clock = clock  # seconds, monotonic: the crash window, back-offs and probe interval are read on it
        self.models: dict[str, _Model] = {}
        self.given_up: dict[str, str] = {}  # model -> why it is UNAVAILABLE, while it is
        self._pidfds: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tritonize-supervisor", daemon=True)

    def start(self) -> None:
        self._check()  # what the models look like now, before anyone is told the server is ready
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wait()
            self._check()

    def _check(self) -> None:
        try:
            self.check()
        except (OSError, ValueError):  # the server is starting, stopping or dead: the serve loop reports a dead one
            pass

    def _wait(self) -> None:
        """Until a stub believed alive ends, or POLL_S."""
        alive = {s.pid for m in self.models.values() for s in m.stubs.values() if s.pid not in m.exited}
        for pid in set(self._pidfds) - alive:
            os.close(self._pidfds.pop(pid))
        for pid in alive - set(self._pidfds):
            with contextlib.suppress(OSError, AttributeError):  # gone already (the round sees it), or no pidfds here
                self._pidfds[pid] = os.pidfd_open(pid)
        if self._pidfds:
            select.select(list(self._pidfds.values()), [], [], POLL_S)
        else:
            self._stop.wait(POLL_S)

    def check(self) -> None:
        """One round: every READY model's stubs and failure count, and the reloads that are due."""
        live = live_stubs(self.server_pid) if self.server_pid else {}
        failures = failure_counts(self.metrics_url)
        for name, (state, _) in model_states(self.http_url, self.key).items():
            if state != "READY":  # unloaded on purpose, or given up
                self.models.pop(name, None)
                continue
            self.given_up.pop(name, None)  # loaded again since
            mine = {i: s for i, s in live.items() if _model_of(i) == name}
            model = self.models.setdefault(name, _Model(mine, failures.get(name, 0.0)))
            if model.reload_at is not None:
                if self.clock() >= model.reload_at:
                    self._reload(name, model)
                continue
            crashed, kept = self._dead_stubs(model, mine)
            if crashed:
                self._crashed(name, model, "; ".join(crashed.values()), [model.stubs[i] for i in crashed])
                continue
            rose = failures.get(name, 0.0) > model.failures
            if rose and (mine or not self.server_pid) and self.clock() - model.probed >= PROBE_INTERVAL_S:
                problem = self._probe(name, model, len(mine) + 1)
                failures[name] = failure_counts(self.metrics_url).get(name, 0.0)  # the probe's own failure is no news
                # The error names the stub; an ensemble failing in a step names the step's, whose own check acts.
                hung = re.search(r"Stub process '([^']+)'", problem) if problem else None
                if hung and (hung[1] in mine or not self.server_pid and _model_of(hung[1]) == name):
                    # Alive but not answering: the unload would wait for it, and one that resumed after a
                    # reload crashed tritonserver 2.51 (seen once: SIGSTOP, reload, SIGCONT).
                    if hung[1] in mine:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(mine[hung[1]].pid, signal.SIGKILL)
                    self._crashed(name, model, problem.rstrip("."), [mine[hung[1]]] if hung[1] in mine else [])
                    continue
                # Triton gives a request to a free instance, so the probe may never reach a stopped stub beside a
                # healthy one (each request the stopped one takes fails after 1 s meanwhile): its state shows it.
                stopped = {i: s for i, s in mine.items() if process_state(s.pid) in ("T", "t")}
                if stopped:
                    for stub in stopped.values():
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(stub.pid, signal.SIGKILL)
                    self._crashed(name, model, "; ".join(f"stub {i} (pid {s.pid}) is stopped and requests to it fail"
                                                         for i, s in stopped.items()), list(stopped.values()))
                    continue
            model.stubs = {**kept, **mine}  # an instance with a new stub: the new one
            model.failures = failures.get(name, 0.0)

    def _dead_stubs(self, model: _Model, mine: dict[str, Stub]) -> tuple[dict[str, str], dict[str, Stub]]:
        """The model's known stubs that no longer run as stubs: those that died on their own (instance ->
        what happened), and those to look at again next round (instance -> stub): still exiting (a killed
        stub of 800 MB takes a while, and no longer shows its command line meanwhile), or ended with status
        0 (tritonserver reaps the stubs it ends at once; a status also reads 0 where the process is not ours
        to inspect). The others tritonserver reaped: ended on purpose."""
        crashed, kept = {}, {}
        for instance, stub in model.stubs.items():
            if instance in mine and mine[instance].pid == stub.pid:
                continue
            status = zombie_status(stub.pid, self.server_pid)
            if status is None:
                if start_time(stub.pid) == stub.started:  # still running, or exiting
                    kept[instance] = stub
                else:
                    model.exited.discard(stub.pid)
            elif status or stub.pid in model.exited:
                crashed[instance] = f"stub {instance} (pid {stub.pid}) died ({_how(status)})"
            else:
                model.exited.add(stub.pid)
                kept[instance] = stub
        return crashed, kept

    def _probe(self, name: str, model: _Model, requests: int) -> str | None:
        """The first error of up to `requests` batch-1 requests of valid input (`probe_body`) that says a stub is
        not healthy, else None (the requests spread over the instances); None at once for an ensemble."""
        model.probed = self.clock()
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{name}/config", timeout=REQUEST_TIMEOUT_S) as response:
                config = json.loads(response.read())
        except urllib.error.HTTPError:  # unloaded meanwhile
            return None
        if config["platform"] == "ensemble":
            return None
        body = probe_body(config)
        for _ in range(requests):
            problem = self._post(f"/v2/models/{name}/infer", body)
            if problem and UNHEALTHY in problem:
                return problem
        return None

    def _crashed(self, name: str, model: _Model, what: str, dead: list[Stub]) -> None:
        now = self.clock()
        model.crashes = [t for t in model.crashes if now - t < CRASH_WINDOW_S] + [now]
        model.what = what
        model.dead = dead  # empty till now (each reload or give-up clears it); `stubs` is read again after the reload
        if len(model.crashes) > len(RELOAD_DELAYS_S):
            self._give_up(name, model)
            return
        model.reload_at = now + RELOAD_DELAYS_S[len(model.crashes) - 1]
        if model.reload_at <= now:
            self._reload(name, model)

    def _reload(self, name: str, model: _Model) -> None:
        start = self.clock()
        error = self._load_again(name, model.what)
        model.reload_at = None
        self._forget(model)
        if error:
            say(f"{name}: {model.what}; the reload failed, it is UNAVAILABLE: {error}")
            return
        model.stubs = {i: s for i, s in live_stubs(self.server_pid).items() if _model_of(i) == name} if self.server_pid else {}
        model.exited.clear()
        model.failures = failure_counts(self.metrics_url).get(name, 0.0)
        say(f"{name}: {model.what}; reloaded in {self.clock() - start:.1f} s (crash {len(model.crashes)} within "
            f"{WINDOW}; crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)")

    def _load_again(self, name: str, what: str) -> str | None:
        """Load the model again with the config it serves, marked (see the module's docstring); else unload and
        load it. The error, or None."""
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{name}/config", timeout=REQUEST_TIMEOUT_S) as response:
                config = json.loads(response.read())
        except (urllib.error.URLError, ValueError):
            config = None
        if config:
            when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            config.setdefault("parameters", {})[RELOADED] = {"string_value": f"{when}: {what}"}
            config.pop("model_warmup", None)  # heal first: warming up at max batch took most of a reload
            body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
            if not self._post(f"/v2/repository/models/{name}/load", body):
                return None
        self._post(f"/v2/repository/models/{name}/unload")
        return self._post(f"/v2/repository/models/{name}/load")

    def _forget(self, model: _Model) -> None:
        """Remove the shared-memory regions of the crashed stubs (see serve/shm.py)."""
        shm.remove(s.region for s in model.dead)
        model.dead.clear()

    def _give_up(self, name: str, model: _Model) -> None:
        reason = (f"{model.what}; it crashed {len(model.crashes)} times within {WINDOW}, "
                  "so tritonize serve stopped reloading it: find the cause (memory? see `dmesg`), then restart the server")
        self.mark_unavailable(name, reason)
        self._forget(model)
        del self.models[name]
        say(f"{name}: UNAVAILABLE: {reason}")

    def mark_unavailable(self, name: str, reason: str) -> None:
        """Leave `name` UNAVAILABLE with `reason` in the repository index (serve/unavailable.py), and remember it."""
        self._post(f"/v2/repository/models/{name}/unload")
        body, code = unavailable.load_request(name, reason)
        self._post(f"/v2/repository/models/{name}/load", body)  # fails, by design
        unavailable.remove_overrides(code)
        self.given_up[name] = reason

    def _post(self, path: str, body: bytes = b"{}") -> str | None:
        """POST (a request with a body) to the server's HTTP API, the control key with it; its error message, or
        None on success."""
        request = urllib.request.Request(f"{self.http_url}{path}", data=body, headers=self.key.http_headers if self.key else {})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as e:
            return clean_reason(json.loads(e.read() or b"{}").get("error", str(e)))


def probe_body(config: dict) -> bytes:
    """A batch-1 request of valid input for a model of `config` (Triton's config JSON), in JSON: zeros, false, or a
    small image where it takes encoded ones. (JSON carries the dtypes `repo build` serves, FP32, UINT8 and BYTES;
    Triton refuses FP16 in JSON. Triton's config JSON holds every field, defaults included: `"max_batch_size": 0`.)"""
    batch = [1] if int(config["max_batch_size"]) > 0 else []
    inputs = []
    for spec in config["input"]:
        dtype = spec["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
        shape = batch + [max(1, int(d)) for d in spec["dims"]]
        valid = {"BYTES": _image(), "BOOL": False}.get(dtype, 0)  # BYTES: the encoded images of `repo build`
        inputs.append({"name": spec["name"], "shape": shape, "datatype": dtype, "data": [valid] * math.prod(shape)})
    return json.dumps({"inputs": inputs}).encode()


def live_stubs(server_pid: int) -> dict[str, Stub]:
    """Instance name -> the live Python backend stubs of the server (its children)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) != server_pid or not argv[0].endswith(STUB) or len(argv) < 3:  # a zombie's argv is empty
            continue
        # argv: the model file, the region, its sizes, tritonserver's pid, ..., the instance name
        instance = next((a.decode() for a in argv[1:] if INSTANCE.fullmatch(a.decode(errors="replace"))), None)
        if instance:
            found[instance] = Stub(int(entry.name), fields[19], argv[2].decode(errors="replace"))
    return found


def stub_processes(server_pid: int) -> dict[str, int]:
    """Instance name -> pid of the live Python backend stubs of the server."""
    return {instance: stub.pid for instance, stub in live_stubs(server_pid).items()}


def zombie_status(pid: int, server_pid: int | None) -> int | None:
    """The wait status of a child of the server that ended and was not reaped (a zombie), else None. (The
    kernel shows the status only to who may inspect the process; others read 0.)"""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    if fields[0] != "Z" or int(fields[1]) != server_pid:
        return None
    return int(fields[-1])


def process_state(pid: int) -> str | None:
    """The process's state letter in /proc (R, S, D, T stopped, t traced, Z), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def failure_counts(metrics_url: str) -> dict[str, float]:
    """Model -> failed requests so far, all reasons and versions (Triton's nv_inference_request_failure), read
    with Prometheus' own parser of its text format (label values may hold escaped quotes, commas, braces)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=METRICS_TIMEOUT_S) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != FAILURES:
            continue
        for sample in family.samples:  # named FAILURES + "_total" by the parser, as a counter's samples are
            if "model" in sample.labels:
                model = sample.labels["model"]
                counts[model] = counts.get(model, 0.0) + sample.value
    return counts


def _how(status: int) -> str:
    """A wait status in words."""
    if status & 0x7F:
        return f"killed by {signal_name(status & 0x7F)}"
    return f"exit code {status >> 8}"


@functools.cache
def _image() -> str:
    """A small valid image, base64 (what the preprocess model takes in JSON)."""
    from PIL import Image

    data = io.BytesIO()
    Image.new("RGB", (224, 224), (128, 128, 128)).save(data, "PNG")
    return base64.b64encode(data.getvalue()).decode()


def _model_of(instance: str) -> str:
    return INSTANCE.fullmatch(instance)["model"]  # type: ignore[index]
