"""What tritonserver leaves in /tmp, and which of it is one server's own.

Triton writes two kinds of folder in /tmp, whatever TMPDIR says:
- python_env_XXXXXX: each Python-based backend (python, and here those of serve/backends/) makes one when the
  server first loads a model of it, and removes it when the server finalizes the backend at its exit: a server
  killed or crashed leaves them (216 on this machine after a day of tests).
- folderXXXXXX: the files of a load that carries them (`file:` parameters: the supervisor's give-up); Triton removes
  it when the model unloads, never when the load fails.

Other servers share /tmp (other users', other sessions'), started and killed at any time, so a server's own are
told by its log. A folderXXXXXX the log names is its own (a failed load's traceback names its model.py). A backend's
python_env is made between the log's `loading: MODEL` line of the first model of that backend and that model's first
instance line; those of the folders made within those times are taken as the server's own only where there are
exactly as many as the backends it initialized then (one more, another server's made meanwhile, and none is taken:
a folder left is better than another server's removed). The server's own found while it runs are marked with who
made them (MARK), which a later stop trusts, and which the test suite reads to count only its own leftovers. An
unmarked one a killed server left is removed by a later start once no tritonserver runs on the machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from tritonize.errors import TritonizeError
from tritonize.model_repository import PLATFORMS, parse_config
from tritonize.processes import start_time
from tritonize.serve.backends import BACKEND_NAMES

PROC = Path("/proc")
TMP = Path("/tmp")  # Triton's, whatever TMPDIR says (the Python backend's and the core's kDefaultMountDirectory)
PYTHON_ENV, OVERRIDE = "python_env_??????", "folder??????"
MARK = ".tritonize"  # in a python_env of a server of ours: "tritonserver PID START\nowner OWNER"
PYTHON_BASED = frozenset({"python", *BACKEND_NAMES})  # the backends that make a python_env in the embedded server
SLACK_S = 0.02  # a folder's ctime comes from the kernel's coarse clock, up to a tick behind the log's time of day

# glog: "I1128 01:06:53.499211 11463 model_lifecycle.cc:472] "loading: onnx_model:1"" (local time, no year)
_LINE = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ [^\]]*\] ?(.*)$")
_LOADING = re.compile(r'^"loading: (.+):\d+"$')
_INSTANCE = re.compile(r'^"TRITONBACKEND_ModelInstanceInitialize: (.+)_\d+_\d+ \(')


def owner() -> str:
    """Who this process is, in a mark: pid, start time, and process group (a test session, a shell's job)."""
    return f"{os.getpid()} {start_time(os.getpid())} group {os.getpgrp()}"


def group_of(mark: str) -> int | None:
    """The process group a mark (MARK's text, a give-up's model.py) names, None if none."""
    found = re.search(r"^(?:owner|# tritonize) .*\bgroup (\d+)$", mark, re.M)
    return int(found[1]) if found else None


def python_envs() -> set[Path]:
    return set(TMP.glob(PYTHON_ENV))


@dataclass
class ServerLog:
    """The part of a log that one tritonserver wrote: from `offset` (a log appended to after a crash holds the
    servers before it)."""

    path: Path
    offset: int = 0
    marked: dict[Path, float] = field(default_factory=dict)  # its python_envs marked while it ran -> their ctime before
    mark: str = ""  # the text of their MARK

    def lines(self, now: datetime | None = None) -> Iterator[tuple[float, str]]:
        """(epoch seconds, message) of each glog line (written by `now`)."""
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return
        now = now or datetime.now()
        for line in text.splitlines():
            found = _LINE.match(line)
            if found:
                month, day, hour, minute, second, micro = map(int, found.groups()[:6])
                with contextlib.suppress(ValueError):  # 29 February of a year that has none
                    when = datetime(now.year, month, day, hour, minute, second, micro)
                    if (when - now).days > 0:  # the log began last year
                        when = when.replace(year=now.year - 1)
                    yield when.timestamp(), found[7]


def own(log: ServerLog, backend_of: Callable[[str], str | None]) -> set[Path]:
    """The server's own folders in TMP now (see the module's docstring). `backend_of(model)`: the backend that
    serves a model of its repositories, None when unknown."""
    named, loading, first = set(), {}, {}  # folders named; backend -> earliest `loading:`, earliest instance line
    naming = re.compile(rf"{re.escape(str(TMP))}/folder[A-Za-z0-9]{{6}}(?=/)")
    for when, message in log.lines():
        named.update(Path(path) for path in naming.findall(message))
        if found := _LOADING.match(message):
            backend = backend_of(found[1])
            if backend in PYTHON_BASED and backend not in first:
                loading.setdefault(backend, when)
        elif found := _INSTANCE.match(message):
            backend = backend_of(found[1])
            if backend in loading:
                first.setdefault(backend, when)
    brackets = sorted((loading[b], first[b]) for b in first)
    merged: list[list] = []  # [start, end, backends initialized]
    for start, end in brackets:
        if merged and start <= merged[-1][1] + SLACK_S:
            merged[-1][1], merged[-1][2] = max(merged[-1][1], end), merged[-1][2] + 1
        else:
            merged.append([start, end, 1])
    made = {folder: log.marked.get(folder) or _ctime(folder) for folder in python_envs() if _mine(folder)}  # a mark moves it
    found = {folder for folder in named if folder.is_dir() and _mine(folder)}
    for start, end, backends in merged:
        within = {f for f, t in made.items() if t is not None and start - SLACK_S <= t <= end + SLACK_S}
        if len(within) == backends:
            found |= within
    return found


def backends_in(repositories: tuple[Path, ...]) -> Callable[[str], str | None]:
    """`backend_of` for `own`: a model's backend as its config in the first of `repositories` holding it names it
    (a platform as the backend Triton maps it to), None when none does."""

    @functools.cache
    def backend_of(model: str) -> str | None:
        for repository in repositories:
            for config in (repository / model / "config.pbtxt", *sorted((repository / model / "configs").glob("*.pbtxt"))):
                try:
                    parsed = parse_config(config)
                except (OSError, TritonizeError):
                    continue
                if parsed.backend or parsed.platform:
                    return parsed.backend or PLATFORMS.get(parsed.platform, parsed.platform)
        return None

    return backend_of


def mark(log: ServerLog, folders: set[Path], server_pid: int) -> None:
    """Write in each python_env of `folders` which server made it and who ran that server."""
    log.mark = log.mark or f"tritonserver {server_pid} {start_time(server_pid)}\nowner {owner()}\n"
    for folder in folders:
        if folder.match(PYTHON_ENV) and folder not in log.marked:
            with contextlib.suppress(OSError):
                made = folder.stat().st_ctime
                (folder / MARK).write_text(log.mark)
                log.marked[folder] = made


def marked(log: ServerLog) -> set[Path]:
    """The folders `mark` marked that still hold its mark."""
    found = set()
    for folder in log.marked:
        with contextlib.suppress(OSError):
            if (folder / MARK).read_text() == log.mark:
                found.add(folder)
    return found


def orphaned(proc: Path = PROC) -> set[Path]:
    """The python_envs of this user marked by a server of ours whose tritonserver and owner are both gone (a
    `tritonize serve` killed with -9 could not remove them; its server died with it). And, when no tritonserver runs
    on the machine, this user's empty ones without a mark: a killed server's that could not be told from another
    server's (made as another started), which no server is left to use."""
    found, unmarked = set(), set()
    for folder in python_envs():
        with contextlib.suppress(OSError):
            if not _mine(folder):
                continue
            if not os.listdir(folder):
                unmarked.add(folder)
                continue
            text = (folder / MARK).read_text()
            server = re.search(r"^tritonserver (\d+) (\S+)$", text, re.M)
            ran_by = re.search(r"^owner (\d+) (\S+)", text, re.M)
            if server and ran_by and all(start_time(int(pid)) != started
                                         for pid, started in (server.groups(), ran_by.groups())):
                found.add(folder)
    # listed before the processes are: a server started after this look makes its folders after the listing
    if unmarked and not tritonservers(proc):
        found |= unmarked
    return found


def tritonservers(proc: Path = PROC) -> list[int]:
    """The pids of the tritonserver processes on this machine (any user's: /proc names every process)."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "tritonserver":
                found.append(int(entry.name))
    return found


def remove(folders: set[Path]) -> None:
    """Remove the folders (of one server, dead): a python_env only while it holds no more than its mark (an
    execution environment extracted there is not ours to judge)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            if folder.match(OVERRIDE):
                shutil.rmtree(folder)
            elif set(os.listdir(folder)) <= {MARK}:
                with contextlib.suppress(FileNotFoundError):
                    (folder / MARK).unlink()
                folder.rmdir()


def _ctime(folder: Path) -> float | None:
    try:
        return folder.stat().st_ctime
    except OSError:
        return None


def _mine(folder: Path) -> bool:
    """This user's: another's is never ours to remove."""
    try:
        return folder.stat().st_uid == os.geteuid()
    except OSError:
        return False
