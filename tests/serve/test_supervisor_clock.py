"""The supervisor as a state machine: its time rules (crash window, back-offs, give-up, probe interval) run
against a fake clock, and its stubs' lives against a fake process table, while it talks HTTP to a fake
Triton that keeps the model repository API's state (index, config, load/unload, infer, metrics).

Fake pids lie above the kernel's largest pid (2**22), so the SIGKILL the supervisor sends a hung stub can
reach no real process. The real-server tests (a real tritonserver, real stubs killed) are in
test_supervision.py.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tritonize.serve import supervisor
from tritonize.serve.supervisor import CRASH_WINDOW_S, PROBE_INTERVAL_S, RELOAD_DELAYS_S, Stub, Supervisor

SERVER_PID = 5_000_000  # above pid_max (at most 2**22): os.kill on it is ESRCH
REAL = {name: getattr(supervisor, name) for name in ("live_stubs", "zombie_status", "start_time", "process_state", "say")}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Proc:
    instance: str
    started: str
    region: str
    status: int | None = None  # the wait status once ended (a zombie child of the server)
    hung: bool = False  # answers nothing: requests reaching it fail
    stopped: str = ""  # its state in /proc once stopped: "T" (SIGSTOP), "t" (stopped by a tracer); hung as well
    exiting: bool = False  # killed, still tearing down: no command line yet not a zombie


class FakeTriton:
    """The repository API's state for models of `count` instances, and the stubs as processes."""

    def __init__(self, models: dict[str, int]):
        self.lock = threading.Lock()
        self.count = dict(models)
        self.state = {name: ("READY", "") for name in models}
        self.failures = {name: 0.0 for name in models}
        self.procs: dict[int, Proc] = {}
        self.next_pid = SERVER_PID + 1
        self.loads: list[tuple[str, dict]] = []  # (model, the load request's body)
        self.unloads: list[str] = []
        self.infers: list[tuple[str, str]] = []  # (model, instance reached)
        self.turn: dict[str, int] = {}
        self.free_first = False  # requests round robin over the instances; True: only to the ones not hung
        self.metrics_style = "one"  # "one" line a model; "by_reason": split over reasons and versions; "sparse": none at 0
        self.refuse_config: set[str] = set()  # models whose load with a config override fails
        self.key_headers: dict[str, str] = {}  # set: the repository API refuses a request without them (403)
        self.refuse_load: set[str] = set()  # models whose every load fails
        self.bare_errors = False  # errors come without a body (no JSON "error")
        self.hang_paths: set[str] = set()  # requests to these paths get no answer until `release` is set
        self.release = threading.Event()
        self.hung_requests = 0
        for name in models:
            self._spawn(name)

    # --- what the test does to the stubs
    def pid(self, instance: str) -> int:
        return next(p for p, proc in self.procs.items() if proc.instance == instance and proc.status is None)

    def kill(self, instance: str, signal_number: int = 9) -> int:
        pid = self.pid(instance)
        self.procs[pid].status = signal_number  # a zombie until tritonserver unloads its instance
        return pid

    def hang(self, instance: str) -> int:
        pid = self.pid(instance)
        self.procs[pid].hung = True
        return pid

    def stop(self, instance: str, state: str = "T") -> int:
        pid = self.hang(instance)
        self.procs[pid].stopped = state
        return pid

    def exit_on_purpose(self, instance: str) -> None:
        """tritonserver ended the stub itself (fewer instances) and reaped it at once."""
        del self.procs[self.pid(instance)]

    def start_stub(self, instance: str, pid: int) -> None:
        """tritonserver started a stub for `instance` as process `pid` (a pid the kernel may give again)."""
        self.procs[pid] = Proc(instance, f"t{pid}-{len(self.loads)}", f"triton_python_backend_shm_region_fake_{pid}")

    # --- the process table the supervisor reads (a real server's supervisor in this process, the session's
    # embedded one, reads the real one: pids below SERVER_PID are real)
    def live_stubs(self, server_pid):
        if server_pid != SERVER_PID:
            return REAL["live_stubs"](server_pid)
        return {p.instance: Stub(pid, p.started, p.region) for pid, p in self.procs.items() if p.status is None and not p.exiting}

    def zombie_status(self, pid, server_pid):
        if pid < SERVER_PID:
            return REAL["zombie_status"](pid, server_pid)
        proc = self.procs.get(pid)
        return None if proc is None or proc.status is None or server_pid != SERVER_PID else proc.status

    def start_time(self, pid):
        if pid < SERVER_PID:
            return REAL["start_time"](pid)
        proc = self.procs.get(pid)
        return None if proc is None or proc.status is not None else proc.started

    def process_state(self, pid):
        if pid < SERVER_PID:
            return REAL["process_state"](pid)
        proc = self.procs.get(pid)
        return None if proc is None else "Z" if proc.status is not None else proc.stopped or "S"

    # --- Triton's side
    def metrics_text(self) -> str:
        """Triton's /metrics: the failure counter a line per model, or per reason and version (24.x+), or only
        for the models that failed; other families and comments beside it."""
        lines = ["# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes",
                 "# TYPE nv_inference_request_failure counter"]
        for m, n in self.failures.items():
            if self.metrics_style == "by_reason":
                lines += [f'nv_inference_request_failure{{model="{m}",reason="BACKEND",version="1"}} {n - n // 2}',
                          f'nv_inference_request_failure{{model="{m}",reason="OTHER",version="1"}} {n // 2}',
                          f'nv_inference_request_failure{{model="{m}",reason="REJECTED",version="2"}} 0']
            elif n or self.metrics_style == "one":
                lines.append(f'nv_inference_request_failure{{model="{m}",version="1"}} {n}')
            lines.append(f'nv_inference_request_success{{model="{m}",version="1"}} 1000')
        return "\n".join(lines) + "\n"

    def _spawn(self, name: str) -> None:
        for pid in [p for p, proc in self.procs.items() if _model(proc.instance) == name]:
            del self.procs[pid]  # reaped: zombies too
        for i in range(self.count[name]):
            pid, self.next_pid = self.next_pid, self.next_pid + 1
            self.procs[pid] = Proc(f"{name}_0_{i}", f"t{pid}", f"triton_python_backend_shm_region_fake_{pid}")

    def handle(self, method: str, path: str, body: bytes, headers: dict | None = None) -> tuple[int, object]:
        parts, headers = path.strip("/").split("/"), headers or {}
        with self.lock:
            if path == "/metrics":
                return 200, self.metrics_text()
            if parts[:2] == ["v2", "repository"] and any(headers.get(k.lower()) != v for k, v in self.key_headers.items()):
                return 403, {"error": "This API is restricted, expecting header 'triton-control-key'"}
            if path == "/v2/repository/index":
                return 200, [{"name": m, "version": "1", "state": s, "reason": r} for m, (s, r) in self.state.items()]
            if parts[:2] == ["v2", "models"] and parts[3] == "config":
                return 200, self.config(parts[2])
            if parts[:2] == ["v2", "models"] and parts[3] == "infer":
                refused = self._refused(parts[2], json.loads(body))
                if refused:  # Triton counts a bad request as a failure of the model
                    self.failures[parts[2]] += 1
                    return 400, {"error": refused}
                return self._infer(parts[2])
            name, action = parts[3], parts[4]
            if action == "unload":
                self.unloads.append(name)
                self.state[name] = ("UNAVAILABLE", "unloaded")
                for pid in [p for p, proc in self.procs.items() if _model(proc.instance) == name]:
                    del self.procs[pid]
                return 200, {}
            request = json.loads(body or b"{}")
            self.loads.append((name, request))
            if name in self.refuse_load:
                return 400, {"error": f"failed to load '{name}': the model's files are broken"}
            if name in self.refuse_config and "config" in request.get("parameters", {}):
                return 400, {"error": f"failed to load '{name}': the config override is refused"}
            if "file:1/model.py" in request.get("parameters", {}):  # the supervisor's "given up" model
                reason = base64.b64decode(request["parameters"]["file:1/model.py"]).decode()
                self.state[name] = ("UNAVAILABLE", reason)
                return 400, {"error": f"load failed for model '{name}': {reason}"}
            self.state[name] = ("READY", "")
            self._spawn(name)
            return 200, {}

    def config(self, name: str) -> dict:
        """What Triton's config endpoint says: "solo" and "pair" take FP32 in batches, "image" an encoded image
        without a batch axis (the preprocess model's kind of input), "single" FP32 in batches of 1."""
        inputs = ([{"name": "image", "data_type": "TYPE_STRING", "dims": [1]}] if name == "image" else
                  [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, -1, 2]}, {"name": "flag", "data_type": "TYPE_BOOL", "dims": [1]}])
        if name == "ens":
            return {"name": name, "platform": "ensemble", "max_batch_size": 8, "input": inputs}
        config = {"name": name, "platform": "onnxruntime_onnx", "max_batch_size": {"image": 0, "single": 1}.get(name, 8),
                  "input": inputs, "output": [{"name": "output", "data_type": "TYPE_FP32", "dims": [4]}],
                  "instance_group": [{"count": self.count[name], "kind": "KIND_CPU"}]}
        if name != "image":  # the image model has no warmup
            config["model_warmup"] = [{"name": "batch_8", "batch_size": 8}]
        return config

    def _refused(self, name: str, request: dict) -> str | None:
        """Triton's checks of a JSON request against the config: names, datatypes, shapes, element counts, and
        here what the supervisor's probe must send (zeros, false, a decodable image)."""
        import base64
        import math

        config = self.config(name)
        given = {t["name"]: t for t in request.get("inputs", [])}
        if sorted(given) != sorted(t["name"] for t in config["input"]):
            return f"expected inputs {[t['name'] for t in config['input']]}, got {sorted(given)}"
        for spec in config["input"]:
            tensor = given[spec["name"]]
            dtype = spec["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
            shape = ([1] if config["max_batch_size"] else []) + spec["dims"]
            if tensor.get("datatype") != dtype or len(tensor.get("shape", [])) != len(shape) or \
                    any(d != -1 and g != d for g, d in zip(tensor["shape"], shape)) or min(tensor["shape"]) < 1:
                return f"unexpected shape or datatype for input '{spec['name']}'"
            data = tensor.get("data")
            if not isinstance(data, list) or len(data) != math.prod(tensor["shape"]):
                return f"unexpected element count for input '{spec['name']}'"
            if dtype == "BYTES":
                if not all(base64.b64decode(item).startswith(b"\x89PNG\r\n\x1a\n") for item in data):
                    return f"input '{spec['name']}' is not an encoded image"
            elif any(v not in (0, False) or isinstance(v, bool) != (dtype == "BOOL") for v in data):
                return f"input '{spec['name']}' holds {set(data)}"
        return None

    def _infer(self, name: str) -> tuple[int, object]:
        instances = sorted(i for i in (p.instance for p in self.procs.values()) if _model(i) == name)
        if self.free_first:  # as Triton does: a request goes to a free instance, and a hung one is never free
            instances = [i for i in instances if not self.procs[self.pid(i)].hung] or instances
        turn = self.turn.get(name, 0)
        self.turn[name] = turn + 1
        instance = instances[turn % len(instances)]
        self.infers.append((name, instance))
        proc = next(p for p in self.procs.values() if p.instance == instance)
        if proc.status is not None or proc.hung:
            self.failures[name] += 1
            return 400, {"error": f"Stub process '{instance}' is not healthy."}
        return 200, {}

    def client_failures(self, name: str, n: int = 1) -> None:
        """Failed requests that a client caused (a bad request): the counter rises, no stub is hurt."""
        self.failures[name] += n


def _model(instance: str) -> str:
    """The model of a Triton instance name, <model>_<group>_<index> (the fake's own reading, not the supervisor's)."""
    return instance.rsplit("_", 2)[0]


@pytest.fixture
def world(monkeypatch, request):
    """(FakeTriton, Supervisor on it, Clock, the supervisor's log lines); "solo" has 1 instance, "pair" 2, and
    "image" takes encoded images. Other models: parametrize `world` indirectly with {name: instances}."""
    param = getattr(request, "param", {"solo": 1, "pair": 2, "image": 1})
    models, style = param if isinstance(param, tuple) else (param, "one")  # (models, metrics_style)
    triton = FakeTriton(models)
    triton.metrics_style = style

    server, thread = http(triton)
    for name in ("live_stubs", "zombie_status", "start_time", "process_state"):
        monkeypatch.setattr(supervisor, name, getattr(triton, name))
    lines: list[str] = []
    mine = lambda line: lines.append(line) if line.split(":")[0] in triton.count else REAL["say"](line)  # noqa: E731
    monkeypatch.setattr(supervisor, "say", mine)
    clock = Clock()
    url = triton.url
    sup = Supervisor(SERVER_PID, url, f"{url}/metrics", clock=clock)
    sup.check()
    try:
        yield triton, sup, clock, lines
    finally:
        triton.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def http(triton: FakeTriton) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """The fake's HTTP API on a free loopback port (`triton.url`), served from a thread; a request to one of
    `hang_paths` gets no answer till `release` is set."""
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path in triton.hang_paths:
                triton.hung_requests += 1
                triton.release.wait(60)
                return
            code, payload = triton.handle(method, self.path, body, {k.lower(): v for k, v in self.headers.items()})
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            if code >= 400 and triton.bare_errors:
                data = b""
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer("GET")

        def do_POST(self):
            self._answer("POST")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    triton.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server, thread


def sup_url(triton) -> str:
    return triton.url


def _reloads(triton, name):
    return [body for model, body in triton.loads if model == name and "file:1/model.py" not in body["parameters"]]


def test_back_off_steps_then_give_up_on_the_fake_clock(world):
    """Crash n within the window is reloaded RELOAD_DELAYS_S[n-1] after it, not a tick sooner; the crash
    after the last delay makes the model UNAVAILABLE with its reason. The other model is never touched."""
    triton, sup, clock, lines = world
    for n, delay in enumerate(RELOAD_DELAYS_S, 1):
        clock.now += 10
        pid = triton.kill("solo_0_0")
        sup.check()
        if delay:
            assert len(_reloads(triton, "solo")) == n - 1
            clock.now += delay - 0.001
            sup.check()
            assert len(_reloads(triton, "solo")) == n - 1, f"crash {n} reloaded before its {delay} s back-off"
            clock.now += 0.001
            sup.check()
        assert len(_reloads(triton, "solo")) == n, f"crash {n} not reloaded after {delay} s"
        assert lines[-1].startswith(f"solo: stub solo_0_0 (pid {pid}) died (killed by SIGKILL); reloaded in ")
        assert f"(crash {n} within 10 min; crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)" in lines[-1]
        reload = json.loads(_reloads(triton, "solo")[-1]["parameters"]["config"])
        assert "model_warmup" not in reload and "died (killed by SIGKILL)" in reload["parameters"][supervisor.RELOADED]["string_value"]
    clock.now += 10
    triton.kill("solo_0_0")
    sup.check()
    assert triton.state["solo"][0] == "UNAVAILABLE"
    assert f"it crashed {len(RELOAD_DELAYS_S) + 1} times within 10 min" in triton.state["solo"][1]
    assert lines[-1].startswith("solo: UNAVAILABLE: stub solo_0_0") and len(_reloads(triton, "solo")) == len(RELOAD_DELAYS_S)
    assert "solo" not in sup.models
    assert not _reloads(triton, "pair") and triton.state["pair"] == ("READY", "")


@pytest.mark.parametrize("spacing, given_up", [
    (CRASH_WINDOW_S / len(RELOAD_DELAYS_S) - 0.01, True),  # the 1st and the last crash less than the window apart
    (CRASH_WINDOW_S / len(RELOAD_DELAYS_S), False),  # exactly the window apart: the 1st no longer counts
])
def test_crashes_count_only_within_the_window(world, spacing, given_up):
    triton, sup, clock, lines = world
    for n in range(len(RELOAD_DELAYS_S) + 1):
        triton.kill("solo_0_0")
        sup.check()
        clock.now += RELOAD_DELAYS_S[min(n, len(RELOAD_DELAYS_S) - 1)]
        sup.check()  # the back-off served
        if n < len(RELOAD_DELAYS_S):
            clock.now += spacing - RELOAD_DELAYS_S[n]
    assert (triton.state["solo"][0] == "UNAVAILABLE") == given_up, lines
    if not given_up:
        assert len(_reloads(triton, "solo")) == len(RELOAD_DELAYS_S) + 1
        assert f"(crash {len(RELOAD_DELAYS_S)} within 10 min" in lines[-1], lines[-1]


def test_crashes_spaced_wider_than_the_window_are_each_a_first_crash(world):
    triton, sup, clock, lines = world
    for _ in range(2 * len(RELOAD_DELAYS_S) + 2):
        triton.kill("solo_0_0")
        sup.check()  # reloaded at once: no back-off for a first crash
        assert "(crash 1 within 10 min" in lines[-1], lines[-1]
        clock.now += CRASH_WINDOW_S
    assert triton.state["solo"] == ("READY", "")


def test_a_model_given_up_and_loaded_again_by_hand_starts_afresh(world):
    triton, sup, clock, lines = world
    for delay in (*RELOAD_DELAYS_S, 0.0):
        triton.kill("solo_0_0")
        sup.check()
        clock.now += delay
        sup.check()
    assert triton.state["solo"][0] == "UNAVAILABLE"
    triton.handle("POST", "/v2/repository/models/solo/load", b"{}")  # the user fixed the cause and loaded it
    clock.now += 1
    sup.check()
    triton.kill("solo_0_0")
    sup.check()
    assert triton.state["solo"] == ("READY", "") and "(crash 1 within 10 min" in lines[-1], lines[-1]


@pytest.mark.parametrize("victim", ["pair_0_0", "pair_0_1"])
def test_either_instance_of_two_dying_is_a_crash_and_both_come_back(world, victim):
    triton, sup, clock, lines = world
    other = ({"pair_0_0", "pair_0_1"} - {victim}).pop()
    pid = triton.kill(victim)
    sup.check()
    assert lines[-1].startswith(f"pair: stub {victim} (pid {pid}) died (killed by SIGKILL); reloaded in "), lines
    assert set(sup.models["pair"].stubs) == {"pair_0_0", "pair_0_1"}
    assert pid not in {s.pid for s in sup.models["pair"].stubs.values()}
    assert other in sup.models["pair"].stubs
    # the other one next: a second crash, reloaded after its back-off; its stub's region is removed then
    pid = triton.kill(other)
    clock.now += 1
    sup.check()
    assert len(_reloads(triton, "pair")) == 1 and [s.pid for s in sup.models["pair"].dead] == [pid]
    clock.now += RELOAD_DELAYS_S[1]
    sup.check()
    assert len(_reloads(triton, "pair")) == 2 and not sup.models["pair"].dead


@pytest.mark.parametrize("victim", ["pair_0_0", "pair_0_1"])
def test_a_hung_instance_of_two_is_found_by_the_probe_whichever_it_is(world, victim):
    """A probe sends one request per instance and one more, so it reaches the hung stub whichever instance
    the server's round robin starts at."""
    triton, sup, clock, lines = world
    for start in range(2):
        triton.turn["pair"] = start
        triton.hang(victim)
        triton.client_failures("pair")  # a client's request failed on it
        clock.now += PROBE_INTERVAL_S
        sup.check()
        assert lines[-1].startswith(f"pair: Stub process '{victim}' is not healthy; reloaded in "), lines
        clock.now += CRASH_WINDOW_S


@pytest.mark.parametrize("victim", ["pair_0_0", "pair_0_1"])
def test_a_stopped_instance_beside_a_healthy_one_is_found_though_no_probe_reaches_it(world, victim):
    """Triton gives each request to a free instance: the probe's all go to the healthy one. The stopped stub's
    state shows it; a merely hung one (no state to see) is left to the probes, and nothing else is killed."""
    triton, sup, clock, lines = world
    triton.free_first = True
    triton.hang(victim)
    triton.client_failures("pair")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert not lines and not _reloads(triton, "pair")  # the probe found nothing, and nothing shows the hung stub
    pid = triton.stop(victim)
    triton.client_failures("pair")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines == [f"pair: stub {victim} (pid {pid}) is stopped and requests to it fail; reloaded in 0.0 s "
                     f"(crash 1 within 10 min; crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)"]
    assert len(_reloads(triton, "pair")) == 1 and pid not in triton.procs


def test_the_probe_sends_what_each_model_takes_and_finds_its_hung_stub(world):
    """The image model (encoded images, no batch axis) is probed with a valid image; a valid probe of a healthy
    model fails nothing, so the failure counter it reads back is the clients' alone."""
    triton, sup, clock, lines = world
    triton.client_failures("image")
    sup.check()
    assert [m for m, _ in triton.infers] == ["image", "image"] and not lines
    assert sup.models["image"].failures == triton.failures["image"] == 1
    pid = triton.hang("image_0_0")
    triton.client_failures("image")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines[-1].startswith("image: Stub process 'image_0_0' is not healthy; reloaded in ") and pid not in triton.procs


def test_where_the_server_processes_cannot_be_seen_the_probe_alone_finds_a_hung_stub_and_ensembles_are_not_probed(world):
    triton, _, clock, lines = world
    triton.count["ens"], triton.state["ens"], triton.failures["ens"] = 0, ("READY", ""), 0.0
    unseen = Supervisor(None, sup_url(triton), f"{sup_url(triton)}/metrics", clock=clock)
    unseen.check()
    triton.client_failures("ens", 3)  # a step failed: counted by the ensemble too
    triton.hang("solo_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    unseen.check()
    assert "ens" not in {m for m, _ in triton.infers}
    assert lines == ["solo: Stub process 'solo_0_0' is not healthy; reloaded in 0.0 s (crash 1 within 10 min; "
                     f"crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)"]
    assert unseen.models["solo"].stubs == {}  # nothing of the server's processes is read


def test_one_round_handles_every_model_whatever_comes_before_it(world):
    """Models are looked at in name order: an unloaded one first ("a_gone"), a crash in "image", a crash waiting
    out its back-off in "pair", a clients' failure in "solo": all in one round."""
    triton, sup, clock, lines = world
    triton.count["a_gone"], triton.state["a_gone"], triton.failures["a_gone"] = 0, ("UNAVAILABLE", "unloaded"), 0.0
    triton.kill("pair_0_0")
    sup.check()
    triton.kill("pair_0_1")  # pair's 2nd crash: reloaded 1 s later
    triton.kill("image_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert [line.split(":")[0] for line in lines] == ["pair", "image"] and sup.models["pair"].reload_at is not None
    assert ("solo", "solo_0_0") in triton.infers  # probed in the same round
    assert "a_gone" not in sup.models


def test_started_it_watches_from_a_daemon_thread_until_stopped(world):
    """start() looks once, then a daemon thread looks every POLL_S (no pidfd reaches a fake pid): a crash is
    healed without anyone calling check(); stop() ends the thread."""
    import time

    triton, sup, clock, lines = world
    sup.start()
    try:
        assert sup._thread.daemon and sup._thread.name == "tritonize-supervisor" and sup._thread.is_alive()
        pid = triton.kill("solo_0_0")
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines and lines[0].startswith(f"solo: stub solo_0_0 (pid {pid}) died (killed by SIGKILL); reloaded in ")
    finally:
        sup.stop()
    assert not sup._thread.is_alive() and sup._pidfds == {}


def test_a_stub_ended_on_purpose_is_no_crash(world):
    triton, sup, clock, lines = world
    triton.count["pair"] = 1
    triton.exit_on_purpose("pair_0_1")  # a config loaded with fewer instances
    sup.check()
    clock.now += 100
    sup.check()
    assert not lines and not _reloads(triton, "pair") and set(sup.models["pair"].stubs) == {"pair_0_0"}


def test_a_stub_that_exited_with_status_0_is_a_crash_only_once_seen_unreaped_twice(world):
    """Status 0 reads the same for a stub tritonserver is about to reap and for one not ours to inspect: the
    first round keeps it, the next one still finding it a zombie takes it for a crash."""
    triton, sup, clock, lines = world
    triton.kill("solo_0_0", signal_number=0)
    sup.check()
    assert not lines
    clock.now += supervisor.POLL_S
    sup.check()
    assert lines and "died (exit code 0)" in lines[-1], lines


def test_the_probe_interval_bounds_the_probes_of_clients_bad_requests(world):
    """Failures that no stub caused: one probe per PROBE_INTERVAL_S at most (1 instance: 2 requests each),
    and no crash."""
    triton, sup, clock, lines = world
    probes = []
    for step in (0.0, PROBE_INTERVAL_S - 0.001, 0.001, PROBE_INTERVAL_S / 2, PROBE_INTERVAL_S / 2):
        clock.now += step
        triton.client_failures("solo")
        sup.check()
        probes.append(sum(1 for model, _ in triton.infers if model == "solo") // 2)
    assert probes == [1, 1, 2, 2, 3]
    assert not lines and sup.models["solo"].failures == triton.failures["solo"]


@pytest.mark.parametrize("world", [{"solo": 1, "res-net.v2": 2}], indirect=True, ids=["res-net.v2"])
def test_a_model_name_with_hyphens_and_dots_is_watched_like_any_other(world):
    """Triton takes any directory name for a model (`resnet-50`, `model.v2`); its instances are named
    <model>_<group>_<index> all the same, and a crash of either is healed as for any other model."""
    triton, sup, clock, lines = world
    assert set(sup.models["res-net.v2"].stubs) == {"res-net.v2_0_0", "res-net.v2_0_1"}
    pid = triton.kill("res-net.v2_0_1")
    sup.check()
    assert lines[-1].startswith(f"res-net.v2: stub res-net.v2_0_1 (pid {pid}) died (killed by SIGKILL); reloaded in "), lines
    assert set(sup.models["res-net.v2"].stubs) == {"res-net.v2_0_0", "res-net.v2_0_1"}
