"""Which of Triton's /tmp folders are one server's own (serve/leftovers.py), on logs written here in tritonserver's
format and folders made here, in a private directory standing for /tmp (the real one is shared with other servers;
tests/serve/test_embedded.py and test_server_healing.py do it against real servers beside a foreign one)."""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest

from tritonize.serve import leftovers
from tritonize.serve.leftovers import MARK, ServerLog

BACKENDS = {"onnx_model": "onnxruntime", "onnx_idle": "onnxruntime", "torch_model": "pytorch", "preprocess": "python",
            "onnx_classifier": "ensemble"}


@pytest.fixture(autouse=True)
def tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(leftovers, "TMP", tmp_path)
    return tmp_path


def _glog(when: float, message: str, severity: str = "I") -> str:
    """One line as tritonserver's glog writes it (local time, no year)."""
    return f'{severity}{datetime.fromtimestamp(when).strftime("%m%d %H:%M:%S.%f")} 4242 model_lifecycle.cc:472] {message}'


def _made(tmp: Path, name: str) -> tuple[Path, float]:
    folder = tmp / name
    folder.mkdir()
    return folder, folder.stat().st_ctime


def _log(tmp: Path, *lines: str, before: str = "") -> ServerLog:
    path = tmp.parent / "tritonserver.log"
    path.write_text(before + "".join(line + "\n" for line in lines))
    return ServerLog(path, len(before.encode()))


def _load(model: str, start: float, instance: float) -> list[str]:
    return [_glog(start, f'"loading: {model}:1"'),
            _glog(instance, f'"TRITONBACKEND_ModelInstanceInitialize: {model}_0_0 (CPU device 0)"')]


def test_the_folder_made_while_a_backend_first_loads_is_the_servers(tmp):
    earlier, _ = _made(tmp, "python_env_Earl1r")
    time.sleep(0.1)
    ours, made = _made(tmp, "python_env_0urs00")
    time.sleep(0.1)
    later, _ = _made(tmp, "python_env_La7er0")
    log = _log(tmp, *_load("onnx_model", made - 0.005, made + 0.005), *_load("onnx_idle", made + 0.01, made + 0.02))
    assert leftovers.own(log, BACKENDS.get) == {ours}


def test_a_folder_made_beside_it_at_the_same_moment_leaves_all_of_them_unclaimed(tmp):
    ours, made = _made(tmp, "python_env_0urs00")
    _made(tmp, "python_env_0ther0")  # another server's, within the same bracket
    log = _log(tmp, *_load("onnx_model", made - 0.005, made + 0.05))
    assert leftovers.own(log, BACKENDS.get) == set()


def test_two_backends_loading_together_make_two_folders(tmp):
    python, made = _made(tmp, "python_env_Pyth0n")
    onnx, _ = _made(tmp, "python_env_0nnx00")
    log = _log(tmp, _glog(made - 0.004, '"loading: onnx_model:1"'), _glog(made - 0.003, '"loading: preprocess:1"'),
               _glog(made + 0.002, '"TRITONBACKEND_ModelInstanceInitialize: preprocess_0_0 (CPU device 0)"'),
               _glog(made + 0.03, '"TRITONBACKEND_ModelInstanceInitialize: onnx_model_0_0 (CPU device 0)"'))
    assert leftovers.own(log, BACKENDS.get) == {python, onnx}
    one_backend = {"onnx_model": "onnxruntime", "preprocess": "onnxruntime"}  # then the second one is not its own
    assert leftovers.own(log, one_backend.get) == set()


def test_brackets_far_apart_are_judged_each_alone(tmp):
    python, made = _made(tmp, "python_env_Pyth0n")
    time.sleep(0.2)
    torch, later = _made(tmp, "python_env_T0rch0")
    _made(tmp, "python_env_0ther0")  # beside the second: that one is ambiguous, the first is not
    log = _log(tmp, *_load("preprocess", made - 0.003, made + 0.003), *_load("torch_model", later - 0.003, later + 0.003))
    assert leftovers.own(log, BACKENDS.get) == {python}


def test_only_a_first_load_of_a_python_based_backend_counts(tmp):
    folder, made = _made(tmp, "python_env_Ens3mb")
    # An ensemble, a model of no known backend, a backend that is not Python-based: no folder of theirs
    log = _log(tmp, *_load("onnx_classifier", made - 0.003, made + 0.003), *_load("mystery", made - 0.003, made + 0.003),
               *_load("native", made - 0.003, made + 0.003))
    assert leftovers.own(log, {**BACKENDS, "native": "onnxruntime_native"}.get) == set()
    # A backend loaded already: a later load of another model of it makes none
    log = _log(tmp, *_load("onnx_model", made - 100, made - 99), *_load("onnx_idle", made - 0.003, made + 0.003))
    assert leftovers.own(log, BACKENDS.get) == set()
    # A load that never reached an instance (its config refused): not known to have made one
    log = _log(tmp, _glog(made - 0.003, '"loading: onnx_model:1"'), _glog(made + 0.003, "\"failed to load 'onnx_model'\""))
    assert leftovers.own(log, BACKENDS.get) == set()


def test_the_clock_of_a_folder_may_lag_the_logs_by_a_tick(tmp):
    folder, made = _made(tmp, "python_env_Lag000")
    log = _log(tmp, *_load("onnx_model", made + 0.015, made + 0.03))  # its ctime read before the line's time
    assert leftovers.own(log, BACKENDS.get) == {folder}
    log = _log(tmp, *_load("onnx_model", made + 0.025, made + 0.03))
    assert leftovers.own(log, BACKENDS.get) == set()
    log = _log(tmp, *_load("onnx_model", made - 0.05, made - 0.025))
    assert leftovers.own(log, BACKENDS.get) == set()


def test_only_its_own_part_of_the_log_counts(tmp):
    folder, made = _made(tmp, "python_env_Bef0re")
    before = "\n".join(_load("onnx_model", made - 0.003, made + 0.003)) + "\n"  # the server before a crash
    assert leftovers.own(_log(tmp, before=before), BACKENDS.get) == set()
    assert leftovers.own(_log(tmp, before.rstrip("\n")), BACKENDS.get) == {folder}


def test_a_log_begun_last_year(tmp):
    log = _log(tmp, '''I1231 23:59:59.500000 4242 model_lifecycle.cc:472] "loading: onnx_model:1"''',
               '''I0101 00:00:00.250000 4242 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: onnx_model_0_0 (CPU)"''')
    times = [when for when, _ in log.lines(now=datetime(2027, 1, 1, 0, 0, 5))]
    assert times == [datetime(2026, 12, 31, 23, 59, 59, 500000).timestamp(), datetime(2027, 1, 1, 0, 0, 0, 250000).timestamp()]
    assert [m for _, m in log.lines()][0] == '"loading: onnx_model:1"'


def test_lines_not_of_glog_and_a_missing_log_are_skipped(tmp):
    log = _log(tmp, "+----------+", "| Backend |", _glog(time.time(), '"ready"', "W"), "I1301 00:00:00.000000 1 x.cc:1] bad month")
    assert [m for _, m in log.lines()] == ['"ready"']
    assert list(ServerLog(tmp / "nowhere.log").lines()) == []


def test_a_folder_its_log_names_is_its_own(tmp):
    named = tmp / "folderAb12Cd"
    (named / "1").mkdir(parents=True)
    (named / "1" / "model.py").write_text("raise")
    (tmp / "folderZz99Yy").mkdir()  # another server's
    line = _glog(time.time(), f'"failed to load \'m\' version 1: Internal: RuntimeError: why\\n\\nAt:\\n  {tmp}/folderAb12Cd/1/model.py(3): initialize\\n"', "E")
    log = _log(tmp, line, _glog(time.time(), f'"a mention of {tmp}/folderGone00/1/model.py"'))
    assert leftovers.own(log, BACKENDS.get) == {named}
    leftovers.remove({named})
    assert not named.exists() and (tmp / "folderZz99Yy").exists()


def test_a_mark_says_which_server_and_who_ran_it(tmp):
    ours, made = _made(tmp, "python_env_0urs00")
    override, _ = _made(tmp, "folderN0tMe0")
    log = _log(tmp)
    time.sleep(0.1)
    leftovers.mark(log, {ours, override}, os.getpid())
    text = (ours / MARK).read_text()
    assert text.startswith(f"tritonserver {os.getpid()} ") and leftovers.group_of(text) == os.getpgrp()
    assert f"\nowner {os.getpid()} " in text and not (override / MARK).exists()  # its model.py says who sent it
    assert log.marked == {ours: made} and leftovers.marked(log) == {ours}
    # The mark moved the folder's ctime: a later look goes by the time it had before
    later = _log(tmp, *_load("onnx_model", made - 0.003, made + 0.003))
    assert leftovers.own(later, BACKENDS.get) == set()
    later.marked = log.marked
    assert leftovers.own(later, BACKENDS.get) == {ours}
    (ours / MARK).write_text("tritonserver 1 2\nowner 3 4 group 5\n")  # another server's mark now: not ours
    assert leftovers.marked(log) == set()


def test_removal_takes_only_a_folder_that_holds_nothing_but_its_mark(tmp):
    empty, _ = _made(tmp, "python_env_Empty0")
    marked, _ = _made(tmp, "python_env_Mark00")
    (marked / MARK).write_text("x")
    used, _ = _made(tmp, "python_env_Used00")
    (used / "0").mkdir()  # an execution environment extracted
    override = tmp / "folderOvr000"
    (override / "1").mkdir(parents=True)
    (override / "config.pbtxt").write_text("")
    leftovers.remove({empty, marked, used, override, tmp / "python_env_Gone00"})
    assert not empty.exists() and not marked.exists() and not override.exists() and (used / "0").exists()


def test_group_of_a_mark_and_of_a_give_ups_model_file():
    assert leftovers.group_of("tritonserver 1 2\nowner 10 20 group 30\n") == 30
    assert leftovers.group_of("class T:\n    pass\n# tritonize 0123abcd 10 20 group 31\n") == 31
    assert leftovers.group_of("class T:\n    pass\n") is None
    assert leftovers.group_of("owner 10 20 group x\n") is None
    assert f"group {os.getpgrp()}" in leftovers.owner()


def test_backends_in_reads_the_configs_as_triton_maps_them(tmp_path):
    from tritonize.serve.unavailable import write_model

    repo, notes = tmp_path / "repo", tmp_path / "notes"
    for name, field in (("a", 'platform: "onnxruntime_onnx"'), ("b", 'backend: "pytorch"'), ("e", 'platform: "ensemble"'),
                        ("c", "max_batch_size: 1")):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{field}\n')
    (repo / "c" / "configs").mkdir()
    (repo / "c" / "configs" / "cpu.pbtxt").write_text('name: "c"\nplatform: "tensorrt_plan"\n')
    (repo / "broken").mkdir()
    (repo / "broken" / "config.pbtxt").write_text("not { a config")
    write_model(notes, "trt_model", "not built here")
    backend_of = leftovers.backends_in((repo, notes))
    assert [backend_of(m) for m in ("a", "b", "e", "c", "broken", "trt_model", "nowhere")] == [
        "onnxruntime", "pytorch", "ensemble", "tensorrt", None, "python", None]


def test_a_backend_that_is_not_python_based_makes_no_folder(tmp):
    folder, made = _made(tmp, "python_env_Nat1ve")
    log = _log(tmp, *_load("native", made - 0.003, made + 0.003))
    assert leftovers.own(log, {"native": "onnxruntime_native"}.get) == set()


def test_brackets_a_few_ms_apart_are_one_and_the_longer_end_holds(tmp):
    """Two backends whose first loads overlap, or start within SLACK_S of each other, make their folders within one
    span: both are the server's only if both are within it."""
    first, made = _made(tmp, "python_env_F1rst0")
    second, _ = _made(tmp, "python_env_Sec0nd")
    apart = _log(tmp, *_load("preprocess", made - 0.003, made + 0.002), *_load("torch_model", made + 0.012, made + 0.017))
    assert leftovers.own(apart, BACKENDS.get) == {first, second}
    time.sleep(0.08)
    late, later = _made(tmp, "python_env_La7e00")
    inside = _log(tmp, *_load("preprocess", made - 0.003, later + 0.003), *_load("torch_model", made + 0.004, made + 0.006))
    shutil.rmtree(second)
    assert leftovers.own(inside, BACKENDS.get) == {first, late}  # the second load ends first: the span is the first's


def test_a_named_folder_and_a_backends_folder_together_and_a_named_file_is_none(tmp):
    named = tmp / "folderAb12Cd"
    named.mkdir()
    (tmp / "folderF1le00").write_text("a file, not Triton's folder")
    env, made = _made(tmp, "python_env_B0th00")
    log = _log(tmp, *_load("onnx_model", made - 0.003, made + 0.003),
               _glog(made, f'"at {tmp}/folderAb12Cd/1/model.py and {tmp}/folderF1le00/1/model.py"'))
    assert leftovers.own(log, BACKENDS.get) == {named, env}


def test_a_log_dated_ahead_by_more_than_a_day_is_last_years(tmp):
    log = _log(tmp, 'I0102 12:00:00.000000 4242 x.cc:1] "late"', 'I0101 23:00:00.000000 4242 x.cc:1] "same day"')
    times = [when for when, _ in log.lines(now=datetime(2027, 1, 1, 0, 0, 5))]
    assert times == [datetime(2026, 1, 2, 12).timestamp(), datetime(2027, 1, 1, 23).timestamp()]
    log.path.write_bytes(b'I0101 00:00:01.000000 1 x.cc:1] "\xff"\n')
    assert [m for _, m in log.lines(now=datetime(2027, 1, 1, 0, 0, 5))] == ['"\ufffd"']


def test_marks_and_owners_carry_start_times_and_a_folder_gone_meanwhile_is_no_error(tmp):
    from tritonize.processes import start_time

    assert leftovers.owner() == f"{os.getpid()} {start_time(os.getpid())} group {os.getpgrp()}"
    log = _log(tmp)
    gone = tmp / "python_env_G0ne00"
    leftovers.mark(log, {gone}, os.getpid())  # removed before its mark: nothing, no error
    assert log.marked == {} and log.mark.startswith(f"tritonserver {os.getpid()} {start_time(os.getpid())}\n")
    kept, made = _made(tmp, "python_env_Kept00")
    leftovers.mark(log, {kept}, os.getpid())
    (kept / MARK).unlink()
    assert leftovers.marked(log) == set()  # its mark gone: no longer known as ours


def test_removal_keeps_the_mark_of_a_folder_it_leaves(tmp):
    used, _ = _made(tmp, "python_env_Used00")
    (used / "0").mkdir()
    (used / MARK).write_text("ours")
    leftovers.remove({used})
    assert (used / MARK).read_text() == "ours"


def test_a_marked_folder_is_orphaned_only_once_its_server_and_its_owner_are_both_gone(tmp):
    """A `tritonize serve` killed with -9 leaves its server's python_envs; the next start removes those (its server
    and its owner gone), never one whose server or owner still runs, nor one without a mark."""
    import subprocess

    from tritonize.processes import start_time

    me = f"{os.getpid()} {start_time(os.getpid())}"
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = f"{gone.pid} {start_time(os.getpid())}"  # a pid that ran, with a start time that is not its
    marks = {"both_gone": (dead, dead), "server_runs": (me, dead), "owner_runs": (dead, me)}
    for name, (server, owner) in marks.items():
        folder = tmp / f"python_env_{name[:6]}"
        folder.mkdir()
        (folder / MARK).write_text(f"tritonserver {server}\nowner {owner} group 1\n")
    (tmp / "python_env_nomark").mkdir()
    another = _proc(tmp, {4242: "tritonserver"})  # another server runs: an unmarked folder may be its own
    assert leftovers.orphaned(another) == {tmp / "python_env_both_g"}
    leftovers.remove(leftovers.orphaned(another))
    assert sorted(p.name for p in tmp.iterdir() if p.name != "proc") == [
        "python_env_nomark", "python_env_owner_", "python_env_server"]


def _proc(tmp: Path, processes: dict[int, str]) -> Path:
    """A /proc of `processes` (pid -> command name)."""
    proc = tmp / "proc"
    shutil.rmtree(proc, ignore_errors=True)
    for pid, name in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(name + "\n")
    (proc / "self").mkdir(parents=True, exist_ok=True)
    return proc


def test_with_no_tritonserver_left_on_the_machine_empty_unmarked_folders_are_orphaned(tmp):
    """A killed server's python_env that could not be told from another's (two servers started together) stays
    unmarked; once no tritonserver runs anywhere, no server can use it: removed at the next start, with this user's
    other empty ones. One with files in it (an extracted execution environment) or another user's stays."""
    empty = tmp / "python_env_Empty0"
    empty.mkdir()
    used = tmp / "python_env_Used00"
    (used / "env").mkdir(parents=True)
    assert leftovers.orphaned(_proc(tmp, {1: "systemd", 4242: "tritonserver"})) == set()
    assert leftovers.orphaned(_proc(tmp, {1: "systemd", 77: "triton_python_b"})) == {empty}  # a stub alone uses none
    leftovers.remove(leftovers.orphaned(_proc(tmp, {1: "systemd"})))
    assert not empty.exists() and used.exists()


def test_a_running_tritonserver_is_found_by_its_name(tmp_path):
    """The real /proc: a process named tritonserver (here a copy of sleep) is found, whatever its arguments."""
    import subprocess

    binary = tmp_path / "tritonserver"
    shutil.copy(shutil.which("sleep"), binary)
    process = subprocess.Popen([str(binary), "30"])
    try:
        assert process.pid in leftovers.tritonservers()
    finally:
        process.kill()
        process.wait()
    assert process.pid not in leftovers.tritonservers()
