"""Shared bits of the benchmark scripts: where results go, the machine they ran on, output formats."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    from tritonize.facts import tool_versions

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gb, 1),
        "python": platform.python_version(),
        "versions": tool_versions("torch", "onnxruntime", "tritonclient", "nvidia-pytriton"),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def markdown_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def save(name: str, data: dict, figure=None) -> Path:
    """Write results/<name>.json (and <name>.png when a matplotlib figure is given)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2) + "\n")
    if figure is not None:
        figure.savefig(RESULTS / f"{name}.png", dpi=110, bbox_inches="tight")
    return path


def artifacts(arch: str) -> Path:
    """Exported random-init artifacts of `arch` (speed does not depend on the weight values), made once."""
    path = RESULTS / f"artifacts-{arch}"
    if not (path / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "tritonize.cli", "export", "--arch", arch, "--weights", "none",
                        "--artifacts", str(path)], check=True)
    return path


class CpuShares:
    """CPU time (cores) over an interval: a process tree's (e.g. a server and its stubs), this process's
    children's, and everything else on the machine ("foreign": other people's work on a shared host)."""

    HZ = os.sysconf("SC_CLK_TCK")

    def __init__(self, tree_root: int):
        self.root = tree_root
        self.start = self._sample()

    @staticmethod
    def _processes() -> dict[int, tuple[int, int]]:
        found = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = open(f"/proc/{entry}/stat").read()
                    fields = stat[stat.rindex(")") + 2:].split()
                    found[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, utime + stime
                except (OSError, ValueError, IndexError):
                    pass
        return found

    def _sample(self) -> tuple[float, int, int, float]:
        import resource
        import time

        processes = self._processes()
        tree, grew = {self.root}, True
        while grew:
            grew = False
            for pid, (ppid, _) in processes.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        tree_ticks = sum(processes[p][1] for p in tree if p in processes)
        values = list(map(int, open("/proc/stat").readline().split()[1:]))
        busy = sum(values) - values[3] - values[4]  # minus idle and iowait
        own = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        own_s = sum(r.ru_utime + r.ru_stime for r in own)
        return time.monotonic(), tree_ticks, busy, own_s

    def stop(self) -> dict:
        """{"seconds", "tree_cores", "own_cores" (this process and its finished children), "foreign_cores"}."""
        t0, tree0, busy0, own0 = self.start
        t1, tree1, busy1, own1 = self._sample()
        wall = max(t1 - t0, 1e-9)
        tree = (tree1 - tree0) / self.HZ
        own = own1 - own0
        return {"seconds": round(wall, 2), "tree_cores": round(tree / wall, 2), "own_cores": round(own / wall, 2),
                "foreign_cores": round(max(0.0, (busy1 - busy0) / self.HZ - tree - own) / wall, 2)}


def wait_until_quiet(server_pid: int, max_foreign_cores: float, timeout: float, sample: float = 2.0) -> float:
    """Wait (at most `timeout` s) until other people's work uses at most `max_foreign_cores`; returns the last sample."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        shares = CpuShares(server_pid)
        time.sleep(sample)
        foreign = shares.stop()["foreign_cores"]
        if foreign <= max_foreign_cores or time.monotonic() > deadline:
            return foreign
