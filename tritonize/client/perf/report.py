"""A sweep's files: perf_analyzer's CSV per model and path, the latency-vs-throughput plot, perf.json."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

from tritonize.client.perf.results import CSV_COLUMNS, LevelResult, PerfReport
from tritonize.files import atomic_path, ensure_writable_dir


def write_csv(levels: Sequence[LevelResult], path: Path) -> Path:
    """perf_analyzer's CSV for one model: its columns, rows in increasing throughput, microseconds."""
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for level in sorted(levels, key=lambda r: r.throughput):
                writer.writerow(level.csv_row())
    return Path(path)


def plot(levels: Sequence[LevelResult], path: Path, title: str = "Triton latency vs throughput") -> Path:
    """The `figure` of the levels as a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(levels, title)
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return Path(path)


def figure(levels: Sequence[LevelResult], title: str = "Triton latency vs throughput"):
    """p50 (solid) and p99 (dashed) latency against throughput, one colour per model and preprocessing path, points
    labelled by concurrency; the title names what was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    series = list(dict.fromkeys((r.model, r.path) for r in levels))
    for i, (model, how) in enumerate(series):
        rows = sorted((r for r in levels if (r.model, r.path) == (model, how)), key=lambda r: r.concurrency)
        x = [r.throughput for r in rows]
        color = f"C{i}"
        ax.plot(x, [r.latency["p50_ms"] for r in rows], "o-", color=color, label=f"{model}, {how} p50")
        ax.plot(x, [r.latency["p99_ms"] for r in rows], "x--", color=color, alpha=0.7, label=f"{model}, {how} p99")
        for r in rows:
            ax.annotate(f"c{r.concurrency}", (r.throughput, r.latency["p50_ms"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    batch = levels[0].batch if levels else 1
    measured = "; ".join(f"{model}, {how} preprocessing" for model, how in series)
    ax.set(xlabel="throughput (inferences/s)", ylabel="latency per request (ms)",
           title=f"{title} (batch {batch})\n{measured}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def csv_name(level: LevelResult) -> str:
    """perf_analyzer's CSV has no column for them: the file's name says the model and the preprocessing path."""
    return f"{level.model}.{level.preprocess}.csv"


def write_outputs(report: PerfReport, out_dir: Path) -> list[Path]:
    """<out>/<model>.<path>.csv per model and preprocessing path, <out>/latency_vs_throughput.png and
    <out>/perf.json (levels that saw failures only in perf.json: perf_analyzer's CSV has no column for them)."""
    out_dir = ensure_writable_dir(Path(out_dir), "--output-dir")
    written = []
    complete = [r for r in report.levels if not r.failures]
    for name in dict.fromkeys(csv_name(r) for r in complete):
        written.append(write_csv([r for r in complete if csv_name(r) == name], out_dir / name))
    if complete:
        written.append(plot(complete, out_dir / "latency_vs_throughput.png"))
    with atomic_path(out_dir / "perf.json") as tmp:
        Path(tmp).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    written.append(out_dir / "perf.json")
    return written
