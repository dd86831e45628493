"""`tritonize monitor --serve`: a real Prometheus on the bundle, scraping the running server, until
Ctrl-C or SIGTERM; prints where to look."""

from __future__ import annotations

import signal
import threading
import time
import urllib.parse
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.monitor import promql
from tritonize.monitor.bundle import COMPOSE, DASHBOARD, PROMETHEUS_CONFIG, SCRAPE_INTERVAL_S
from tritonize.monitor.prometheus import Prometheus, PrometheusAPI
from tritonize.progress import say


def watch(bundle: Path, port: int) -> None:
    with Prometheus(Path(bundle) / PROMETHEUS_CONFIG, port=port) as prometheus:
        targets = first_scrapes(prometheus.api)
        print(where_to_look(prometheus.api.url, targets, Path(bundle)), flush=True)
        for target in targets:
            if target["health"] != "up":
                say(f"warning: {target['scrapeUrl']} is {target['health']} ({target.get('lastError') or 'no scrape yet'}); "
                    "is `tritonize serve` running? (--targets points elsewhere)")
        say("Ctrl-C or SIGTERM stops")
        _wait_for_stop(prometheus)
        say("stopping")


def first_scrapes(api: PrometheusAPI) -> list[dict]:
    """The targets once each has been scraped once (or after two scrape intervals)."""
    deadline = time.monotonic() + 2 * SCRAPE_INTERVAL_S + 1
    while True:
        targets = api.targets()
        scraped = targets and all(t["health"] != "unknown" for t in targets)  # discovery comes first
        if scraped or time.monotonic() > deadline:
            return targets
        time.sleep(0.2)


def where_to_look(url: str, targets: list[dict], bundle: Path) -> str:
    graphs = {f"g{i}.{key}": value for i, rule in enumerate(promql.RECORDING_RULES)
              for key, value in (("expr", rule.record), ("tab", "0"), ("range_input", "15m"))}
    lines = [f"Prometheus  {url}"]
    lines += [f"target      {t['scrapeUrl']}: {t['health']}" for t in targets]
    lines += [
        f"graphs      {url}/graph?{urllib.parse.urlencode(graphs)}",
        f"rules       {url}/rules  (values ~{3 * SCRAPE_INTERVAL_S} s after traffic starts: rates over {promql.WINDOW})",
        f"alerts      {url}/alerts",
        f"dashboard   {bundle / DASHBOARD}: import it into Grafana with this Prometheus as data source, "
        f"or run {bundle / COMPOSE} on a GPU box",
    ]
    return "\n".join(lines)


def _wait_for_stop(prometheus: Prometheus) -> None:
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            code = prometheus.exit_code()
            if code is not None:
                raise TritonizeError(f"prometheus stopped by itself (exit code {code}):\n{prometheus.log_tail()}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
