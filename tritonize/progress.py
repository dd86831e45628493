"""Visible progress for long steps: a start line, then the time and peak memory when it ends."""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from dataclasses import dataclass
from typing import Iterator


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class StepResult:
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(title: str) -> Iterator[StepResult]:
    """Announce a step, time it, and report duration and peak RSS when it finishes."""
    result = StepResult()
    say(f"  … {title}")
    start = time.perf_counter()
    try:
        yield result
    except BaseException:
        say(f"  ✗ {title} failed after {time.perf_counter() - start:.1f} s")
        raise
    result.seconds = round(time.perf_counter() - start, 3)
    result.peak_rss_mb = round(peak_rss_mb(), 1)
    say(f"  ✓ {title} ({result.seconds:.1f} s, peak RSS {result.peak_rss_mb:.0f} MB)")
