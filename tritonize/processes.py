"""Child processes that tritonize starts (tritonserver, its stubs, Prometheus): tied to their parent's life, stopped
as a whole group, and told apart from a later process that got the same pid."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

STOP_GRACE_S = 20.0  # Triton finishes in-flight requests and unloads models on SIGTERM


def die_with_parent() -> None:
    """Runs in the child before exec: if the Python process that started the server dies without
    stopping it (SIGKILL, a SIGTERM it does not handle), the kernel sends the server SIGTERM, so no
    orphaned server keeps the ports. (Linux; tied to the starting thread, here the main one.)"""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_process_group(process: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group (server and its backend stubs), SIGKILL what is left after
    `grace` seconds, and return only once no member of the group remains."""
    pgid = process.pid  # started with start_new_session: the leader's pid is the group id
    if process.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            process.wait()
    # Stubs outlive a server that crashed or was killed: end them too. Such a stub is init's child, and stays a
    # zombie (holding nothing: no memory, no files, no ports) until init reaps it, which took 2 s on some machines.
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # only zombies left, owned by init until reaped
        return False


def _live_members(pgid: int) -> bool:
    """Whether a process of group `pgid` is alive (not a zombie)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()  # state, ppid, pgrp, ...
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def signal_name(number: int) -> str:
    """`SIGSEGV` for 11; `signal 99` for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks after boot), None once it is dead (a zombie too): with
    the pid, it tells the process from a later one that got the same pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]
