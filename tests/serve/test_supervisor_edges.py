"""The supervisor at its edges, on the fake Triton of test_supervisor_clock.py: a server that stops answering,
stubs it may not kill, a stub that takes a round to die, a pid given again, two stubs failing in one round,
errors without a body, a model unloaded and loaded again by hand, and the failure counter in every form that
Prometheus' text format allows."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.serve import test_supervisor_clock
from tests.serve.test_supervisor_clock import SERVER_PID, _reloads
from tritonize.serve import supervisor
from tritonize.serve.supervisor import PROBE_INTERVAL_S, RELOAD_DELAYS_S, Supervisor

world = test_supervisor_clock.world  # the fixture, shared

GIVE_UP = "so tritonize serve stopped reloading it: find the cause (memory? see `dmesg`), then restart the server"


def _within(seconds: float, call) -> None:
    start = time.monotonic()
    call()
    assert time.monotonic() - start < seconds, f"took {time.monotonic() - start:.1f} s"


# --- a server that accepts a request and never answers: a round costs a timeout, never the watch


@pytest.mark.parametrize("path", ["/metrics", "/v2/models/solo/config", "/v2/models/solo/infer"])
def test_a_request_the_server_never_answers_costs_a_round_one_timeout(world, monkeypatch, path):
    """The metrics, the probe's config and its requests: each times out, the round ends, and the next one
    (the server answering again) finds the hung stub."""
    triton, sup, clock, lines = world
    monkeypatch.setattr(supervisor, "METRICS_TIMEOUT_S", 0.3)
    monkeypatch.setattr(supervisor, "REQUEST_TIMEOUT_S", 0.3)
    pid = triton.hang("solo_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    triton.hang_paths.add(path)
    _within(5, sup._check)
    assert triton.hung_requests == 1 and not lines
    triton.hang_paths.clear()
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines and lines[-1].startswith("solo: Stub process 'solo_0_0' is not healthy; reloaded in ") and pid not in triton.procs


def test_a_reload_whose_config_never_comes_is_tried_again_next_round(world, monkeypatch):
    triton, sup, clock, lines = world
    monkeypatch.setattr(supervisor, "REQUEST_TIMEOUT_S", 0.3)
    triton.kill("solo_0_0")
    triton.hang_paths.add("/v2/models/solo/config")
    _within(5, sup._check)
    assert not _reloads(triton, "solo") and sup.models["solo"].reload_at is not None
    triton.hang_paths.clear()
    sup.check()
    assert len(_reloads(triton, "solo")) == 1 and lines[-1].startswith("solo: stub solo_0_0")


def test_stop_does_not_wait_longer_than_its_bound_for_a_round_stuck_on_the_server(world, monkeypatch):
    triton, sup, _, _ = world
    monkeypatch.setattr(supervisor, "STOP_WAIT_S", 0.3)
    monkeypatch.setattr(supervisor, "METRICS_TIMEOUT_S", 8.0)
    sup.start()
    triton.hang_paths.add("/metrics")
    deadline = time.monotonic() + 5
    while not triton.hung_requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert triton.hung_requests, "the supervisor's thread never asked for the metrics"
    _within(3, sup.stop)
    triton.release.set()
    sup._thread.join(10)
    assert not sup._thread.is_alive()


# --- processes


def test_without_pidfds_the_wait_falls_back_to_polling(world, monkeypatch):
    """os.pidfd_open is missing on kernels before 5.3 and outside Linux: the wait polls instead."""
    _, sup, _, _ = world
    monkeypatch.delattr(os, "pidfd_open")
    monkeypatch.setattr(supervisor, "POLL_S", 0.01)
    sup.models["solo"].stubs = {"solo_0_0": supervisor.Stub(os.getpid(), "t", "r")}  # a live pid
    sup._wait()
    assert sup._pidfds == {}


@pytest.fixture
def not_ours(monkeypatch):
    """The stubs are another user's processes: a SIGKILL to them is refused (EPERM)."""
    kill = os.kill

    def refuse(pid, sig):
        if pid > SERVER_PID:
            raise PermissionError(1, "Operation not permitted")
        kill(pid, sig)

    monkeypatch.setattr(os, "kill", refuse)


def test_a_hung_stub_that_may_not_be_killed_is_still_reloaded(world, not_ours):
    triton, sup, clock, lines = world
    triton.hang("solo_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines[-1].startswith("solo: Stub process 'solo_0_0' is not healthy; reloaded in ")
    assert len(_reloads(triton, "solo")) == 1


@pytest.mark.parametrize("world", [{"trio": 3}], indirect=True, ids=["trio"])
def test_two_stopped_stubs_one_may_not_kill_are_one_crash_named_in_one_line(world, not_ours):
    triton, sup, clock, lines = world
    triton.free_first = True  # the probe reaches only the healthy instance
    pids = [triton.stop("trio_0_0"), triton.stop("trio_0_2")]
    triton.client_failures("trio")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines == [f"trio: stub trio_0_0 (pid {pids[0]}) is stopped and requests to it fail; stub trio_0_2 (pid "
                     f"{pids[1]}) is stopped and requests to it fail; reloaded in 0.0 s (crash 1 within 10 min; crash "
                     f"{len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)"]


def test_a_stub_stopped_by_a_tracer_is_found_like_one_stopped_by_a_signal(world):
    """A debugger or strace stops a process in state "t", and requests to it fail as to one stopped by SIGSTOP."""
    triton, sup, clock, lines = world
    triton.free_first = True
    pid = triton.stop("pair_0_1", state="t")
    triton.client_failures("pair")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines and lines[-1].startswith(f"pair: stub pair_0_1 (pid {pid}) is stopped and requests to it fail; ")


@pytest.mark.parametrize("world", [{"single": 1}], indirect=True, ids=["max_batch_size_1"])
def test_a_model_of_max_batch_size_1_is_probed_with_its_batch_axis(world):
    triton, sup, clock, lines = world
    pid = triton.hang("single_0_0")
    triton.client_failures("single")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines and lines[-1].startswith("single: Stub process 'single_0_0' is not healthy; reloaded in ") and pid not in triton.procs


def test_two_stubs_dead_in_one_round_are_one_crash_named_in_one_line(world):
    triton, sup, _, lines = world
    pids = [triton.kill("pair_0_0"), triton.kill("pair_0_1", signal_number=6)]
    sup.check()
    assert lines[-1].startswith(f"pair: stub pair_0_0 (pid {pids[0]}) died (killed by SIGKILL); stub pair_0_1 (pid "
                                f"{pids[1]}) died (killed by SIGABRT); reloaded in ")
    assert "(crash 1 within 10 min" in lines[-1] and len(_reloads(triton, "pair")) == 1


def test_a_stub_that_takes_a_round_to_die_is_a_crash_the_round_it_becomes_a_zombie(world):
    """A killed stub of 800 MB tears down for a while: no command line, same start time, not yet a zombie."""
    triton, sup, clock, lines = world
    pid = triton.pid("solo_0_0")
    triton.procs[pid].exiting = True
    sup.check()
    assert not lines and sup.models["solo"].stubs["solo_0_0"].pid == pid
    triton.procs[pid].status = 9
    clock.now += supervisor.POLL_S
    sup.check()
    assert lines == [f"solo: stub solo_0_0 (pid {pid}) died (killed by SIGKILL); reloaded in 0.0 s (crash 1 within "
                     f"10 min; crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)"]


def test_a_pid_given_again_to_a_new_stub_starts_with_a_clean_record(world):
    """A stub that exited with status 0 and was reaped is forgotten; a later stub with the same pid that exits with
    status 0 is looked at twice, like any other."""
    triton, sup, clock, lines = world
    pid = triton.kill("solo_0_0", signal_number=0)
    sup.check()
    assert pid in sup.models["solo"].exited  # seen once: maybe about to be reaped
    del triton.procs[pid]  # reaped: it was ended on purpose
    sup.check()
    assert pid not in sup.models["solo"].exited
    triton.start_stub("solo_0_0", pid)  # the kernel gives the pid again
    sup.check()
    triton.kill("solo_0_0", signal_number=0)
    sup.check()
    assert not lines  # first sighting of this stub's exit
    sup.check()
    assert lines and "died (exit code 0)" in lines[-1]


def test_a_hung_stub_already_dying_is_left_to_its_death_then_healed_with_its_region(world, monkeypatch):
    """The probe names a stub that no longer shows as a live stub (killed, tearing down) beside a live one: the
    round after, it is a zombie, and the crash is handled with the stub's shared-memory region."""
    triton, sup, clock, lines = world
    pid = triton.hang("pair_0_1")
    triton.procs[pid].exiting = True
    region = triton.procs[pid].region
    triton.client_failures("pair")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert ("pair", "pair_0_1") in triton.infers  # the probe reached it
    assert not lines and not _reloads(triton, "pair") and sup.models["pair"].stubs["pair_0_1"].pid == pid
    triton.procs[pid].status = 9
    removed = []
    monkeypatch.setattr(supervisor.shm, "remove", removed.extend)
    sup.check()
    assert lines[-1].startswith(f"pair: stub pair_0_1 (pid {pid}) died (killed by SIGKILL); reloaded in ") and removed == [region]


def test_a_process_that_ends_while_proc_is_read_is_skipped(monkeypatch, tmp_path):
    """/proc lists a process, and it is gone before its files are read: the others are still read."""
    import subprocess
    import sys
    from pathlib import Path

    class Proc(type(Path())):
        def iterdir(self):
            yield Path("/proc/4999999")  # above pid_max: never a process
            yield from super().iterdir()

    stub = subprocess.Popen([str(tmp_path / "triton_python_backend_stub"), "-c", "import time; time.sleep(60)", "m_0_0"],
                            executable=sys.executable)
    try:
        deadline = time.monotonic() + 5
        while b"m_0_0" not in Path(f"/proc/{stub.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.setattr(supervisor, "Path", Proc)
        assert set(supervisor.live_stubs(os.getpid())) == {"m_0_0"}
    finally:
        stub.kill()
        stub.wait()


# --- the repository API's answers


def test_a_model_unloaded_and_loaded_again_by_hand_starts_a_new_count_of_crashes(world):
    triton, sup, clock, lines = world
    for _ in range(2):
        triton.kill("solo_0_0")
        sup.check()
        clock.now += RELOAD_DELAYS_S[1]
        sup.check()
    triton.handle("POST", "/v2/repository/models/solo/unload", b"{}")
    sup.check()
    triton.handle("POST", "/v2/repository/models/solo/load", b"{}")
    sup.check()
    for n in (1, 2):
        triton.kill("solo_0_0")
        sup.check()
        clock.now += RELOAD_DELAYS_S[n - 1]
        sup.check()
        assert f"(crash {n} within 10 min" in lines[-1], lines[-1]
    assert triton.state["solo"] == ("READY", "")


def test_a_reload_refused_without_a_json_error_falls_back_then_says_why_it_failed(world):
    """Errors without a body (a proxy, an old server): the marked load failed all the same, so the fallback runs;
    its failure is logged with the HTTP status."""
    triton, sup, _, lines = world
    triton.bare_errors = True
    triton.refuse_load.add("solo")
    pid = triton.kill("solo_0_0")
    sup.check()
    assert triton.unloads == ["solo"] and [body for m, body in triton.loads if m == "solo"][-1] == {}
    assert lines == [f"solo: stub solo_0_0 (pid {pid}) died (killed by SIGKILL); the reload failed, it is UNAVAILABLE: "
                     "HTTP Error 400: Bad Request"]


def test_giving_up_names_the_model_and_says_what_to_do(world):
    triton, sup, clock, lines = world
    for delay in (*RELOAD_DELAYS_S, 0.0):
        pid = triton.kill("solo_0_0")
        sup.check()
        clock.now += delay
        sup.check()
    reason = (f"stub solo_0_0 (pid {pid}) died (killed by SIGKILL); it crashed {len(RELOAD_DELAYS_S) + 1} times within "
              f"10 min, {GIVE_UP}")
    assert lines[-1] == f"solo: UNAVAILABLE: {reason}"
    request = [body for m, body in triton.loads if m == "solo"][-1]  # the stand-in model whose load fails with the reason
    assert json.loads(request["parameters"]["config"])["name"] == "solo" and triton.state["solo"][0] == "UNAVAILABLE"
    assert repr(reason) in triton.state["solo"][1]


def test_a_supervisor_started_on_a_server_with_failures_already_counted_takes_them_as_old_news(world):
    triton, _, clock, lines = world
    triton.client_failures("solo", 5)
    late = Supervisor(SERVER_PID, triton.url, f"{triton.url}/metrics", clock=clock)
    late.check()
    clock.now += PROBE_INTERVAL_S
    late.check()
    assert not triton.infers and late.models["solo"].failures == 5


@pytest.mark.parametrize("world", [({"solo": 1}, "sparse")], indirect=True, ids=["sparse"])
def test_one_failure_of_a_model_the_metrics_did_not_list_sends_a_probe(world):
    triton, sup, clock, lines = world
    assert sup.models["solo"].failures == 0
    triton.hang("solo_0_0")
    triton.client_failures("solo", 1)
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines and lines[-1].startswith("solo: Stub process 'solo_0_0' is not healthy; reloaded in ")


@pytest.mark.parametrize("world", [({"solo": 1}, "sparse")], indirect=True, ids=["sparse"])
def test_a_model_reloaded_with_no_failure_listed_still_has_its_next_hung_stub_probed(world):
    """A crash seen in /proc costs no request: after the reload the metrics may still not list the model, which then
    has failed nothing; its first failure afterwards sends a probe."""
    triton, sup, clock, lines = world
    triton.kill("solo_0_0")
    sup.check()
    assert len(_reloads(triton, "solo")) == 1 and sup.models["solo"].failures == 0
    clock.now += PROBE_INTERVAL_S
    sup.check()
    triton.hang("solo_0_0")
    triton.client_failures("solo", 1)
    clock.now += PROBE_INTERVAL_S
    sup.check()
    clock.now += RELOAD_DELAYS_S[1]  # the 2nd crash's back-off
    sup.check()
    assert lines[-1].startswith("solo: Stub process 'solo_0_0' is not healthy; reloaded in ")


# --- the failure counter in Prometheus' text format


def test_failure_counts_read_label_values_with_spaces_tabs_and_timestamps(world):
    """The exposition format lets a label value hold spaces and commas, separates the value by blanks or a tab,
    and allows a timestamp after it; other families that share the prefix are not the counter."""
    triton, _, _, _ = world
    text = "\n".join([
        "# TYPE nv_inference_request_failure counter",
        'nv_inference_request_failure{model="solo",reason="OTHER, see the log",version="1"} 4 1764000000000',
        'nv_inference_request_failure{model="solo",reason="REJECTED",version="2"}\t1',
        'nv_inference_request_failure{reason="BACKEND",model="pair",version="1"}  2.5',
        'nv_inference_request_failure_total{model="pair"} 100',
        'nv_inference_request_failure{submodel="image",version="1"} 7',
        "",
    ])
    triton.metrics_text = lambda: text
    assert supervisor.failure_counts(f"{triton.url}/metrics") == {"solo": 5.0, "pair": 2.5}


def test_failure_counts_read_escaped_quotes_and_backslashes_in_label_values(world):
    """A label value holds `"` and `\\` escaped (`\\"`, `\\\\`), a model's name too (a directory name may hold
    either): the counts go to the names as Triton knows them (issue 35: a regular expression misread them)."""
    triton, _, _, _ = world
    text = "\n".join([
        "# TYPE nv_inference_request_failure counter",
        'nv_inference_request_failure{model="we\\"ird",reason="OTHER \\"x\\", },",version="1"} 3',
        'nv_inference_request_failure{model="back\\\\slash",version="1"} 2',
        "",
    ])
    triton.metrics_text = lambda: text
    assert supervisor.failure_counts(f"{triton.url}/metrics") == {'we"ird': 3.0, "back\\slash": 2.0}
