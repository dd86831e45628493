"""trtexec as a subprocess, driven with the trtexec STAND-IN (tests/standins/trtexec.py), never real
TensorRT: exit codes, log capture, timeout, and a crash mid-build leaving no plan."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time

import pytest

from tests.convert import build_job
from tritonize.convert import trtexec
from tritonize.convert.builders import LOG_NAME, TrtexecBuilder, pick_builders
from tritonize.convert.trtexec import BuildJob, run_trtexec, trtexec_argv
from tritonize.errors import TritonizeError


@pytest.fixture
def job() -> BuildJob:
    return build_job(onnx_file="model.onnx", plan_file="model.plan", input_name="input", output_name="output",
                    input_shape=(3, 224, 224), profile={"min": 1, "opt": 16, "max": 32}, precision="fp16",
                    workspace_mib=1024, timing_cache="timing.cache")


def run(standin, tmp_path, job, monkeypatch, mode, timeout=30):
    (tmp_path / job.onnx_file).write_bytes(b"")  # the stand-in only checks that it exists
    monkeypatch.setenv("STANDIN_MODE", mode)
    argv = trtexec_argv(job, "10.5.0", executable=str(standin))
    return run_trtexec(argv, tmp_path, job, LOG_NAME, timeout)


def test_success_renames_partial_and_keeps_log(standin_trtexec, tmp_path, job, monkeypatch):
    result = run(standin_trtexec, tmp_path, job, monkeypatch, "ok")
    assert result.returncode == 0 and not result.timed_out
    assert (tmp_path / "model.plan").is_file() and not (tmp_path / job.partial_plan).exists()
    log = (tmp_path / LOG_NAME).read_text()
    assert log.startswith("$ " + str(standin_trtexec)) and "Engine built" in log and "--stronglyTyped" in log


def test_failure_exit_code_leaves_no_plan(standin_trtexec, tmp_path, job, monkeypatch):
    result = run(standin_trtexec, tmp_path, job, monkeypatch, "fail")
    assert result.returncode == 1
    assert not (tmp_path / "model.plan").exists() and not (tmp_path / job.partial_plan).exists()
    assert "stand-in parse failure" in (tmp_path / LOG_NAME).read_text()


def test_crash_mid_build_leaves_no_plan(standin_trtexec, tmp_path, job, monkeypatch):
    (tmp_path / "model.plan").write_bytes(b"old")  # a previous plan is not mistaken for the new one
    result = run(standin_trtexec, tmp_path, job, monkeypatch, "crash")
    assert result.returncode < 0  # killed by SIGSEGV after writing half an engine
    assert not (tmp_path / job.partial_plan).exists()
    assert (tmp_path / "model.plan").read_bytes() == b"old"


def test_timeout_stops_the_process_and_leaves_no_plan(standin_trtexec, tmp_path, job, monkeypatch):
    result = run(standin_trtexec, tmp_path, job, monkeypatch, "hang", timeout=2)
    assert result.timed_out and result.seconds < 30
    assert not (tmp_path / "model.plan").exists() and not (tmp_path / job.partial_plan).exists()


def test_builder_reports_failure_as_one_line(standin_trtexec, tmp_path, job, monkeypatch):
    (tmp_path / job.onnx_file).write_bytes(b"")
    builder = TrtexecBuilder(str(standin_trtexec))
    assert builder.why_not() is None and builder.tensorrt_version() == "10.5.0.18"  # the banner's [b18]
    monkeypatch.setenv("STANDIN_MODE", "fail")
    with pytest.raises(TritonizeError, match=r"exit code 1: .*stand-in parse failure.*no plan written"):
        builder.build(job, tmp_path, 30)
    monkeypatch.setenv("STANDIN_MODE", "hang")
    with pytest.raises(TritonizeError, match="timed out"):
        builder.build(job, tmp_path, 1)


def test_auto_picks_the_builders_that_can_run_and_says_why(standin_trtexec, job):
    from tritonize.convert.builders import Builder

    class Refuses(Builder):
        name = "container"

        def why_not(self):
            return "no docker engine"

    builders = {"container": Refuses(), "trtexec": TrtexecBuilder(str(standin_trtexec))}
    usable, why = pick_builders("auto", builders, job)
    assert usable == [builders["trtexec"]] and "container: no docker engine" in why
    assert pick_builders("container", builders, job) == ([], "container: no docker engine")


def test_errors_trtexec_writes_to_stderr_land_in_the_log(standin_trtexec, tmp_path, job, monkeypatch):
    """trtexec's logger sends warnings and errors to stderr: the log must hold them next to stdout."""
    run(standin_trtexec, tmp_path, job, monkeypatch, "fail")
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    assert lines[0] == "$ " + " ".join(trtexec_argv(job, "10.5.0", executable=str(standin_trtexec)))
    assert lines[-1] == "[E] Error[4]: stand-in parse failure"


def test_an_empty_engine_file_is_not_published(standin_trtexec, tmp_path, job, monkeypatch):
    result = run(standin_trtexec, tmp_path, job, monkeypatch, "empty")
    assert result.returncode == 0 and not (tmp_path / "model.plan").exists()
    assert not (tmp_path / job.partial_plan).exists()


def _kill_command(marker):
    """What `docker kill <name>` stands for: a command that stops the build from outside (here it leaves a mark)."""
    return [sys.executable, "-c", f"import pathlib, sys; pathlib.Path({str(marker)!r}).touch(); print('noise')"]


def test_timeout_runs_the_kill_command_and_kills_what_ignores_sigterm(standin_trtexec, tmp_path, job, monkeypatch,
                                                                        capfd):
    monkeypatch.setattr(trtexec, "STOP_GRACE_S", 0.5)
    (tmp_path / job.onnx_file).write_bytes(b"")
    monkeypatch.setenv("STANDIN_MODE", "stubborn")
    argv = trtexec_argv(job, "10.5.0", executable=str(standin_trtexec))
    result = run_trtexec(argv, tmp_path, job, LOG_NAME, 2, kill=_kill_command(tmp_path / "killed"))
    assert result.timed_out and result.returncode == -signal.SIGKILL  # SIGTERM ignored, SIGKILL after the grace
    assert (tmp_path / "killed").exists() and "noise" not in capfd.readouterr().out  # the kill command's output kept
    assert not (tmp_path / "model.plan").exists() and not (tmp_path / job.partial_plan).exists()


def test_ctrl_c_stops_the_build_runs_the_kill_command_and_leaves_no_partial_plan(standin_trtexec, tmp_path, job,
                                                                                   monkeypatch):
    (tmp_path / job.onnx_file).write_bytes(b"")
    monkeypatch.setenv("STANDIN_MODE", "hang")
    argv = trtexec_argv(job, "10.5.0", executable=str(standin_trtexec))
    partial = tmp_path / job.partial_plan

    def interrupt_once_the_engine_file_exists():
        deadline = time.monotonic() + 30
        while not partial.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _thread.interrupt_main()  # KeyboardInterrupt in the waiting thread, as Ctrl-C raises it

    # Python's own handler: a background job (CI, `make mutation &`) starts with SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_the_engine_file_exists, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_trtexec(argv, tmp_path, job, LOG_NAME, 60, kill=_kill_command(tmp_path / "killed"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (tmp_path / "killed").exists() and not partial.exists() and not (tmp_path / "model.plan").exists()


def test_ctrl_c_before_trtexec_writes_anything_is_still_the_interrupt(tmp_path, job):
    """No partial plan exists yet: the cleanup must not turn Ctrl-C into a FileNotFoundError."""
    started = tmp_path / "started"
    slow = tmp_path / "trtexec"
    slow.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")
    slow.chmod(0o755)

    def interrupt_once_it_runs():
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _thread.interrupt_main()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_trtexec([str(slow)], tmp_path, job, LOG_NAME, 60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not (tmp_path / job.partial_plan).exists() and not (tmp_path / "model.plan").exists()


def test_a_trtexec_that_cannot_start_is_one_line(tmp_path, job):
    missing = tmp_path / "bin" / "trtexec"
    with pytest.raises(TritonizeError) as e:
        run_trtexec([str(missing), "--onnx=model.onnx"], tmp_path, job, LOG_NAME, 60)
    assert str(e.value) == f"cannot start {missing}: No such file or directory"


@pytest.mark.parametrize("lines, tail", [
    (["[I] a", "", "[I] b", "  [I] c  ", "[I] d"], "[I] b | [I] c | [I] d"),
    (["[E] one", "[I] x", "[E] Error[2]: two", "ERROR: three", "[I] y", "[E] four error"],
     "[E] Error[2]: two | ERROR: three | [E] four error"),
])
def test_log_tail_lines(tmp_path, lines, tail):
    from tritonize.convert.trtexec import log_tail

    log = tmp_path / "trtexec.log"
    log.write_bytes(b"\xff\n" + "\n".join(lines).encode())  # an undecodable byte does not hide the rest
    assert log_tail(log) == tail
    assert log_tail(tmp_path / "missing.log") == ""
