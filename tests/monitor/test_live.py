"""A real Prometheus (`tritonize monitor --serve`) scraping the session's real embedded server under a
short load: every recording rule and dashboard query answers with plausible values, and every metric
name the bundle uses is one the server exports."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from tritonize.monitor import promql
from tritonize.monitor.bundle import DASHBOARD, RULES, SCRAPE_INTERVAL_S
from tritonize.monitor.dashboard import PANELS
from tritonize.monitor.prometheus import PrometheusAPI
from tritonize.monitor.render import panel_queries, render_dashboard
from tritonize.serve.process import choose_ports

MODELS = ("onnx_model", "torch_model")
BATCH = 2
LOAD_S = 8.0  # more than a scrape interval


def _exprs(bundle: Path) -> list[str]:
    """Every PromQL expression in the bundle: rules, alerts, dashboard panels and variables."""
    rules = [r["expr"] for g in yaml.safe_load((bundle / RULES).read_text())["groups"] for r in g["rules"]]
    dashboard = json.loads((bundle / DASHBOARD).read_text())
    panels = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return rules + panels + variables


def test_every_metric_the_bundle_uses_is_exported(bundle, small_server):
    with urllib.request.urlopen(small_server.metrics_url, timeout=10) as response:
        exported = set(re.findall(r"^# TYPE (\w+) ", response.read().decode(), re.M))
    names = {name for expr in _exprs(bundle) for name in re.findall(r"[a-zA-Z_:][\w:]*", expr)}
    used = {name for name in names if name.startswith("nv_")}
    assert used >= {promql.SUCCESS, promql.QUEUE_US, promql.CPU_UTILIZATION}  # the scan finds them
    assert used <= exported, f"not exported by Triton: {sorted(used - exported)}"
    referenced = {name for name in names if ":" in name}
    assert referenced >= {promql.QUEUE_AVG, promql.BATCH_SIZE}
    assert referenced <= {r.record for r in promql.RECORDING_RULES}, "a query names a rule that does not exist"


def _load(url: str, model: str, stop: threading.Event, sent: dict, errors: list) -> None:
    from tritonize.client.connection import Connection

    x = np.random.default_rng(0).standard_normal((BATCH, 3, 224, 224), dtype=np.float32)
    try:
        with Connection(url, timeout=60) as connection:
            info = connection.model(model)
            while not stop.is_set():
                connection.infer(info, x)
                sent[model] += 1
    except Exception as e:  # noqa: BLE001 - reported by the fixture
        errors.append(f"{model}: {e}")


@pytest.fixture(scope="module")
def watched(small_server, small_repo, promtool, tmp_path_factory):
    """`tritonize monitor --serve` on the session's server, after LOAD_S seconds of batch-2 requests
    to both models (two clients each); yields (api, printed lines, requests sent per model, a time
    when the rules have seen the whole load)."""
    bundle = tmp_path_factory.mktemp("watched") / "monitoring"
    port = choose_ports("127.0.0.1", None, None, None).http
    target = small_server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "tritonize"), "monitor", str(small_repo), "--output-dir", str(bundle),
         "--targets", target, "--serve", "--prometheus-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = []
        for line in process.stdout:  # printed once the first scrape is done
            printed.append(line.rstrip())
            if line.startswith("dashboard"):
                break
        assert printed and printed[0] == f"Prometheus  http://127.0.0.1:{port}", printed or process.stderr.read()
        stop, sent, errors = threading.Event(), dict.fromkeys(MODELS, 0), []
        clients = [threading.Thread(target=_load, args=(small_server.grpc_url, m, stop, sent, errors))
                   for m in MODELS * 2]
        for client in clients:
            client.start()
        time.sleep(LOAD_S)
        stop.set()
        for client in clients:
            client.join(60)
        assert not errors, errors
        # By then a scrape after the load and a rule evaluation after that scrape have happened.
        settled = time.time() + 2 * SCRAPE_INTERVAL_S + 1
        time.sleep(2 * SCRAPE_INTERVAL_S + 1.5)
        yield PrometheusAPI(f"http://127.0.0.1:{port}"), printed, sent, settled
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "stopping" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()


# Each per-request average rule and the counter it divides by the request count.
AVERAGED = {promql.REQUEST_US: promql.REQUEST_AVG, promql.QUEUE_US: promql.QUEUE_AVG,
            promql.COMPUTE_INPUT_US: promql.COMPUTE_INPUT_AVG, promql.COMPUTE_INFER_US: promql.COMPUTE_INFER_AVG,
            promql.COMPUTE_OUTPUT_US: promql.COMPUTE_OUTPUT_AVG}


def _samples(api: PrometheusAPI, metric: str, model: str, at: float) -> list[tuple[float, float]]:
    """The (time, value) samples Prometheus holds of a model's counter in the minute before `at`."""
    (series,) = api.query(f'{metric}{{model="{model}"}}[1m]', at)
    return [(float(t), float(x)) for t, x in series["values"]]


def _per_model(api: PrometheusAPI, expr: str, at: float) -> dict[str, float]:
    return {s["metric"]["model"]: float(s["value"][1]) for s in api.query(expr, at) if s["metric"].get("model") in MODELS}


def test_serve_prints_where_to_look(watched, small_server):
    api, printed, _, _ = watched
    text = "\n".join(printed)
    assert f"target      {small_server.metrics_url}: up" in text
    for rule in promql.RECORDING_RULES:
        assert f"expr={rule.record.replace(':', '%3A')}" in text
    assert f"rules       {api.url}/rules" in text and f"alerts      {api.url}/alerts" in text
    health = {r["name"]: r["health"] for g in api.get("rules")["groups"] for r in g["rules"]}
    assert set(health.values()) == {"ok"} and len(health) == len(promql.RECORDING_RULES) + 3


def test_every_recording_rule_has_plausible_values(watched):
    api, _, sent, at = watched
    deadline = time.monotonic() + 4 * SCRAPE_INTERVAL_S
    while True:  # every rule from the same evaluation, at `at`; a busy machine may run it late
        values = {rule.record: _per_model(api, rule.record, at) for rule in promql.RECORDING_RULES}
        missing = [(r, m) for r, v in values.items() for m in MODELS if m not in v]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not missing, f"no series for {missing}"
    for model in MODELS:
        v = {record: series[model] for record, series in values.items()}
        assert all(math.isfinite(x) and x >= 0 for x in v.values()), v
        # The 1-minute window holds all of this load and nothing else (Prometheus started just before it):
        # the scraped counters grew by exactly what was sent. rate() spreads a counter's growth over the
        # minute, extrapolating it on its own by at most 1.1 scrape intervals at each end (less where it
        # would reach zero), so a rule is checked against the growth of the samples Prometheus holds, within
        # that stretch; Triton's own accounting is checked on the growth itself.
        grew = {metric: _samples(api, metric, model, at) for metric in (promql.SUCCESS, promql.INFERENCES, *AVERAGED)}
        samples = grew[promql.SUCCESS]
        sampled = samples[-1][0] - samples[0][0]
        stretch = 1.05 * (sampled + 2 * 1.1 * sampled / (len(samples) - 1)) / sampled
        grew = {metric: s[-1][1] - s[0][1] for metric, s in grew.items()}
        assert grew[promql.SUCCESS] == sent[model] and grew[promql.INFERENCES] == BATCH * sent[model], (grew, sent)
        assert 0.99 <= v[promql.REQUEST_RATE] * 60 / sent[model] <= stretch, (v, sent, samples)
        assert v[promql.FAILURE_RATE] == 0
        assert 1 / stretch <= v[promql.INFERENCE_RATE] / (BATCH * v[promql.REQUEST_RATE]) <= stretch, v
        assert BATCH * 0.8 <= v[promql.BATCH_SIZE] <= 32 * 1.25  # dynamic batching: up to max_batch_size
        assert v[promql.COMPUTE_INFER_AVG] > 100  # us: a model on a CPU takes more than 0.1 ms a batch
        parts = sum(grew[metric] for metric in AVERAGED if metric != promql.REQUEST_US)
        assert 0.5 * grew[promql.REQUEST_US] <= parts <= 1.01 * grew[promql.REQUEST_US], grew
        for metric, record in AVERAGED.items():
            assert 1 / stretch <= v[record] / (grew[metric] / sent[model]) <= stretch, (record, v, grew)
        assert v[promql.QUEUE_COMPUTE_RATIO] == pytest.approx(v[promql.QUEUE_AVG] / v[promql.COMPUTE_INFER_AVG], rel=1e-6)


def test_every_dashboard_panel_has_data_and_renders(watched, tmp_path):
    api, _, _, _ = watched
    for panel in PANELS:
        for expr, _ in panel_queries(panel):
            assert api.query(expr), f"{panel.title}: no series for {expr}"
    cpu = [float(s["value"][1]) for s in api.query(promql.CPU_UTILIZATION)]
    assert cpu and all(0 <= x <= 1 for x in cpu)
    end = time.time()
    drawn = render_dashboard(api, end - 60, end, tmp_path / "dashboard.png")
    assert all(drawn.values()), drawn
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
