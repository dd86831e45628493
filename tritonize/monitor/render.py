"""The dashboard's panels drawn with matplotlib from Prometheus range queries: a picture of what the
Grafana dashboard shows, where no Grafana runs (the screenshot in docs/monitoring.md is made this way)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from tritonize.monitor.dashboard import PANELS, Panel
from tritonize.monitor.prometheus import PrometheusAPI

_UNITS = {"µs": ("ms", 1e-3), "bytes": ("GB", 1e-9), "percentunit": ("%", 100.0), "reqps": ("/s", 1.0)}


def panel_queries(panel: Panel) -> list[tuple[str, str]]:
    """(PromQL, legend format) with the dashboard variables set to "all"."""
    return [(re.sub(r"\$\w+", ".+", query.expr), query.legend) for query in panel.queries]


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def render_dashboard(prometheus: PrometheusAPI, start: float, end: float, path: Path, step: float = 5.0) -> dict[str, int]:
    """Draw every panel over [start, end] into `path` (PNG); returns panel title -> series drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 2
    rows = (len(PANELS) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(12, 2.6 * rows), sharex=True)
    drawn = {}
    for panel, ax in zip(PANELS, axes.flat):
        unit, scale = _UNITS.get(panel.unit, ("", 1.0))
        drawn[panel.title] = 0
        for expr, fmt in panel_queries(panel):
            for series in prometheus.query_range(expr, start, end, step):
                times = [datetime.fromtimestamp(float(t)) for t, _ in series["values"]]
                ax.plot(times, [float(v) * scale for _, v in series["values"]], lw=1.2,
                        label=legend(fmt, series["metric"]))
                drawn[panel.title] += 1
        ax.set_title(panel.title + (f" ({unit})" if unit else ""), fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        if drawn[panel.title]:
            ax.legend(fontsize=6, loc="upper left", ncol=2, frameon=False)
    for ax in list(axes.flat)[len(PANELS):]:
        ax.set_visible(False)
    fig.autofmt_xdate()
    fig.suptitle("tritonize dashboard panels, drawn with matplotlib from Prometheus range queries (not Grafana)",
                 fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return drawn
