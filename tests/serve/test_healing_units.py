"""serve/healing.py against the supervisor's fake Triton (test_supervisor_clock.py): what the recorder reads, what the
restore loads and in which order, and the first request after it. The real server killed and restored is in
test_server_healing.py; these run in `make mutation`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.serve.test_supervisor_clock import FakeTriton, http
from tritonize.access import ControlKey
from tritonize.serve import healing
from tritonize.serve.healing import Recorder, Served, first_answer, read, restore
from tritonize.serve.supervisor import RELOADED

KEY = ControlKey("k" * 24)


@pytest.fixture
def triton():
    fake = FakeTriton({"solo": 1, "pair": 2, "image": 1})
    server, thread = http(fake)
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_read_takes_ready_models_configs_and_the_failed_ones(triton):
    triton.state.update(pair=("UNAVAILABLE", "unloaded"), image=("UNAVAILABLE", "failed to load: broken"))
    triton.state["new"], triton.count["new"] = ("LOADING", ""), 1
    triton.state["idle"] = ("UNAVAILABLE", "not loaded")
    served = read(triton.url, None)
    assert served.configs == {"solo": triton.config("solo")} and sorted(served.failed) == ["image", "new"]
    # a model known already keeps the config recorded, unless it was loaded again since
    known = {"solo": {"name": "solo", "recorded": True}}
    assert read(triton.url, None, known).configs == known
    assert read(triton.url, None, known, loaded={"solo"}).configs == {"solo": triton.config("solo")}


def test_read_sends_the_control_key_and_skips_a_model_unloaded_meanwhile(triton, monkeypatch):
    triton.key_headers = dict(KEY.http_headers)
    with pytest.raises(OSError):
        read(triton.url, None)  # 403 without it
    assert set(read(triton.url, KEY).configs) == {"solo", "pair", "image"}
    real_handle = triton.handle

    def gone(method, path, body, headers=None):
        if path == "/v2/models/pair/config":
            return 400, {"error": "Request for unknown model: 'pair' is not found"}
        return real_handle(method, path, body, headers)

    monkeypatch.setattr(triton, "handle", gone)
    assert set(read(triton.url, KEY).configs) == {"solo", "image"}


def test_the_recorder_keeps_the_last_state_read_and_reads_a_config_again_when_the_log_says_it_loaded(triton, tmp_path,
                                                                                                    monkeypatch):
    monkeypatch.setattr(healing, "RECORD_S", 0.02)
    log = tmp_path / "server.log"
    log.write_text("I... earlier: successfully loaded 'solo'\n")
    recorder = Recorder(triton.url, None, Served({"solo": {"name": "solo", "old": True}}), log)
    recorder.start()
    try:
        _until(lambda: set(recorder.served.configs) == {"solo", "pair", "image"})
        assert recorder.served.configs["solo"] == {"name": "solo", "old": True}  # the log before its start is old
        with open(log, "a") as f:
            f.write("I1128 01:00:00.000000 1 model_lifecycle.cc:839] \"successfully loaded 'solo'\"\n")
        _until(lambda: recorder.served.configs["solo"] == triton.config("solo"))
        triton.hang_paths = {"/v2/repository/index"}  # the server stops answering: keep what it served last
        triton.release.clear()
        time.sleep(0.1)
        assert set(recorder.served.configs) == {"solo", "pair", "image"}
    finally:
        triton.release.set()
        recorder.stop()
    assert not recorder._thread.is_alive()


def _until(condition, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_restore_loads_plain_models_and_the_failed_then_the_ensembles_without_warmup_or_reload_marks(triton):
    triton.count["ens"], triton.state["ens"] = 1, ("UNAVAILABLE", "unloaded")
    solo = {**triton.config("solo"), "parameters": {RELOADED: {"string_value": "when: why"}, "kept": {"string_value": "1"}}}
    served = Served({"solo": solo, "pair": triton.config("pair"), "ens": triton.config("ens"), "image": triton.config("image")},
                    failed=("broken", "image"))
    triton.count["broken"], triton.state["broken"] = 1, ("UNAVAILABLE", "")
    triton.refuse_load.add("broken")
    errors = restore(triton.url, None, served, skip=("image",))
    loads = {name: body for name, body in triton.loads}
    assert errors == {} and set(loads) == {"solo", "pair", "broken", "ens"}
    assert [name for name, _ in triton.loads][-1] == "ens"  # after its steps
    sent = json.loads(loads["solo"]["parameters"]["config"])
    assert "model_warmup" not in sent and sent["parameters"] == {"kept": {"string_value": "1"}}
    assert loads["broken"] == {}  # loaded again as it is: its reason comes back
    assert triton.state["broken"][0] == "UNAVAILABLE"


def test_restore_says_why_a_ready_model_could_not_load_and_sends_the_key(triton):
    triton.key_headers = dict(KEY.http_headers)
    triton.refuse_config.add("pair")
    errors = restore(triton.url, KEY, Served({"solo": triton.config("solo"), "pair": triton.config("pair")}))
    assert errors == {"pair": "pair: failed to load 'pair': the config override is refused"}
    assert restore(triton.url, None, Served({"solo": triton.config("solo")})) == {
        "solo": "solo: This API is restricted, expecting header 'triton-control-key'"}
    gone = restore("http://127.0.0.1:9", None, Served({"solo": triton.config("solo")}))
    assert list(gone) == ["solo"] and gone["solo"].startswith("solo: <urlopen error")


def test_the_first_answer_is_a_valid_request_to_a_plain_model(triton, monkeypatch):
    served = Served({"ens": {"platform": "ensemble"}, "solo": triton.config("solo"), "image": triton.config("image")})
    dead = threading.Event()
    assert first_answer(triton.url, served, {"ens", "solo", "image"}, dead) is None
    assert triton.infers == [("image", "image_0_0")]  # the first plain one by name: an encoded image, valid
    assert first_answer(triton.url, served, {"ens"}, dead) is None and len(triton.infers) == 1  # none to ask
    triton.hang("solo_0_0")
    monkeypatch.setattr(healing, "FIRST_ANSWER_S", 0.2)
    assert first_answer(triton.url, served, {"solo"}, dead) == "solo: Stub process 'solo_0_0' is not healthy."
    asked = len(triton.infers)
    assert asked >= 4  # asked again every 0.1 s till the time was up
    dead.set()
    monkeypatch.setattr(healing, "FIRST_ANSWER_S", 30)
    start = time.monotonic()
    assert first_answer(triton.url, served, {"solo"}, dead).startswith("solo: ")
    assert time.monotonic() - start < 5 and len(triton.infers) == asked + 1  # a dead server is asked once
    assert first_answer("http://127.0.0.1:9", served, {"solo"}, dead).startswith("solo: <urlopen error")


def test_errors_without_a_body_say_what_http_said(triton, monkeypatch):
    triton.bare_errors = True
    triton.refuse_load.add("pair")
    assert restore(triton.url, None, Served({"pair": triton.config("pair")})) == {"pair": "pair: HTTP Error 400: Bad Request"}
    triton.hang("solo_0_0")
    monkeypatch.setattr(healing, "FIRST_ANSWER_S", 0.0)
    assert first_answer(triton.url, Served({"solo": triton.config("solo")}), {"solo"}, threading.Event()) == \
        "solo: HTTP Error 400: Bad Request"


def test_the_recorder_sends_the_key_goes_on_after_errors_and_reads_each_log_line_once(triton, tmp_path, monkeypatch):
    """Started before the server wrote a log, it reads every line once (a reload's config again, a later change
    without a reload not), past bytes that are not UTF-8; a server that fails a while does not end it."""
    monkeypatch.setattr(healing, "RECORD_S", 0.02)
    triton.key_headers = dict(KEY.http_headers)
    log = tmp_path / "server.log"
    recorder = Recorder(triton.url, KEY, Served(), log)
    assert recorder._thread.daemon and recorder._thread.name == "tritonize-recorder"  # never holds serve's exit
    recorder.start()
    try:
        _until(lambda: set(recorder.served.configs) == {"solo", "pair", "image"})
        real = triton.config
        monkeypatch.setattr(triton, "config", lambda name: {**real(name), "marked": 1} if name == "solo" else real(name))
        log.write_bytes(b"successfully loaded 'solo' \xff\n")
        _until(lambda: recorder.served.configs["solo"].get("marked") == 1)  # the line read: its config again
        monkeypatch.setattr(triton, "config", lambda name: {**real(name), "marked": 2} if name == "solo" else real(name))
        with open(log, "ab") as f:
            f.write(b"I... successfully loaded 'pair'\n")
        _until(lambda: recorder.served.configs["pair"] == real("pair"))
        time.sleep(0.1)
        assert recorder.served.configs["solo"].get("marked") == 1  # no new line for solo: not read again
        handle = triton.handle
        monkeypatch.setattr(triton, "handle", lambda *a, **k: (500, {"error": "down"}))
        time.sleep(0.1)
        triton.state["pair"] = ("UNAVAILABLE", "unloaded")
        monkeypatch.setattr(triton, "handle", handle)
        _until(lambda: "pair" not in recorder.served.configs)  # still recording after the errors
    finally:
        recorder.stop()


def test_an_ensemble_is_loaded_only_once_its_steps_loads_returned(triton, monkeypatch):
    """Loaded beside its steps, an ensemble makes Triton load them from their files: the configs the clients had
    set would be lost. A step's load that takes a while (here: answered only once `release` is set) holds the
    ensemble's back."""
    triton.count["ens"], triton.state["ens"] = 1, ("UNAVAILABLE", "unloaded")
    triton.hang_paths = {"/v2/repository/models/solo/load"}
    triton.release.clear()
    handled = []
    real = triton.handle
    monkeypatch.setattr(triton, "handle", lambda method, path, *rest: handled.append((path, triton.release.is_set()))
                        or real(method, path, *rest))
    timer = threading.Timer(0.5, triton.release.set)
    timer.start()
    served = Served({"ens": triton.config("ens"), "solo": triton.config("solo"), "pair": triton.config("pair")})
    try:
        errors = restore(triton.url, None, served)
    finally:
        timer.join()
    assert list(errors) == ["solo"]  # the stand-in never answers a load it held
    assert ("/v2/repository/models/ens/load", True) in handled and ("/v2/repository/models/pair/load", False) in handled


def test_a_load_that_never_answers_is_an_error_after_the_load_timeout(triton, monkeypatch):
    """A server alive but stuck in a load does not hold the heal forever."""
    monkeypatch.setattr(healing, "LOAD_TIMEOUT_S", 0.3)
    triton.hang_paths = {"/v2/repository/models/solo/load"}
    triton.release.clear()
    start = time.monotonic()
    errors = restore(triton.url, None, Served({"solo": triton.config("solo"), "pair": triton.config("pair")}))
    assert errors == {"solo": "solo: timed out"} and time.monotonic() - start < 5
    assert [name for name, _ in triton.loads] == ["pair"]


def test_the_recorder_reads_on_from_where_it_was_however_long_the_log_was_at_its_start(triton, tmp_path, monkeypatch):
    """A line of the log is read once: the load of `solo` at the server's start, before the recorder's, is never read
    again, however short the lines after it."""
    monkeypatch.setattr(healing, "RECORD_S", 0.02)
    log = tmp_path / "server.log"
    log.write_text("I... a line of the server's start\n" * 20 + "I... \"successfully loaded 'solo'\"\n")
    recorded = {name: {"name": name, "recorded": True} for name in ("solo", "pair", "image")}
    recorder = Recorder(triton.url, None, Served(dict(recorded)), log)
    recorder.start()
    try:
        with open(log, "a") as f:
            f.write("successfully loaded 'pair'\n")
        _until(lambda: recorder.served.configs["pair"] == triton.config("pair"))
        time.sleep(0.2)  # rounds enough to read any line again
        assert recorder.served.configs["solo"] == recorded["solo"]
    finally:
        recorder.stop()


def test_a_config_that_never_comes_is_an_error_after_the_timeout(triton, monkeypatch):
    """A server that takes the request for a config and never answers: read() gives up after TIMEOUT_S (an OSError,
    on which the recorder keeps what it had) instead of holding serve's start or the recorder for ever."""
    monkeypatch.setattr(healing, "TIMEOUT_S", 0.3)
    triton.hang_paths = {"/v2/models/pair/config"}
    triton.release.clear()
    start = time.monotonic()
    with pytest.raises(OSError, match="timed out"):
        read(triton.url, None)
    assert time.monotonic() - start < 5


def test_a_first_request_that_never_answers_is_asked_again_and_said_after_first_answer_s(triton, monkeypatch):
    """A stub that takes the request and never answers: each request gives up after TIMEOUT_S, and serve says so
    once FIRST_ANSWER_S passed instead of waiting for ever."""
    monkeypatch.setattr(healing, "TIMEOUT_S", 0.2)
    monkeypatch.setattr(healing, "FIRST_ANSWER_S", 0.5)
    triton.hang_paths = {"/v2/models/solo/infer"}
    triton.release.clear()
    start = time.monotonic()
    assert first_answer(triton.url, Served({"solo": triton.config("solo")}), {"solo"}, threading.Event()) == "solo: timed out"
    assert time.monotonic() - start < 5 and triton.hung_requests >= 2
