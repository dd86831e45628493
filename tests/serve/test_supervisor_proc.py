"""The supervisor's readers of /proc, on real processes: children of this test process that look like
Triton's Python backend stubs (argv[0] ends with the stub's name; the instance name is one of the arguments).
The fake-clock tests replace these readers; here they run on the kernel's own process table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tritonize.processes import start_time
from tritonize.serve import supervisor
from tritonize.serve.supervisor import Stub, live_stubs, process_state, stub_processes, zombie_status

# A stub's model file: sleeps, after naming its process (/proc/<pid>/comm) as asked.
MODEL_PY = "import os, time\nif 'COMM' in os.environ:\n    open('/proc/self/comm', 'w').write(os.environ['COMM'])\ntime.sleep(60)\n"


@pytest.fixture
def spawn(tmp_path):
    """Start a fake stub, `<name> <model file> <args>` as the real one takes `<model file> <region> ...`:
    python runs the model file, with argv[0] set to a path ending in `name`. `comm`: the process's name."""
    started: list[subprocess.Popen] = []
    (tmp_path / "model.py").write_text(MODEL_PY)

    def start(*args: str | bytes, name: str = "triton_python_backend_stub", comm: str | None = None) -> subprocess.Popen:
        env = {**os.environ, **({"COMM": comm} if comm else {})}
        proc = subprocess.Popen([str(tmp_path / name), str(tmp_path / "model.py"), *args], executable=sys.executable, env=env)
        started.append(proc)
        for _ in range(300):  # until the kernel shows the new argv (after exec) and the new name
            shown = process_state(proc.pid) and b"model.py" in open(f"/proc/{proc.pid}/cmdline", "rb").read()
            if shown and (comm is None or open(f"/proc/{proc.pid}/comm").read().strip() == comm):
                break
            time.sleep(0.01)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _state_becomes(pid: int, state: str, within_s: float = 3.0) -> bool:
    """Whether the process's state letter in /proc becomes `state` within `within_s` (signals land asynchronously)."""
    deadline = time.monotonic() + within_s
    while process_state(pid) != state and time.monotonic() < deadline:
        time.sleep(0.01)
    return process_state(pid) == state


def _stub(proc: subprocess.Popen, region: str) -> Stub:
    return Stub(proc.pid, start_time(proc.pid), region)  # argv[2]: the region in a real stub's argv


def test_live_stubs_are_the_servers_children_named_like_the_stub_whatever_the_model_name(spawn):
    a = spawn("region-a", "1048576", "my-model.v2_0_1")
    b = spawn("region-b", "resnet_1_0", "--more")
    spawn("plain_0_0", name="python3-not-a-stub")  # not the stub's name
    spawn(name="triton_python_backend_stub")  # no instance name among its arguments
    found = live_stubs(os.getpid())
    assert found == {"my-model.v2_0_1": _stub(a, "region-a"), "resnet_1_0": _stub(b, "region-b")}
    assert stub_processes(os.getpid()) == {"my-model.v2_0_1": a.pid, "resnet_1_0": b.pid}
    assert live_stubs(os.getppid()) == {}  # another parent's children are not the server's


def test_a_killed_unreaped_stub_is_a_zombie_with_its_wait_status_then_gone(spawn):
    proc = spawn("region", "resnet_0_0")
    assert process_state(proc.pid) in ("S", "R")
    assert zombie_status(proc.pid, os.getpid()) is None  # alive
    os.kill(proc.pid, signal.SIGSTOP)
    assert _state_becomes(proc.pid, "T")
    os.kill(proc.pid, signal.SIGKILL)
    assert _state_becomes(proc.pid, "Z")
    assert live_stubs(os.getpid()) == {}  # a zombie is no live stub
    assert zombie_status(proc.pid, os.getpid()) == signal.SIGKILL  # the wait status: killed by signal 9
    assert zombie_status(proc.pid, os.getppid()) is None  # not that server's child
    proc.wait()
    assert zombie_status(proc.pid, os.getpid()) is None and process_state(proc.pid) is None


def test_an_exit_code_is_read_from_the_wait_status(spawn):
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert _state_becomes(proc.pid, "Z")
    status = zombie_status(proc.pid, os.getpid())
    proc.wait()
    assert status == 3 << 8
    assert supervisor._how(status) == "exit code 3"
    assert supervisor._how(signal.SIGKILL) == "killed by SIGKILL"
    assert supervisor._how(0x7F & 100) == "killed by signal 100"


def test_a_stub_whose_process_name_holds_parentheses_and_spaces_is_read_like_any_other(spawn):
    """/proc/<pid>/stat is "pid (comm) state ppid ...", and comm is whatever the process named itself: the fields
    start after the last ")"."""
    proc = spawn("region-x", "resnet_0_0", comm="x) Z 1 (y")
    assert live_stubs(os.getpid()) == {"resnet_0_0": _stub(proc, "region-x")}
    assert process_state(proc.pid) in ("S", "R")
    os.kill(proc.pid, signal.SIGSTOP)
    assert _state_becomes(proc.pid, "T")
    os.kill(proc.pid, signal.SIGKILL)
    assert _state_becomes(proc.pid, "Z")
    assert zombie_status(proc.pid, os.getpid()) == signal.SIGKILL


def test_arguments_that_are_not_utf8_do_not_hide_a_stub(spawn):
    """A region or another argument may hold any bytes: they are read with replacement characters."""
    proc = spawn(b"region-\xff", b"\xfe\xff", "resnet_0_0")
    assert live_stubs(os.getpid()) == {"resnet_0_0": _stub(proc, "region-\ufffd")}
