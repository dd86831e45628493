"""tune's report: the search as a PNG, report.json, and the winner vs the default at the same p99 budget."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tritonize.console import table
from tritonize.files import atomic_path
from tritonize.tune.run import TuneResult
from tritonize.tune.search import TRIALS_NAME, Trial


def write_report(result: TuneResult, trials: list[Trial], directory: Path) -> list[Path]:
    """<dir>/search.png and <dir>/report.json next to trials.csv."""
    directory = Path(directory)
    written = [directory / TRIALS_NAME, plot(result, trials, directory / "search.png")]
    with atomic_path(directory / "report.json") as tmp:
        tmp.write_text(json.dumps(to_dict(result), indent=2, default=str) + "\n")
    written.append(directory / "report.json")
    return written


def to_dict(result: TuneResult) -> dict:
    def side(candidate) -> dict:
        throughput, concurrency = result.scores.get(candidate.key, (0.0, 0))
        return {"config": asdict(candidate), "description": candidate.describe(), "throughput": throughput,
                "concurrency": concurrency, "confirmed": result.confirm.get("default" if candidate is result.default else "winner")}

    return {"model": result.model, "p99_budget_ms": result.options.p99_ms, "budget_minutes": result.options.budget_minutes,
            "batch": result.options.batch, "duration_s": result.options.duration, "engine": result.engine,
            "base_config": str(result.base_file), "default": side(result.default), "winner": side(result.winner),
            "winner_is_default": result.winner == result.default, "verdict": result.verdict, "stopped": result.stopped,
            "written": str(result.written) if result.written else None, "measured_now": result.measured_now,
            "configs_measured": len(result.scores), "seconds": round(result.seconds, 1)}


def to_text(result: TuneResult) -> str:
    rows = []
    for name, candidate in (("default", result.default), ("winner", result.winner)):
        throughput, concurrency = result.scores.get(candidate.key, (0.0, 0))
        confirmed = result.confirm.get(name)
        rows.append((name, candidate.describe(), concurrency or "-", f"{throughput:.1f}" if concurrency else "-",
                     f"{confirmed['throughput']:.1f} / {confirmed['p99_ms']:.1f}" if confirmed else "-"))
    lines = [f"tune {result.model}: p99 budget {result.options.p99_ms:g} ms, batch {result.options.batch}, "
             f"{len(result.scores)} configs, {result.measured_now} new measurements, {result.seconds:.0f} s, measured by {result.engine}",
             table(("", "config", "concurrency", "infer/s (search)", "infer/s / p99 ms (confirmed, back to back)"), rows)]
    if result.verdict:
        lines.append(f"  {result.verdict}")
    if result.winner != result.default and result.confirm:
        gain = result.confirm["winner"]["throughput"] / max(result.confirm["default"]["throughput"], 1e-9)
        lines.append(f"  winner / default, measured back to back: {gain:.2f}x throughput within p99 {result.options.p99_ms:g} ms")
    if result.stopped:
        lines.append(f"  {result.stopped}; the same command goes on from the trials measured so far")
    return "\n".join(lines)


def plot(result: TuneResult, trials: list[Trial], path: Path) -> Path:
    """search.png: `search_figure`."""
    import matplotlib.pyplot as plt

    fig = search_figure(result, trials)
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return Path(path)


def search_figure(result: TuneResult, trials: list[Trial]):
    """Every search trial as throughput against p99, one colour per config; the budget, default and winner marked
    (the winner's star on top: when the default wins, the two are at one point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    configs = list(dict.fromkeys(t.config for t in trials if t.phase == "search"))
    cmap = plt.get_cmap("tab20")
    for i, config in enumerate(configs):
        rows = sorted((t for t in trials if t.config == config and t.phase == "search"), key=lambda t: t.concurrency)
        ax.plot([t.p99_ms for t in rows], [t.throughput for t in rows], "o-", color=cmap(i % 20), alpha=0.75,
                markersize=4, linewidth=1, label=config)
    ax.axvline(result.options.p99_ms, color="red", linestyle="--", linewidth=1, label=f"p99 budget {result.options.p99_ms:g} ms")
    markers = (("default", result.default, {"marker": "D", "s": 260, "facecolors": "none", "edgecolors": "black",
                                             "linewidths": 1.5, "zorder": 5}),
               ("winner", result.winner, {"marker": "*", "s": 240, "color": "gold", "edgecolors": "black",
                                          "linewidths": 0.8, "zorder": 6}))
    for name, candidate, style in markers:
        throughput, concurrency = result.scores.get(candidate.key, (0.0, 0))
        best = [t for t in trials if t.config == candidate.key and t.concurrency == concurrency and t.phase == "search"]
        if best:
            ax.scatter([best[0].p99_ms], [throughput], label=f"{name}: {throughput:.1f} infer/s at c{concurrency}", **style)
    ax.set(xlabel="p99 latency (ms)", ylabel="throughput (infer/s)",
           title=f"tune {result.model}: every trial (config x client concurrency), batch {result.options.batch}")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    return fig
