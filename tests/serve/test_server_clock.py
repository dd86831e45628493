"""`heal()` (serve/process.py) as a state machine: the server's crash window, back-offs and give-up on a fake clock,
and a server that dies again while it starts, loads the models back or answers its first request, against the fake
Triton of test_supervisor_clock.py (its model repository API: loads, configs, requests) and a fake tritonserver
process that follows a script. The real-server tests (a real tritonserver killed twice) are in test_server_healing.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.serve.test_supervisor_clock import SERVER_PID, Clock, FakeTriton, http
from tritonize.errors import TritonizeError
from tritonize.serve import healing, process
from tritonize.serve.healing import Served
from tritonize.serve.process import ServerHandle, ServerInfo
from tritonize.serve.readiness import ServerDied
from tritonize.serve.supervisor import CRASH_WINDOW_S, RELOAD_DELAYS_S

LOAD, INFER = "/v2/repository/models/solo/load", "/v2/models/pair/infer"  # the first model asked: pair


class FakeServer:
    """tritonserver as heal() drives it (RunningServer's part): each start() takes the script's next step:
    "ok", "dies before ready", "dies while loading" (dies once the restore's load of solo reached it, which hangs
    till then), "dies before its answer" (dies once the first request to pair reached it). Its stop() ends the
    requests under way, as stopping a dead server's group does (its stubs held its sockets)."""

    def __init__(self, triton: FakeTriton, log_path: Path, steps: list[str]):
        self.triton, self.log_path, self.steps = triton, log_path, steps
        self.command: list[str] = []
        self.code: int | None = None
        self.starts = self.stops = 0
        self.appended: list[bool] = []
        self.dead = threading.Event()

    def start(self, append: bool = False) -> ServerInfo:
        step = self.steps.pop(0)
        self.starts += 1
        self.appended.append(append)
        self.code, self.triton.hang_paths, self.triton.hung_requests = None, set(), 0
        self.triton.release.clear()
        if step == "dies before ready":
            self.code = -11
            raise ServerDied(-11, "before it was ready", "server log (errors and last lines):")
        if step != "ok":
            self.triton.hang_paths = {LOAD if step == "dies while loading" else INFER}
            threading.Thread(target=self._dies_when_reached, daemon=True).start()
        url = self.triton.url
        return ServerInfo(grpc_url="127.0.0.1:1", http_url=url, metrics_url=f"{url}/metrics", pid=SERVER_PID,
                          log_path=self.log_path, models={})

    def _dies_when_reached(self) -> None:
        while not self.triton.hung_requests:
            if self.triton.release.wait(0.01):
                return
        self.code = -9

    def exit_code(self) -> int | None:
        return self.code

    def stop(self) -> None:
        self.stops += 1
        self.triton.release.set()

    def mark_own(self) -> None:
        pass


class Recorded:
    """The recorder's part: what the server served when it died."""

    def __init__(self, served: Served):
        self.served = served

    def stop(self) -> None:
        pass


class Handle(ServerHandle):
    """serve's handle on the fake server, on the fake clock: every back-off it sleeps moves the clock."""

    def __init__(self, server: FakeServer, served: Served, clock: Clock):
        self.server, self.recorder, self.clock = server, Recorded(served), clock
        from tritonize.serve import shm

        self.region_prefix, self.crashes, self.slept = shm.region_prefix(), [], []
        self.supervise, self.served_with = False, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.now += seconds

    def command(self, load=None) -> list[str]:
        return ["tritonserver", f"--load={load}"]

    def serving(self, info, served=None, given_up=None) -> None:
        self.recorder = Recorded(served)  # as the new recorder starts: from what was restored
        self.served_with.append((info, given_up))


@pytest.fixture
def world(tmp_path, monkeypatch):
    """(the handle, the fake server's script, FakeTriton, Clock, serve's log lines); "solo" and "pair" served."""
    triton = FakeTriton({"solo": 1, "pair": 2})
    server, thread = http(triton)
    steps: list[str] = []
    log = tmp_path / "tritonserver.log"
    log.write_text("I1128 01:00:00.000000 1 server.cc:1] \"a line\"\n")
    clock = Clock()
    lines: list[str] = []
    monkeypatch.setattr(process, "say", lines.append)
    served = Served({name: triton.config(name) for name in ("solo", "pair")})
    handle = Handle(FakeServer(triton, log, steps), served, clock)
    try:
        yield handle, steps, triton, clock, lines
    finally:
        triton.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _restored(triton: FakeTriton) -> list[str]:
    return sorted(name for name, _ in triton.loads)


def test_back_off_steps_then_give_up_on_the_fake_clock(world):
    """Crash n within the window starts the server again RELOAD_DELAYS_S[n-1] after it, with the models loaded back;
    the crash after the last delay ends serve with the count and the log's tail."""
    handle, steps, triton, clock, lines = world
    for n, delay in enumerate(RELOAD_DELAYS_S, 1):
        clock.now += 10
        steps.append("ok")
        triton.loads.clear()
        handle.heal(-9)
        assert handle.slept[-1] == delay and handle.restarts == n and _restored(triton) == ["pair", "solo"]
        assert lines[-2].startswith(f"tritonserver was killed by SIGKILL while serving; starting it again (crash {n} within "
                                    f"10 min; crash {len(RELOAD_DELAYS_S) + 1} ends tritonize serve)\nserver log ")
        assert lines[-1] == f"tritonserver serves again, {delay:.1f} s after it was seen dead"
    clock.now += 10
    with pytest.raises(TritonizeError, match=rf"^tritonserver exited with code 1 while serving, {len(RELOAD_DELAYS_S) + 1} "
                                             "times within 10 min, so tritonize serve stopped starting it again: find the "
                                             r"cause \(memory\? see `dmesg`\)\nserver log "):
        handle.heal(1)
    assert handle.server.starts == len(RELOAD_DELAYS_S)


def test_a_crash_leaves_the_window_after_crash_window_s(world):
    """The window slides: the first crash stops counting CRASH_WINDOW_S after it, not a tick sooner."""
    handle, steps, triton, clock, lines = world
    for _ in RELOAD_DELAYS_S:
        clock.now += 10
        steps.append("ok")
        handle.heal(-9)
    clock.now = handle.crashes[0] + CRASH_WINDOW_S  # the first crash is out: three in the window, the last delay again
    steps.append("ok")
    handle.heal(-9)
    assert handle.slept == [*RELOAD_DELAYS_S, RELOAD_DELAYS_S[-1]]
    clock.now = handle.crashes[0] + CRASH_WINDOW_S - 0.001  # the second one is still in: four
    with pytest.raises(TritonizeError, match="4 times within 10 min"):
        handle.heal(-9)


@pytest.mark.parametrize("step, during", [("dies before ready", "was killed by SIGSEGV before it was ready"),
                                          ("dies while loading", "was killed by SIGKILL while it loaded the models back"),
                                          ("dies before its answer", "was killed by SIGKILL before its first answer")])
def test_a_crash_while_it_starts_again_starts_it_again_after_the_next_back_off(world, step, during):
    handle, steps, triton, clock, lines = world
    steps += [step, "ok"]
    handle.heal(-9)
    assert handle.slept == list(RELOAD_DELAYS_S[:2]) and handle.server.starts == 2
    assert handle.restarts == (1 if step == "dies before ready" else 2)
    crashes = [line.split("\n")[0] for line in lines if "starting it again" in line]
    assert crashes == ["tritonserver was killed by SIGKILL while serving; starting it again (crash 1 within 10 min; crash 4 "
                       "ends tritonize serve)",
                       f"tritonserver {during}; starting it again (crash 2 within 10 min; crash 4 ends tritonize serve)"]
    assert lines[-1] == f"tritonserver serves again, {RELOAD_DELAYS_S[1]:.1f} s after it was seen dead"
    assert handle.server.stops >= 2  # the dead server's group stopped before each start


def test_a_server_that_keeps_dying_while_it_starts_ends_serve(world):
    handle, steps, triton, clock, lines = world
    steps += ["dies while loading", "dies before ready", "dies before its answer"]
    with pytest.raises(TritonizeError, match="^tritonserver was killed by SIGKILL before its first answer, 4 times within 10 min"):
        handle.heal(-9)
    assert handle.slept == list(RELOAD_DELAYS_S) and handle.server.starts == 3


def test_serves_again_only_once_a_request_to_a_restored_model_succeeded(world, monkeypatch):
    """The model answers once its stub is healthy (here: after three failed requests); a model that never does is
    said so, and serve goes on."""
    handle, steps, triton, clock, lines = world
    answers = []
    real = triton.handle

    def handle_request(method, path, body, headers=None):
        code, payload = real(method, path, body, headers)
        if path == INFER:
            answers.append(code)
            if len(answers) <= 3:
                return 400, {"error": "Stub process 'pair_0_1' is not healthy."}
        return code, payload

    monkeypatch.setattr(triton, "handle", handle_request)
    steps.append("ok")
    handle.heal(-9)
    assert len(answers) == 4 and lines[-1].startswith("tritonserver serves again, ")
    monkeypatch.setattr(healing, "FIRST_ANSWER_S", 0.3)
    monkeypatch.setattr(triton, "handle", lambda *a, **k: (400, {"error": "Stub process 'pair_0_1' is not healthy."})
                        if a[1] == INFER else real(*a, **k))
    steps.append("ok")
    handle.heal(-9)
    assert lines[-1].startswith("tritonserver runs again, ") and lines[-1].endswith(
        "but a request to pair: Stub process 'pair_0_1' is not healthy.")


def test_models_that_could_not_load_as_before_are_listed_and_not_asked(world):
    handle, steps, triton, clock, lines = world
    triton.refuse_load.add("pair")
    steps.append("ok")
    handle.heal(-9)
    assert lines[-1].startswith("tritonserver serves again, ") and lines[-1].endswith(
        "\n  could not load as before: pair: failed to load 'pair': the model's files are broken")
    assert [name for name, _ in triton.infers] == ["solo"]


def test_not_supervised_it_starts_as_asked_at_start(world):
    """Without a recorder (`supervise` off) there is nothing to restore: the server loads what it was asked for."""
    handle, steps, triton, clock, lines = world
    handle.recorder = None
    steps.append("ok")
    handle.heal(-9)
    assert handle.server.command == ["tritonserver", "--load=None"] and triton.loads == [] and triton.infers == []
    assert lines[-1].startswith("tritonserver serves again, ")


class GivenUp:
    """The supervisor's part: the models it gave up on."""

    def __init__(self, given_up: dict[str, str]):
        self.given_up = given_up

    def stop(self) -> None:
        pass


def test_a_heal_restores_with_the_key_starts_after_the_dead_servers_log_and_leaves_given_up_models_alone(world):
    """What the new server is started with and told: its log appended to, no model loaded at start (then the
    restore, with the control key), the models the supervisor gave up on not loaded and handed on as given up; the
    dead server's shared-memory regions removed; the models that could not load as before, each on a line."""
    from tritonize.access import ControlKey
    from tritonize.serve import shm

    handle, steps, triton, clock, lines = world
    handle.control_key = ControlKey("k" * 24)
    triton.key_headers = dict(handle.control_key.http_headers)
    handle.supervisor = GivenUp({"pair": "crashed 4 times"})
    region = shm.SHM / f"{handle.region_prefix}left_by_the_dead_server"
    region.write_bytes(b"x")
    steps.append("ok")
    handle.heal(-9)
    assert not region.exists() and handle.server.appended == [True]
    assert handle.server.command == ["tritonserver", "--load=()"] and [name for name, _ in triton.loads] == ["solo"]
    (info, given_up), = handle.served_with
    assert isinstance(info, ServerInfo) and info.http_url == triton.url and given_up == {"pair": "crashed 4 times"}
    assert lines[-1].startswith("tritonserver serves again, ")
    handle.supervisor = None
    triton.refuse_load.update({"solo", "pair"})
    steps.append("ok")
    handle.heal(-9)
    assert lines[-1].endswith("\n  could not load as before: pair: failed to load 'pair': the model's files are broken"
                              "\n  could not load as before: solo: failed to load 'solo': the model's files are broken") \
        or lines[-1].endswith("\n  could not load as before: solo: failed to load 'solo': the model's files are broken"
                              "\n  could not load as before: pair: failed to load 'pair': the model's files are broken")


def test_the_work_done_while_the_server_lives_runs_in_a_daemon_thread_and_raises_what_it_raised(world, monkeypatch):
    handle, steps, triton, clock, lines = world
    seen = []

    def work(dead):
        seen.append((threading.current_thread().name, threading.current_thread().daemon))
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        handle._while_alive(work, "while it loaded the models back")
    assert seen == [("tritonize-heal", True)]  # a daemon: a request that never ends never holds serve's exit
    monkeypatch.setattr(process, "STOP_WAIT_S", 0.2)
    handle.server.code = -9

    def deaf(dead):  # ignores that the server died
        threading.Event().wait(30)

    import time

    start = time.monotonic()
    with pytest.raises(ServerDied, match="^tritonserver was killed by SIGKILL before its first answer$"):
        handle._while_alive(deaf, "before its first answer")
    assert time.monotonic() - start < 5
