"""Kill the real `tritonize` CLI at a chosen point of publishing: the child stops itself (SIGSTOP)
right after its N-th rename into a directory, and is then killed with SIGKILL, as `kill -9` would.
Renames are what publishing is made of (every file, the manifest included, is written to a
temporary name and renamed into place), so "after the N-th rename" is exact and needs no timing.
Used by tests/export and benchmarks/reliability.py.
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

directory, after = Path(sys.argv[1]).resolve(), int(sys.argv[2])
replace, renames = os.replace, 0

def stopping_replace(src, dst, **kwargs):
    global renames
    replace(src, dst, **kwargs)
    if Path(dst).resolve().parent == directory:
        renames += 1
        if renames == after:
            os.kill(os.getpid(), signal.SIGSTOP)

os.replace = stopping_replace
sys.argv = ["tritonize", *sys.argv[3:]]
from tritonize.cli import main
main()
"""


def killed_after_rename(directory: Path, renames: int, *args: str) -> bool:
    """Run `tritonize ARGS...` and kill it right after its `renames`-th rename into `directory`.
    False when it finished before (it renamed fewer files)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), str(renames), *map(str, args)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status = os.waitpid(child.pid, os.WUNTRACED)  # returns when it stops itself, or ends
    if os.WIFSTOPPED(status):
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
    child.returncode = 0  # reaped here; keeps Popen from waiting on it again
    return os.WIFSTOPPED(status)
