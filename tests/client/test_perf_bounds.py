"""Edges of the measurement code that `make mutation` found untested: every option's bounds and message, a
level's CSV row digit by digit, perf_analyzer's figures at their rounding edges, and the built-in load
generator's windows when requests fail or the time limit ends a count."""

from __future__ import annotations

import threading
import time

import pytest

from tests.client.test_perf_units import _level, _Slow
from tritonize.client import load
from tritonize.client.perf import perf_analyzer_runs as pa
from tritonize.client.perf.results import LOAD_GENERATORS, UNJUDGED, PerfOptions
from tritonize.client.stats import latency_summary
from tritonize.errors import TritonizeError


@pytest.mark.parametrize("fields", [
    dict(concurrency=(1, 1024)), dict(requests=1, duration=None), dict(duration=600), dict(duration=0.5),
    dict(shared_memory="none"), dict(shared_memory="system"), *[dict(engine=e) for e in LOAD_GENERATORS],
    dict(stability=UNJUDGED), dict(stability=0.5), dict(batch=1),
])
def test_options_at_their_bounds_are_taken(fields):
    PerfOptions(**fields)


@pytest.mark.parametrize("fields, message", [
    (dict(concurrency=()), "--concurrency levels must be between 1 and 1024, got []"),
    (dict(concurrency=(0, 4)), "--concurrency levels must be between 1 and 1024, got [0, 4]"),
    (dict(concurrency=(1, 1025)), "--concurrency levels must be between 1 and 1024, got [1, 1025]"),
    (dict(batch=0), "--batch must be at least 1, got 0"),
    (dict(requests=None, duration=None), "give --requests or --duration for each concurrency level"),
    (dict(requests=0), "--requests must be at least 1, got 0"),
    (dict(duration=0), "--duration must be between 0 and 600 seconds, got 0"),
    (dict(duration=600.5), "--duration must be between 0 and 600 seconds, got 600.5"),
    (dict(shared_memory="cuda"), "--shared-memory must be none or system, got 'cuda'"),
    (dict(shared_memory="NONE"), "--shared-memory must be none or system, got 'NONE'"),
    (dict(engine="locust"), "--load-generator must be one of auto, perf_analyzer, builtin, got 'locust'"),
    (dict(stability=0), "--stability must be a percentage between 0 and 1000, got 0"),
    (dict(stability=UNJUDGED + 1), "--stability must be a percentage between 0 and 1000, got 1001.0"),
])
def test_options_out_of_bounds_are_refused_with_what_to_give(fields, message):
    from tritonize.options import EXIT_USAGE

    with pytest.raises(TritonizeError) as refused:
        PerfOptions(**fields)
    assert str(refused.value) == message and refused.value.exit_code == EXIT_USAGE  # a usage error: exit 2


def test_a_csv_row_keeps_three_decimals_of_throughput_and_each_percentile_in_whole_microseconds():
    seconds = [0.001 * k for k in range(1, 101)]  # p50 50 ms, p90 90 ms, p95 95 ms, p99 99 ms
    row = _level(throughput=1000 / 3, latency=latency_summary(seconds)).csv_row()
    assert row["Inferences/Second"] == 333.333
    assert [row[f"p{p} latency"] for p in (50, 90, 95, 99)] == [50_000, 90_000, 95_000, 99_000]
    assert row["Avg latency"] == 50_500
    kept = {"Concurrency": "2", "Inferences/Second": "12.5"}
    assert _level(csv=kept).csv_row() == kept  # perf_analyzer's own row, as it wrote it


def test_perf_analyzer_figures_at_their_rounding_edges():
    row = {"Inferences/Second": "3", "Avg latency": "1", "p50 latency": "1", "p90 latency": "1", "p95 latency": "1",
           "p99 latency": "1", "Client Send": "0", "Client Recv": "0", "response wait": "1", "Server Queue": "0",
           "Server Compute Input": "0", "Server Compute Infer": "0", "Server Compute Output": "0"}
    assert pa.level_figures(row, {"requests": 1}, batch=1)["seconds"] == 0.3333  # 1 request at 3/s, 4 digits
    # a request count: the request's own 333,333 us (perf_analyzer's window says the same here)
    assert pa.passes_figures([(3.0, 333_333.0)], batch=1, window_s=None, per_window=1)["seconds"] == 0.3333
    # neither a window length nor a request count: nothing to count the window by
    assert pa.passes_figures([(400.0, 10.0)], batch=4, window_s=None, per_window=None)["requests"] == 0
    text = "".join(f"Request count: {n}\n    Inference count: {4 * n}\n    Execution count: {n}\n" for n in (5, 9, 13))
    assert pa.stdout_figures(text) == {"requests": 13, "inferences": 52, "executions": 13}  # the last level's


def _uneven(payload, timeout):
    """Each worker its own speed: request b"slow" takes 25 ms, b"fast" 2 ms."""
    time.sleep(0.025 if payload == b"slow" else 0.002)


def test_a_windows_requests_are_in_completion_order_and_every_answer_is_counted():
    level = load._Level(_uneven, [b"slow", b"fast"], timeout=5, concurrency=2, warmup=1)
    level.warmed.wait()
    window = level.measure(seconds=None, count=30, limit=30)
    done = [d for _, d in window.requests]
    assert done == sorted(done) and [s for s, _ in window.requests] != sorted(s for s, _ in window.requests)
    assert window.answered == len(window.requests) == 30


def test_a_count_cut_short_by_the_time_limit_ends_at_the_limit_not_at_the_last_answer():
    """The answer in flight at the limit completes after it: counted as answered, not in the window. (So may one
    more, sent while this loop slept past the limit on a busy machine.)"""
    level = load._Level(_Slow(0.02), [b"x"], timeout=5, concurrency=1, warmup=0)
    level.warmed.wait()
    window = level.measure(seconds=None, count=10_000, limit=0.3)
    assert window.seconds == pytest.approx(0.3, abs=1e-6)
    late = [r for r in level.completions if r not in window.requests]
    assert window.answered == len(level.completions) == len(window.requests) + len(late)
    assert late and all(done > window.requests[-1][1] for _, done in late)


def test_a_warm_up_failure_without_details_keeps_the_errors_own_text():
    import grpc

    def call(payload, timeout):
        error = grpc.RpcError("connection reset")
        error.code = lambda: grpc.StatusCode.UNAVAILABLE
        error.details = lambda: ""
        raise error

    level = load._Level(call, [b"x"], timeout=5, concurrency=1, warmup=1)
    with pytest.raises(threading.BrokenBarrierError):
        level.warmed.wait()
    level.finish()
    assert level.error == ("UNAVAILABLE", "connection reset")


def test_a_failed_level_is_zeros_or_what_it_measured_and_counts_at_least_one_failure():
    """A level that failed before its window reads zeros; one cut short keeps what it measured; either counts the
    failure that ended it even where no request was counted as failed."""
    from types import SimpleNamespace

    import numpy as np

    from tritonize.client.perf.load_generators import failed_level
    from tritonize.client.perf.results import SERVER_PARTS, LevelResult

    workload = SimpleNamespace(model="onnx_model", info=SimpleNamespace(path="server", name="onnx_classifier"),
                               batch=np.zeros((4, 3)), transport="grpc", tensor_bytes_on_wire=123)
    shape = dict(model="onnx_model", preprocess="server", served="onnx_classifier", concurrency=8, batch=4,
                 transport="grpc", tensor_bytes_on_wire=123)
    assert failed_level(workload, 8, "builtin", 0, "boom") == LevelResult(
        **shape, engine="builtin", failures=1, error="boom", requests=0, seconds=0.0, throughput=0.0,
        latency={"count": 0}, client_send_us=0.0, client_recv_us=0.0, response_wait_us=0.0,
        server_us=None, server_batches=None)  # nothing measured on the server's side: unknown, not zero
    measured = dict(requests=7, seconds=1.5, throughput=18.7, latency={"count": 7, "avg_ms": 3.0}, client_send_us=1.0,
                    client_recv_us=2.0, response_wait_us=3.0, server_us=dict.fromkeys(SERVER_PARTS, 0.5),
                    server_batches=2.0)
    assert failed_level(workload, 8, "perf_analyzer 2.59", 3, "cut", measured) == LevelResult(
        **shape, engine="perf_analyzer 2.59", failures=3, error="cut", **measured)


def test_what_perf_analyzer_and_the_statistics_may_leave_out():
    """A summary without a request count, steps without the classifier, a server part counted zero times, a level
    with no latency figure."""
    from tritonize.client.perf.load_generators import server_delta

    assert pa.stdout_figures("Inference count: 48\nExecution count: 20\n") == {"inferences": 48, "executions": 20}
    row = {"Inferences/Second": "3", "Avg latency": "1", "p50 latency": "1", "p90 latency": "1", "p95 latency": "1",
           "p99 latency": "1", "Client Send": "0", "Client Recv": "0", "response wait": "1", "Server Queue": "0",
           "Server Compute Input": "0", "Server Compute Infer": "0", "Server Compute Output": "0"}
    steps = {"steps": {"preprocess": {"inferences": 2, "executions": 1, "server_us": dict.fromkeys(pa.SERVER_COLUMNS, 1.0)}}}
    assert pa.level_figures(row, {"requests": 1, **steps}, batch=1, classifier=None)["server_batches"] is None
    per_request, batches, answered = server_delta({}, {"queue": (0, 5), "success": (2, 10)})
    assert per_request["queue"] == 0.0 and batches == 0.0 and answered == 2
    unknown = _level(server_us=None).csv_row()  # the server's split unknown (a model reloaded in the level)
    assert unknown["Server Queue"] == unknown["Server Compute Infer"] == unknown["Network+Server Send/Recv"] == ""
