"""The shared-memory regions of Triton's Python backend stubs, and removing those their server left.

Each Python backend stub (every model instance of the embedded engine; the preprocessing models in the NGC
container, whose /dev/shm is the host's with --ipc=host) talks to tritonserver through a region in /dev/shm.
tritonserver creates it and removes it when the instance unloads, so a region outlives its server when its
instance never unloads: a stub that died under traffic (Triton 2.51 never finishes unloading such an instance),
or a server killed before it unloaded its models. Each was 1 to 20 MB, and nothing else removed them.

tritonize names a server's regions after the process that started it and the server
(`tritonize_<pid>_<start time>_<server>_<uuid>`, the Python backend's `shm-region-prefix-name`), so that
- stopping the server removes its regions once its processes are gone (`remove_owned`);
- the supervisor removes a dead stub's region after reloading its model (`remove`);
- starting a server removes the regions whose owner is gone (`remove_stale`), the way it removes the stale
  work directories (process.make_workdir), and the ones Triton named by default (`triton_*_shm_region_*`, from
  servers tritonize did not name) that no live process maps or holds open.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tritonize.processes import start_time
from tritonize.progress import say

SHM = Path("/dev/shm")
OWNED = "tritonize_"  # our prefix: tritonize_<pid>_<start time>_<server>_
DEFAULT_NAMED = "triton_*_shm_region_*"  # Triton's own: triton_<backend>_backend_shm_region_<uuid>


def region_prefix() -> str:
    """A new prefix for one server's regions: this process (pid and start time, which tell it from a later
    process with the same pid) and a token of its own (one process may run several servers)."""
    return f"{OWNED}{os.getpid()}_{start_time(os.getpid())}_{secrets.token_hex(4)}_"


def prefix_flag(prefix: str) -> str:
    """The tritonserver option that names the regions: the Python backend's setting, which the Python-based
    backends (onnxruntime, pytorch, tensorrt here) share."""
    return f"--backend-config=python,shm-region-prefix-name={prefix}"


def remove(names) -> int:
    """Remove regions by name (a missing one is not an error); the bytes freed."""
    freed = 0
    for name in names:
        path = SHM / name
        try:
            size = path.stat().st_size
            path.unlink()
            freed += size
        except FileNotFoundError:
            pass
        except PermissionError:  # e.g. a container's, owned by root
            say(f"could not remove {path}: permission denied")
    return freed


def remove_owned(prefix: str) -> int:
    """Remove every region named with `prefix` (its server's processes are gone); the bytes freed."""
    return remove(p.name for p in SHM.glob(f"{prefix}*"))


def remove_stale() -> None:
    """Remove the regions of servers that are gone: ours whose owner process is dead, and Triton's default-named
    ones; either only when no live process maps it or holds it open, and only this user's (all: as root)."""
    candidates = [p for p in (*SHM.glob(f"{OWNED}*"), *SHM.glob(DEFAULT_NAMED)) if _mine(p) and not _owner_lives(p.name)]
    if not candidates:
        return
    used = regions_in_use()
    stale = [p.name for p in candidates if str(p) not in used]
    freed = remove(stale)
    if stale:
        say(f"removed {len(stale)} shared-memory region(s) ({freed / 2**20:.0f} MB) in {SHM}: left by Triton "
            "servers whose processes are gone")


def regions_in_use() -> set[str]:
    """Paths under /dev/shm that a live process maps or holds open (the processes this user may inspect)."""
    used = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            with open(entry / "maps") as maps:
                used.update(line.split(maxsplit=5)[-1].strip() for line in maps if f" {SHM}/" in line)
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(f"{SHM}/"):
                    used.add(target)
        except OSError:  # gone meanwhile, or another user's
            continue
    return used


def _mine(path: Path) -> bool:
    try:
        return os.geteuid() == 0 or path.stat().st_uid == os.geteuid()
    except OSError:
        return False


def _owner_lives(name: str) -> bool:
    """Whether the process named in one of our regions' names still runs (False for Triton's default names)."""
    if not name.startswith(OWNED):
        return False
    try:
        pid, started = name.removeprefix(OWNED).split("_")[:2]
        return start_time(int(pid)) == started
    except ValueError:
        return False
