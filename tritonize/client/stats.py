"""Latency statistics, in the units and with the percentile definition perf_analyzer uses."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile: the smallest value with at least pct % of the values at or below it."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(seconds: Sequence[float], percentiles: Sequence[int] = (50, 90, 95, 99)) -> dict:
    """{"count", "avg_ms", "p50_ms", ...} for a list of latencies in seconds."""
    summary = {"count": len(seconds), "avg_ms": (sum(seconds) / len(seconds) * 1e3) if seconds else float("nan")}
    for p in percentiles:
        summary[f"p{p}_ms"] = percentile(seconds, p) * 1e3
    return summary
