"""The units of `client perf`, pinned: the built-in engine's conversions on known answers (nanoseconds summed by
Triton's statistics -> microseconds per request, seconds -> milliseconds, windows counted as perf_analyzer counts
them). Fast, for `make mutation`; the real perf_analyzer's figures against tritonize's for one run are in
test_perf_engines.py."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

import pytest

from tritonize.client import load
from tritonize.client.perf import perf_analyzer_runs as pa
from tritonize.client.perf.load_generators import server_delta
from tritonize.client.perf.results import SERVER_PARTS, LevelResult
from tritonize.client.stats import latency_summary, percentile


def _snapshot(requests: int, inferences: int, executions: int, ns: dict[str, int]) -> dict:
    """Triton's statistics as Connection.statistics gives them: (count, summed ns) per part."""
    return {"success": (requests, sum(ns.values())), **{part: (requests, ns[part]) for part in SERVER_PARTS},
            "executions": (executions, inferences)}


def test_server_delta_turns_summed_nanoseconds_into_microseconds_per_request():
    before = _snapshot(10, 40, 10, dict(queue=1_000_000, compute_input=2_000_000, compute_infer=30_000_000,
                                        compute_output=500_000))
    # 4 more requests of batch 4 in 2 executions: 16 inferences; queue 4 x 250 us, infer 4 x 7.5 ms
    after = _snapshot(14, 56, 12, dict(queue=2_000_000, compute_input=2_400_000, compute_infer=60_000_000,
                                       compute_output=540_000))
    per_request, batch, requests = server_delta(before, after)
    assert per_request == {"queue": 250.0, "compute_input": 100.0, "compute_infer": 7500.0, "compute_output": 10.0}
    assert batch == 8.0 and requests == 4  # 16 inferences in 2 executions


def test_server_delta_from_no_statistics_is_the_totals_themselves():
    """A model whose statistics were empty before (just loaded): what it has now is what the window did."""
    after = _snapshot(4, 8, 2, dict(queue=400_000, compute_input=40_000, compute_infer=4_000_000, compute_output=4_000))
    assert server_delta({}, after) == ({"queue": 100.0, "compute_input": 10.0, "compute_infer": 1000.0,
                                         "compute_output": 1.0}, 4.0, 4)


def test_server_delta_of_nothing_is_zero_not_a_division_by_zero():
    same = _snapshot(3, 3, 3, dict(queue=1, compute_input=1, compute_infer=1, compute_output=1))
    assert server_delta(same, same) == (dict.fromkeys(SERVER_PARTS, 0.0), 0.0, 0)
    assert server_delta({}, {}) == (dict.fromkeys(SERVER_PARTS, 0.0), 0.0, 0)


def test_latency_summary_is_in_milliseconds_with_nearest_rank_percentiles():
    seconds = [0.001 * k for k in range(1, 101)]  # 1 ms .. 100 ms
    summary = latency_summary(seconds)
    assert summary["count"] == 100 and summary["avg_ms"] == pytest.approx(50.5)
    assert [summary[f"p{p}_ms"] for p in (50, 90, 95, 99)] == pytest.approx([50.0, 90.0, 95.0, 99.0])
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0 and percentile([5.0, 1.0, 3.0], 34) == 3.0
    assert percentile([5.0, 1.0, 3.0], 33) == 1.0 and percentile([2.0], 99) == 2.0


def _level(**fields) -> LevelResult:
    figures = dict(model="m", concurrency=2, batch=4, transport="grpc", requests=100, seconds=2.0, throughput=200.0,
                   latency=latency_summary([0.010] * 50 + [0.020] * 50), client_send_us=0.0, client_recv_us=0.0,
                   response_wait_us=15_000.0, server_us={"queue": 500.0, "compute_input": 250.0,
                                                         "compute_infer": 12_000.0, "compute_output": 250.0},
                   server_batches=2.0, tensor_bytes_on_wire=1)
    return LevelResult(**{**figures, **fields})


def test_a_builtin_levels_csv_row_is_in_microseconds_as_perf_analyzers():
    row = _level().csv_row()
    assert row["Server Queue"] == 500 and row["Server Compute Infer"] == 12_000
    assert row["p50 latency"] == 10_000 and row["p99 latency"] == 20_000 and row["Avg latency"] == 15_000
    assert row["Network+Server Send/Recv"] == 15_000 - 13_000 and row["response wait"] == 15_000


def test_perf_analyzer_windows_and_figures_convert_on_known_answers():
    assert pa.time_window_ms(0.6) == 200 and pa.time_window_ms(0.1) == 100 and pa.time_window_ms(None) == 1667
    row = {"Inferences/Second": "400", "Avg latency": "15000", "p50 latency": "10000", "p90 latency": "20000",
           "p95 latency": "20000", "p99 latency": "25000", "Client Send": "30", "Client Recv": "5",
           "response wait": "14000", "Server Queue": "500", "Server Compute Input": "250",
           "Server Compute Infer": "12000", "Server Compute Output": "250"}
    figures = pa.level_figures(row, {"requests": 200, "inferences": 800, "executions": 400}, batch=4)
    assert figures["seconds"] == 2.0 and figures["throughput"] == 400.0 and figures["requests"] == 200
    assert figures["latency"]["avg_ms"] == 15.0 and figures["latency"]["p99_ms"] == 25.0
    assert figures["server_us"]["compute_infer"] == 12_000.0 and figures["server_batches"] == 2.0
    # two time windows of 0.5 s at 400 and 200 inferences/s, batch 4: 50 and 25 requests
    passes = pa.passes_figures([(400.0, 10_000.0), (200.0, 40_000.0)], batch=4, window_s=0.5, per_window=None)
    assert passes["requests"] == 75 and passes["seconds"] == 1.0 and passes["throughput"] == 300.0
    assert passes["response_wait_us"] == 20_000.0 and passes["latency"]["avg_ms"] == 20.0
    counted = pa.passes_figures([(400.0, 10_000.0)], batch=4, window_s=None, per_window=7)
    assert counted["requests"] == 7 and counted["seconds"] == 0.07
    text = "Request count: 12\n  Server:\n    Inference count: 48\n    Execution count: 20\n" \
           "Request count: 30\n    Inference count: 120\n    Execution count: 40\n"
    assert pa.stdout_figures(text) == {"requests": 30, "inferences": 120, "executions": 40}


def test_a_request_count_run_is_timed_by_its_requests_not_by_perf_analyzers_whole_seconds():
    """perf_analyzer 2.51 looks for the count once a second and reports the throughput over its window to that look:
    40 requests of 8 images at 130 ms each took 5.2 s and came out as 320/6 img/s."""
    row = {"Concurrency": "1", "Inferences/Second": str(320 / 6), "Avg latency": "130000", "p50 latency": "1",
           "p90 latency": "1", "p95 latency": "1", "p99 latency": "1", "Client Send": "1", "Client Recv": "1",
           "response wait": "1", "Server Queue": "1", "Server Compute Input": "1", "Server Compute Infer": "1",
           "Server Compute Output": "1"}
    counted = pa.level_figures(row, {"requests": 40}, batch=8, counted=True)
    assert counted["seconds"] == 5.2 and counted["throughput"] == pytest.approx(320 / 5.2)
    assert pa.level_figures(row, {"requests": 40}, batch=8)["throughput"] == pytest.approx(320 / 6)  # time windows: its own
    two = pa.level_figures({**row, "Concurrency": "2", "Avg latency": "260000"}, {"requests": 40}, batch=8, counted=True)
    assert two["seconds"] == 5.2  # 20 each at 260 ms
    assert pa.count_window_seconds(5, 2, 100_000, 1.0) == pytest.approx(0.3)  # the busiest worker sends 3
    # Within the second before the window's end, whatever the mean says
    assert pa.count_window_seconds(40, 1, 100_000, 6.0) == 5.0 and pa.count_window_seconds(40, 1, 200_000, 6.0) == 6.0
    assert pa.count_window_seconds(3, 0, 100_000, 1.0) == pytest.approx(0.3)  # no concurrency read: one worker
    failed = pa.passes_figures([(320 / 6, 130_000.0)], batch=8, window_s=None, per_window=40, concurrency=1)
    assert failed["seconds"] == 5.2 and failed["throughput"] == pytest.approx(320 / 5.2)
    idle = pa.level_figures({**row, "Inferences/Second": "0"}, {"requests": 40}, batch=8, counted=True)
    assert idle["seconds"] == 0.0 and idle["throughput"] == 0.0


def test_perf_analyzer_figures_are_whole_level_results_and_edge_cases_are_zero():
    row = {"Inferences/Second": "400", "Avg latency": "15000", "p50 latency": "10000", "p90 latency": "20000",
           "p95 latency": "21000", "p99 latency": "25000", "Client Send": "30", "Client Recv": "5",
           "response wait": "14000", "Server Queue": "500", "Server Compute Input": "250",
           "Server Compute Infer": "12000", "Server Compute Output": "250"}
    assert pa.level_figures(row, {"requests": 3, "inferences": 12, "executions": 8}, batch=4) == {
        "requests": 3, "seconds": 0.03, "throughput": 400.0,
        "latency": {"count": 3, "avg_ms": 15.0, "p50_ms": 10.0, "p90_ms": 20.0, "p95_ms": 21.0, "p99_ms": 25.0},
        "client_send_us": 30.0, "client_recv_us": 5.0, "response_wait_us": 14000.0,
        "server_us": {"queue": 500.0, "compute_input": 250.0, "compute_infer": 12000.0, "compute_output": 250.0},
        "server_batches": 1.5, "steps": {}}
    idle = pa.level_figures({**row, "Inferences/Second": "0"}, {}, batch=4)
    assert (idle["requests"], idle["seconds"], idle["server_batches"], idle["latency"]["count"]) == (0, 0.0, 0.0, 0)
    assert pa.level_figures(row, {"requests": 7}, batch=3)["seconds"] == 0.0525  # 4 digits kept: 7 x 3 / 400
    # windows of 0.25 s at 320 and 80 inferences/s, batch 2: 40 and 10 requests, each window 0.25 s
    assert pa.passes_figures([(320.0, 2_000.0), (80.0, 5_000.0)], batch=2, window_s=0.25, per_window=None) == {
        "requests": 50, "seconds": 0.5, "throughput": 200.0, "latency": {"count": 50, "avg_ms": 2.6},
        "client_send_us": 0.0, "client_recv_us": 0.0, "response_wait_us": 2600.0,
        "server_us": None, "server_batches": None}  # perf_analyzer gives the server's side of a finished run only
    assert pa.passes_figures([(700.0, 1_000.0)], batch=7, window_s=0.3, per_window=None)["seconds"] == 0.3
    nothing = pa.passes_figures([], batch=4, window_s=1.0, per_window=None)
    assert (nothing["requests"], nothing["seconds"], nothing["throughput"], nothing["response_wait_us"]) == (0, 0, 0.0, 0.0)
    assert pa.passes_figures([(0.0, 0.0)], batch=4, window_s=None, per_window=None)["requests"] == 0
    # a LevelResult takes them as they are
    LevelResult(model="m", concurrency=1, batch=4, transport="grpc", tensor_bytes_on_wire=1,
                **pa.level_figures(row, {"requests": 3, "inferences": 12, "executions": 8}, batch=4))


def test_statistics_of_no_latencies_are_not_numbers_and_a_rank_never_passes_the_end():
    import math

    assert math.isnan(percentile([], 50)) and math.isnan(latency_summary([])["avg_ms"])
    assert latency_summary([])["count"] == 0 and math.isnan(latency_summary([])["p99_ms"])
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0 and percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    values = [float(v) for v in range(1, 201)]
    assert [percentile(values, p) for p in (50, 90, 99, 99.5)] == [100.0, 180.0, 198.0, 199.0]


class _Slow:
    """A stand-in for the gRPC call: each request takes `seconds`; those after `fail_after` fail."""

    def __init__(self, seconds: float, fail_after: int | None = None):
        self.seconds, self.fail_after, self.calls, self.lock = seconds, fail_after, 0, threading.Lock()
        self.sent: set[tuple[bytes, float]] = set()  # (payload, timeout) of every call

    def __call__(self, payload, timeout):
        import grpc

        with self.lock:
            self.calls += 1
            n = self.calls
            self.sent.add((payload, timeout))
        time.sleep(self.seconds)
        if self.fail_after is not None and n > self.fail_after:
            error = grpc.RpcError("dead stub")
            error.code = lambda: grpc.StatusCode.INTERNAL
            error.details = lambda: f"Stub process 'm_0_0' is not healthy (call {n})."
            raise error


def test_a_count_window_is_exactly_its_requests_and_ends_with_the_last():
    call = _Slow(0.002)
    level = load._Level(call, [b"x", b"y"], timeout=5, concurrency=2, warmup=3)
    level.warmed.wait()
    assert call.calls == 6  # each worker's warm-up, none of them in the window
    window = level.measure(seconds=None, count=20, limit=30)
    assert len(window.requests) == 20 and window.failures == 0 and call.calls == 26
    assert window.seconds == pytest.approx(window.requests[-1][1] - (window.requests[-1][1] - window.seconds))
    assert all(sent < done for sent, done in window.requests)
    assert window.seconds >= max(done for _, done in window.requests) - min(sent for sent, _ in window.requests) - 1e-3
    assert call.sent == {(b"x", 5), (b"y", 5)}  # each worker its own prepared request, with the timeout
    assert all(not t.is_alive() for t in level.threads)


def test_a_failure_in_the_warm_up_ends_the_level_with_its_error():
    import threading as _threading

    call = _Slow(0.001, fail_after=1)
    level = load._Level(call, [b"x"], timeout=5, concurrency=1, warmup=3)
    with pytest.raises(_threading.BrokenBarrierError):
        level.warmed.wait()
    assert level.error == ("INTERNAL", "Stub process 'm_0_0' is not healthy (call 2).") and level.stop.is_set()
    level.finish()
    assert call.calls == 2 and all(t.daemon and not t.is_alive() for t in level.threads)


def test_a_time_window_counts_what_completed_in_it_and_its_failures():
    call = _Slow(0.005, fail_after=12)
    level = load._Level(call, [b"x"], timeout=5, concurrency=1, warmup=2)
    level.warmed.wait()
    started = time.monotonic()
    window = level.measure(seconds=0.6, count=None, limit=30)
    assert window.seconds == pytest.approx(0.6, abs=0.05) and time.monotonic() - started < 0.9  # polled finely
    assert len(window.requests) == 10  # requests 3..12 succeeded; later ones failed, each after RETRY_PAUSE
    assert 2 <= window.failures <= 0.6 / load.RETRY_PAUSE + 1
    assert window.error == "INTERNAL: Stub process 'm_0_0' is not healthy (call 13)."  # the first failure's


PERF_ANALYZER_DATA = Path(__file__).resolve().parent.parent / "data" / "perf_analyzer"


def test_perf_analyzer_on_an_ensemble_is_read_per_step_from_its_own_summary():
    """perf_analyzer 2.51 against onnx_classifier at concurrency 8, recorded on the embedded server: its summary gives
    the ensemble's own counts (always a batch of 1) and then each step's, onnx_model first. The last 'Inference
    count' in it is preprocess's (35 in 13 executions), which was read as the level's batch. The level's batch is the
    classifier's (27 in 8); its split, the steps' sum (perf_analyzer's 'queue 183142 usec + compute 763900 usec')."""
    text = (PERF_ANALYZER_DATA / "ensemble_onnx_classifier_c8.txt").read_text()
    row = next(csv.DictReader((PERF_ANALYZER_DATA / "ensemble_onnx_classifier_c8.csv").read_text().splitlines()))
    figures = pa.level_figures(row, pa.stdout_figures(text), batch=1, classifier="onnx_model")
    assert figures["requests"] == 27 and figures["throughput"] == 7.46288
    assert figures["steps"] == {
        "onnx_model": {"server_us": {"queue": 145403.0, "compute_input": 3245.0, "compute_infer": 565744.0,
                                     "compute_output": 5808.0}, "server_batches": 27 / 8},
        "preprocess": {"server_us": {"queue": 37739.0, "compute_input": 246.0, "compute_infer": 183700.0,
                                     "compute_output": 5155.0}, "server_batches": 35 / 13}}
    assert figures["server_batches"] == 27 / 8
    assert figures["server_us"] == {"queue": 183142.0, "compute_input": 3491.0, "compute_infer": 749444.0,
                                    "compute_output": 10963.0}
    assert sum(figures["server_us"].values()) - figures["server_us"]["queue"] == pytest.approx(763900, abs=3)
