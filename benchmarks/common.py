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
    from tritonize.manifest import tool_versions

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
