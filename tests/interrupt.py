"""Stop a child process at a chosen point of publishing, then kill it (`kill -9`) or interrupt it (Ctrl-C).

The child stops itself (SIGSTOP) right before or right after its N-th rename into a directory. Renames
are what publishing is made of (atomic_path writes every file and directory under a temporary name and
renames it into place; a directory is swapped in with two renames), so a point given as a rename is
exact and needs no timing. Then it is killed with SIGKILL, or sent SIGINT and continued, so the
KeyboardInterrupt arises exactly there. Used by tests/test_files.py, tests/export and
benchmarks/reliability.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

CHILD = """
import os, signal, sys
from pathlib import Path

directory, when, point = Path(sys.argv[1]).resolve(), sys.argv[2], int(sys.argv[3])
replace, renames = os.replace, 0

def stopping_replace(src, dst, **kwargs):
    global renames
    into = Path(dst).resolve().parent == directory
    renames += into
    if into and renames == point and when == "before":
        os.kill(os.getpid(), signal.SIGSTOP)
    replace(src, dst, **kwargs)
    if into and renames == point and when == "after":
        os.kill(os.getpid(), signal.SIGSTOP)

os.replace = stopping_replace
if sys.argv[4] == "-c":
    sys.argv = sys.argv[4:]
    exec(sys.argv[1])
else:
    sys.argv = ["tritonize", *sys.argv[4:]]
    from tritonize.cli import main
    main()
"""


def stop_at_rename(directory: Path, when: str, rename: int, how: str, *args: str) -> int | None:
    """Run `tritonize ARGS...` (or `python -c CODE` for ARGS = ("-c", CODE)), stop it `when` ("before" |
    "after") its `rename`-th rename into `directory`, then end it `how` ("kill": SIGKILL, "ctrl-c": SIGINT).
    Returns its exit status (negative: the signal that ended it), or None when it finished before that
    rename (it renamed fewer files)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), when, str(rename), *map(str, args)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status = os.waitpid(child.pid, os.WUNTRACED)  # returns when it stops itself, or ends
    if not os.WIFSTOPPED(status):
        child.returncode = 0  # reaped here; keeps Popen from waiting on it again
        return None
    if how == "kill":
        os.kill(child.pid, signal.SIGKILL)
    else:
        os.kill(child.pid, signal.SIGINT)
        os.kill(child.pid, signal.SIGCONT)
    _, status = os.waitpid(child.pid, 0)
    child.returncode = 0
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def killed_after_rename(directory: Path, renames: int, *args: str) -> bool:
    """Run `tritonize ARGS...` and kill it right after its `renames`-th rename into `directory`.
    False when it finished before (it renamed fewer files)."""
    return stop_at_rename(directory, "after", renames, "kill", *args) is not None
