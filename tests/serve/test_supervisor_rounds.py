"""The supervisor's rounds on the fake Triton of test_supervisor_clock.py: the failure counter as Triton
exports it in each form, a protected repository API, several models acting in one round, and the pidfd wait
on real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timezone

import pytest

from tests.serve import test_supervisor_clock
from tests.serve.test_supervisor_clock import SERVER_PID, _reloads
from tritonize.access import ControlKey
from tritonize.processes import start_time
from tritonize.serve import supervisor
from tritonize.serve.supervisor import PROBE_INTERVAL_S, RELOAD_DELAYS_S, Stub, Supervisor, _Model

world = test_supervisor_clock.world  # the fixture, shared

MODELS = {"solo": 1, "pair": 2, "image": 1}
STYLES = [(MODELS, "by_reason"), (MODELS, "sparse")]


@pytest.mark.parametrize("world", STYLES, indirect=True, ids=["by_reason", "sparse"])
def test_failure_counts_add_every_reason_and_version_and_a_model_not_listed_has_none(world):
    triton, _, _, _ = world
    triton.failures.update(solo=7.0, pair=0.0, image=2.0)
    counts = supervisor.failure_counts(f"{triton.url}/metrics")
    if triton.metrics_style == "sparse":
        assert counts == {"solo": 7.0, "image": 2.0}
    else:
        assert counts == {"solo": 7.0, "pair": 0.0, "image": 2.0}


@pytest.mark.parametrize("world", STYLES, indirect=True, ids=["by_reason", "sparse"])
def test_clients_failures_then_a_hung_stub_whatever_form_the_counter_takes(world):
    """A rise in the counter is what sends a probe; a model absent from the metrics has failed nothing."""
    triton, sup, clock, lines = world
    assert all(m.failures == 0.0 for m in sup.models.values())
    triton.client_failures("solo", 3)  # clients' bad requests: the probe finds the stub healthy
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert ("solo", "solo_0_0") in triton.infers and not lines
    assert sup.models["solo"].failures == 3.0
    probes = len(triton.infers)
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert len(triton.infers) == probes  # no rise, no probe
    pid = triton.hang("solo_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert lines == [f"solo: Stub process 'solo_0_0' is not healthy; reloaded in 0.0 s (crash 1 within 10 min; "
                     f"crash {len(RELOAD_DELAYS_S) + 1} makes it UNAVAILABLE)"] and pid not in triton.procs
    assert sup.models["solo"].failures == triton.failures["solo"]  # read after the reload: its failures are no news
    triton.kill("pair_0_1")
    sup.check()
    assert lines[-1].startswith("pair: stub pair_0_1 (pid ")


def test_with_a_control_key_every_repository_request_carries_it(world):
    triton, _, clock, lines = world
    key = ControlKey("k" * 43)
    triton.key_headers = key.http_headers
    keyless = Supervisor(SERVER_PID, triton.url, f"{triton.url}/metrics", clock=clock)
    with pytest.raises(OSError):  # refused (403): the index cannot be read without the key
        keyless.check()
    keyed = Supervisor(SERVER_PID, triton.url, f"{triton.url}/metrics", key=key, clock=clock)
    keyed.check()
    triton.kill("solo_0_0")
    keyed.check()
    assert len(_reloads(triton, "solo")) == 1 and triton.state["solo"][0] == "READY"
    assert lines[-1].startswith("solo: stub solo_0_0 (pid ") and "reloaded in 0.0 s" in lines[-1]


def test_a_model_waiting_out_its_back_off_does_not_hold_up_the_others(world):
    """Name order: image, pair, solo. image waits for its 2nd reload; pair and solo act in the same round."""
    triton, sup, clock, lines = world
    triton.kill("image_0_0")
    sup.check()
    triton.kill("image_0_0")
    sup.check()
    assert sup.models["image"].reload_at is not None  # 2nd crash: reloaded RELOAD_DELAYS_S[1] later
    before = len(lines)
    triton.kill("pair_0_0")
    triton.kill("solo_0_0")
    sup.check()
    assert [line.split(":")[0] for line in lines[before:]] == ["pair", "solo"]
    assert sup.models["image"].reload_at is not None


def test_a_hung_stub_found_by_the_probe_does_not_hold_up_the_next_model(world):
    triton, sup, clock, lines = world
    triton.hang("image_0_0")
    triton.client_failures("image")
    triton.kill("solo_0_0")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert [line.split(":")[0] for line in lines] == ["image", "solo"]


def test_a_stopped_stub_does_not_hold_up_the_next_model_and_is_kept_for_its_reload(world):
    """pair's 2nd crash waits 1 s: its stopped stub stays in `dead` (its shared memory is cleaned at the reload)."""
    triton, sup, clock, lines = world
    triton.kill("pair_0_0")
    sup.check()
    triton.free_first = True
    pid = triton.stop("pair_0_1")
    triton.client_failures("pair")
    triton.kill("solo_0_0")
    clock.now += PROBE_INTERVAL_S
    before = len(lines)
    sup.check()
    assert lines[before:] and lines[-1].startswith("solo: stub solo_0_0")
    assert sup.models["pair"].reload_at is not None and [s.pid for s in sup.models["pair"].dead] == [pid]


def test_a_hung_stub_is_kept_for_its_reload(world):
    triton, sup, clock, lines = world
    triton.kill("solo_0_0")
    sup.check()
    pid = triton.hang("solo_0_0")
    triton.client_failures("solo")
    clock.now += PROBE_INTERVAL_S
    sup.check()
    assert sup.models["solo"].reload_at is not None and [s.pid for s in sup.models["solo"].dead] == [pid]


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_the_wait_ends_when_a_watched_stub_exits_and_keeps_a_pidfd_only_for_live_stubs(monkeypatch, child):
    monkeypatch.setattr(supervisor, "POLL_S", 60.0)  # a wait that ends at once can only be the pidfd's
    sup = Supervisor(None, "http://127.0.0.1:9", "http://127.0.0.1:9/metrics")
    stub = Stub(child.pid, start_time(child.pid), "region")
    sup.models["m"] = _Model({"m_0_0": stub}, 0.0)
    waiter = threading.Thread(target=sup._wait)
    waiter.start()
    child.stdin.close()  # the child exits
    waiter.join(20)
    assert not waiter.is_alive(), "the wait did not end when the stub exited"
    assert set(sup._pidfds) == {child.pid}
    fd = sup._pidfds[child.pid]
    sup.models["m"].exited.add(child.pid)  # seen dead: no longer watched
    sup._stop.set()
    sup._wait()
    assert sup._pidfds == {}
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


def test_stop_closes_the_pidfds(child):
    sup = Supervisor(None, "http://127.0.0.1:9", "http://127.0.0.1:9/metrics")
    sup.models["m"] = _Model({"m_0_0": Stub(child.pid, start_time(child.pid), "region")}, 0.0)
    sup._stop.set()
    sup._wait()
    fd = sup._pidfds[child.pid]
    sup.stop()
    assert sup._pidfds == {}
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.fixture
def away_from_utc():
    """The local time zone is 5:30 ahead of UTC (as for a user in India)."""
    import time

    before = os.environ.get("TZ")
    os.environ["TZ"] = "IST-5:30"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_reload_is_marked_with_when_and_why_in_utc(world, away_from_utc):
    import re

    triton, sup, _, _ = world
    triton.kill("solo_0_0")
    sup.check()
    reload = json.loads(_reloads(triton, "solo")[-1]["parameters"]["config"])
    marker = reload["parameters"][supervisor.RELOADED]["string_value"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: stub solo_0_0 \(pid \d+\) died \(killed by SIGKILL\)", marker)
    when = datetime.strptime(marker[:20], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 60
    assert "model_warmup" not in reload and "model_warmup" in triton.config("solo")


def test_where_the_marked_load_is_refused_the_model_is_unloaded_and_loaded_as_it_is(world):
    triton, sup, _, lines = world
    triton.refuse_config.add("solo")
    triton.kill("solo_0_0")
    sup.check()
    assert triton.unloads == ["solo"] and [body for m, body in triton.loads if m == "solo"][-1] == {}
    assert triton.state["solo"] == ("READY", "") and lines[-1].startswith("solo: stub solo_0_0")
