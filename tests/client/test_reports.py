"""Percentiles, the perf_analyzer CSV and the plot (no server needed)."""

from __future__ import annotations

import csv

import pytest
from PIL import Image

from tritonize.client.perf import CSV_COLUMNS, LevelResult, PerfOptions, plot, write_csv
from tritonize.client.stats import latency_summary, percentile
from tritonize.errors import TritonizeError

# perf_analyzer's `-f` header as its docs show it, plus the three `--verbose-csv` columns.
PERF_ANALYZER_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
    "Avg latency,request/response,response wait"
)


def test_nearest_rank_percentiles():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([7.0], 95) == 7.0
    assert percentile([3, 1, 2], 50) == 2  # order does not matter
    s = latency_summary([0.001, 0.002, 0.003, 0.004])
    assert s["count"] == 4 and s["avg_ms"] == pytest.approx(2.5) and s["p50_ms"] == pytest.approx(2.0) and s["p99_ms"] == pytest.approx(4.0)


def level(model: str, concurrency: int, throughput: float, p50_ms: float) -> LevelResult:
    return LevelResult(
        model=model, concurrency=concurrency, batch=1, transport="grpc", requests=100, seconds=1.0,
        throughput=throughput,
        latency={"count": 100, "avg_ms": p50_ms * 1.1, "p50_ms": p50_ms, "p90_ms": p50_ms * 1.2, "p95_ms": p50_ms * 1.3, "p99_ms": p50_ms * 1.5},
        client_send_us=120.7, client_recv_us=30.2, response_wait_us=p50_ms * 1e3,
        server_us={"queue": 50.0, "compute_input": 100.0, "compute_infer": p50_ms * 800, "compute_output": 20.0},
        server_batches=1.0, tensor_bytes_on_wire=606_112,
    )


def test_csv_has_perf_analyzer_columns_in_microseconds_sorted_by_throughput(tmp_path):
    levels = [level("m", 1, 400.0, 2.5), level("m", 4, 900.0, 4.4), level("m", 2, 700.0, 2.9)]
    path = write_csv(levels, tmp_path / "m.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == PERF_ANALYZER_HEADER == ",".join(CSV_COLUMNS)
    rows = list(csv.DictReader(lines))
    assert [r["Concurrency"] for r in rows] == ["1", "2", "4"]  # increasing throughput, as perf_analyzer sorts
    first = rows[0]
    assert first["p50 latency"] == "2500" and first["p99 latency"] == "3750" and first["Avg latency"] == "2750"
    assert first["Client Send"] == "120" and first["Client Recv"] == "30" and first["request/response"] == "150"
    assert first["Server Compute Infer"] == "2000" and first["Server Queue"] == "50"
    # Network+Server Send/Recv: the client's wait minus what the server accounts for (2500 - 2170).
    assert first["Network+Server Send/Recv"] == "330"
    assert all(v.isdigit() for k, v in first.items() if k != "Inferences/Second")


def test_plot_draws_all_models_in_one_png(tmp_path):
    levels = [level("onnx_model", c, 100.0 * c, 2.0 + c) for c in (1, 2, 4)] + [level("torch_model", c, 80.0 * c, 3.0 + c) for c in (1, 2, 4)]
    path = plot(levels, tmp_path / "latency_vs_throughput.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 400


def test_the_plot_holds_each_series_p50_solid_p99_dashed_by_concurrency_and_says_what_was_measured():
    """What the PNG shows, read from the figure: one colour per model and preprocessing path, points in increasing
    concurrency labelled c1, c2, c4, the batch and the series in the title."""
    import matplotlib.pyplot as plt

    from tritonize.client.perf.report import figure

    levels = [level("onnx_model", c, 100.0 * c, 2.0 + c) for c in (4, 1, 2)] + [level("torch_model", 1, 80.0, 3.0)]
    levels[-1] = LevelResult(**{**vars(levels[-1]), "batch": 8, "preprocess": "server"})
    fig = figure(levels, "Served resnet18")
    try:
        (ax,) = fig.axes
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("throughput (inferences/s)", "latency per request (ms)")
        assert ax.get_title() == "Served resnet18 (batch 1)\nonnx_model, client preprocessing; torch_model, server preprocessing"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["onnx_model, client p50", "onnx_model, client p99", "torch_model, server p50",
                               "torch_model, server p99"]
        p50, p99 = lines["onnx_model, client p50"], lines["onnx_model, client p99"]
        assert list(p50.get_xdata()) == [100.0, 200.0, 400.0] and list(p50.get_ydata()) == [3.0, 4.0, 6.0]
        assert list(p99.get_ydata()) == [4.5, 6.0, 9.0] and (p50.get_linestyle(), p99.get_linestyle()) == ("-", "--")
        assert (p50.get_marker(), p99.get_marker()) == ("o", "x") and p50.get_color() == p99.get_color() == "C0"
        assert lines["torch_model, server p50"].get_color() == "C1"
        notes = [(t.get_text(), t.xy) for t in ax.texts]
        assert notes[:3] == [("c1", (100.0, 3.0)), ("c2", (200.0, 4.0)), ("c4", (400.0, 6.0))]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(lines)
        assert tuple(fig.get_size_inches()) == (8.0, 5.0)
    finally:
        plt.close(fig)
    empty = figure([], "Nothing")
    assert empty.axes[0].get_title() == "Nothing (batch 1)\n"
    plt.close(empty)
    eight = figure([LevelResult(**{**vars(one), "batch": 8}) for one in levels[:3]], "Served")  # a --batch 8 run
    assert eight.axes[0].get_title() == "Served (batch 8)\nonnx_model, client preprocessing"
    plt.close(eight)


@pytest.mark.parametrize("kwargs,message", [
    ({"concurrency": ()}, "concurrency"), ({"concurrency": (0,)}, "concurrency"), ({"batch": 0}, "batch"),
    ({"requests": None, "duration": None}, "--requests or --duration"), ({"shared_memory": "cuda"}, "shared-memory"),
])
def test_perf_options_are_checked(kwargs, message):
    with pytest.raises(TritonizeError, match=message):
        PerfOptions(**kwargs)


@pytest.mark.parametrize("short", [(0,), (1,), (2,), (0, 1, 2)])
def test_compare_passes_only_when_every_pair_reaches_the_agreement(short):
    """Three pairs; each falls short of --min-top1-agreement alone in turn, then all: the comparison fails. Pairs at
    exactly the bound pass."""
    from tritonize.client.compare import CompareReport

    pairs = [{"top1_agreement": 0.875 if i in short else 0.9} for i in range(3)]
    assert not CompareReport(url="localhost:8001", pairs=pairs, min_top1_agreement=0.9).passed
    assert CompareReport(url="localhost:8001", pairs=[{"top1_agreement": 0.9}] * 3, min_top1_agreement=0.9).passed
