"""Visible progress for long steps: a start line, then the time and peak memory when it ends; a status said again
while a wait goes on."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from dataclasses import dataclass
from typing import Iterator

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def rss_mb() -> float:
    """Current resident memory of this process (Linux /proc), else the peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _PeakSampler:
    """Samples RSS in a background thread: ru_maxrss only knows the process-wide peak, not a step's."""

    def __init__(self, interval: float = 0.02):
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, rss_mb())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak, rss_mb())


@dataclass
class StepResult:
    seconds: float = 0.0
    peak_rss_mb: float = 0.0  # the highest RSS seen while this step ran


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Ticker:
    """A status said again and again while a wait goes on. On a terminal it redraws one line in place; into a file or
    a pipe a line is written only when the status changes (the seconds counted are not a change), so a log holds no
    two identical lines in a row."""

    def __init__(self) -> None:
        self.said: str | None = None

    def say(self, status: str, seconds: float) -> None:
        line = f"{status} ({seconds:.0f} s)"
        if sys.stderr.isatty():
            sys.stderr.write(f"\r\x1b[K{line}")
            sys.stderr.flush()
        elif status != self.said:
            say(line)
        self.said = status

    def done(self) -> None:
        """End the redrawn line (a terminal), so that what is said next starts on a line of its own."""
        if self.said is not None and sys.stderr.isatty():
            say("")


@contextlib.contextmanager
def step(title: str) -> Iterator[StepResult]:
    """Announce a step, time it, and report its duration and peak RSS when it finishes."""
    result = StepResult()
    say(f"  … {title}")
    sampler = _PeakSampler()
    start = time.perf_counter()
    try:
        yield result
    except BaseException:
        sampler.stop()
        say(f"  ✗ {title} failed after {time.perf_counter() - start:.1f} s")
        raise
    result.seconds = round(time.perf_counter() - start, 3)
    result.peak_rss_mb = round(sampler.stop(), 1)
    say(f"  ✓ {title} ({result.seconds:.1f} s, peak RSS {result.peak_rss_mb:.0f} MB)")
