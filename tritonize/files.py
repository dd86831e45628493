"""Atomic publishing and file hashing, shared by every stage."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from tritonize.errors import TritonizeError


@contextlib.contextmanager
def staged_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path next to `final` for the caller to fill and publish (rename) itself.

    Whatever is left at the temporary path when the block ends, normally or not, is removed. So are
    the temporaries of `final` that killed processes left behind (their pid is in the name), except a
    previous directory that a process killed between the two renames of a swap moved aside: it goes
    back in place.
    """
    final = Path(final)
    sweep_stale(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
    finally:
        _remove(tmp)


def sweep_stale(final: Path) -> tuple[list[Path], list[Path]]:
    """Remove the temporaries of `final` that killed processes left (their pid is in the name), except a
    previous directory that a process killed between the two renames of a swap moved aside: it goes back
    in place. Returns (what was removed or put back, the temporaries of processes that still run).

    One with our own pid is stale too: no publish of `final` is under way in this process when a new one
    begins, so it was left by an earlier process that had our pid (in a container, every run may get the same).
    The name is matched literally (a `final` named `a[1]` or `*` has glob characters)."""
    final = Path(final)
    swept, running = [], []
    prefix = glob.escape(f".{final.name}.")
    for stale in sorted([*final.parent.glob(f"{prefix}tmp-*"), *final.parent.glob(f"{prefix}old-*")]):
        pid = stale.name.rpartition("-")[2]
        if not pid.isdigit():
            continue
        if int(pid) != os.getpid() and pid_alive(int(pid)):
            running.append(stale)
            continue
        if ".old-" in stale.name and not final.exists():
            os.replace(stale, final)
        else:
            _remove(stale)
        swept.append(stale)
    return swept, running


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path next to `final`; rename it over `final` only if the block succeeds.

    A failure or an interrupt (KeyboardInterrupt included) removes the temporary and leaves any
    previous `final` untouched, so no later stage or server ever sees a half-written file.
    Works for files and for directories.
    """
    final = Path(final)
    with staged_path(final) as tmp:
        yield tmp
        if final.is_dir() and not final.is_symlink():
            # Directories cannot be renamed over a non-empty directory: swap in two renames.
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            try:
                os.replace(final, old)
                os.replace(tmp, final)
            finally:
                if final.exists():
                    _remove(old)
                else:  # failed or interrupted between the renames: the previous one goes back
                    os.replace(old, final)
        else:
            os.replace(tmp, final)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)  # pragma: no mutate (signal 0 only probes; a mutant's signal 1 would hang up a real process)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_tree(directory: Path, contents: dict[str, str], known: Iterable[str], what: str, option: str,
                 executables: Iterable[str] = ()) -> list[Path]:
    """Write `contents` (relative path -> text) as `directory`, replacing a previous one as a whole
    (atomic_path: never half-written). A directory holding files outside `known` is someone else's:
    refused, naming `option` to choose another. Returns the files written."""
    directory, known = Path(directory), set(known)
    if directory.exists():
        foreign = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()) \
            if directory.is_dir() else []
        foreign = [f for f in foreign if f not in known]
        if foreign or not directory.is_dir():
            raise TritonizeError(f"{directory} exists and holds files that are not {what} "
                                 f"({', '.join(foreign[:3]) or 'not a directory'}); choose another {option} or remove it")
    directory.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory) as tmp:
        for name, text in contents.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        for name in executables:
            (tmp / name).chmod(0o755)
    return [directory / name for name in contents]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def ensure_writable_dir(path: Path, option: str) -> Path:
    """Create `path` if needed and prove we can write there; the error names the `option` to change."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise TritonizeError(
            f"cannot write to output directory {path}: {e.strerror or e}; choose another with {option}"
        ) from None
    return path
