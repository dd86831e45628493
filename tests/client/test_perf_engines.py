"""`client perf` measured by the real perf_analyzer against the embedded server, and the built-in load process."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.client.test_reports import PERF_ANALYZER_HEADER
from tests.conftest import run_cli
from tritonize.tools import perf_analyzer

NEEDS_PERF_ANALYZER = pytest.mark.skipif(
    perf_analyzer.find() is None,
    reason="perf_analyzer not found on PATH or where `tritonize tools get-perf-analyzer` puts it (make test runs it)")


@NEEDS_PERF_ANALYZER
def test_perf_analyzer_measures_and_its_own_csv_rows_are_kept(small_server, tmp_path):
    out = tmp_path / "perf"
    # --stability 1000: any three windows are stable enough (what is tested is what perf_analyzer wrote, not how
    # steady this busy machine is; with the default, a run beside the other test worker gave up at concurrency 2)
    result = run_cli("client", "perf", "--models", "onnx_model", "--concurrency", "1,2", "--duration", "0.6",
                     "--warmup-requests", "1", "--load-generator", "perf_analyzer", "--preprocess", "client", "--output-dir", out,
                     "--stability", "1000", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    assert f"measured by perf_analyzer {perf_analyzer.TRITONCLIENT_VERSION}" in result.stdout
    lines = (out / "onnx_model.client.csv").read_text().splitlines()
    assert lines[0] == PERF_ANALYZER_HEADER  # perf_analyzer's own -f --verbose-csv header
    rows = list(csv.DictReader(lines))
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2]
    throughputs = [float(r["Inferences/Second"]) for r in rows]
    assert throughputs == sorted(throughputs)  # perf_analyzer's order: increasing throughput
    for r in rows:
        assert int(r["Client Send"]) > 0  # perf_analyzer times its own request preparation
        assert 0 < int(r["Server Compute Infer"]) < int(r["Avg latency"]) and int(r["p50 latency"]) <= int(r["p99 latency"])
    report = json.loads((out / "perf.json").read_text())
    assert report["engine"].startswith("perf_analyzer 2.51.0") and len(report["levels"]) == 2
    for level in report["levels"]:
        assert level["engine"] == "perf_analyzer 2.51.0" and level["requests"] > 0 and level["server_batches"] >= 1
    with Image.open(out / "latency_vs_throughput.png") as image:
        assert image.format == "PNG"


@NEEDS_PERF_ANALYZER
def test_perf_analyzer_sends_the_encoded_photo_through_shared_memory(small_server, tmp_path):
    # The server's preprocess model decodes every image: a BYTES element without its 4-byte length
    # prefix, or anything but the photo, makes it refuse the request and perf_analyzer fail.
    result = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", "server", "--concurrency", "2",
                     "--requests", "3", "--batch", "2", "--shared-memory", "system", "--load-generator", "perf_analyzer",
                     "--json", "--output-dir", tmp_path, "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (level,) = report["levels"]
    assert (level["model"], level["served"]) == ("onnx_model", "onnx_classifier") and level["transport"] == "system shared memory"
    assert level["batch"] == 2 and level["requests"] >= 3 and level["tensor_bytes_on_wire"] == 0
    savings = report["shared_memory_savings"]["onnx_model"]
    assert savings["grpc"]["tensor_bytes_on_wire"] > 2 * 60_000 and savings["system_shared_memory"]["tensor_bytes_on_wire"] == 0


def test_auto_measures_with_the_builtin_engine_when_perf_analyzer_is_absent_and_says_so(small_server, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("TRITONIZE_TOOLS", str(tmp_path / "no-tools"))
    result = run_cli("client", "perf", "--models", "onnx_model", "--concurrency", "1", "--requests", "4", "--warmup-requests", "1",
                     "--preprocess", "client", "--output-dir", tmp_path / "perf", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    assert "perf_analyzer not found" in result.stderr and "tritonize tools get-perf-analyzer" in result.stderr
    assert "measured by builtin" in result.stdout
    rows = list(csv.DictReader((tmp_path / "perf" / "onnx_model.client.csv").read_text().splitlines()))
    assert [r["Concurrency"] for r in rows] == ["1"]


def test_the_builtin_load_process_sends_prepared_requests_and_counts_its_window(small_server):
    from tritonize.client.connection import Connection
    from tritonize.client.load import LoadError, LoadProcess
    from tritonize.client.perf import PerfOptions, Workload, request_batch

    with Connection(small_server.grpc_url) as connection:
        info = connection.model_for("onnx_model", "client")
        workload = Workload(info, request_batch(info, PerfOptions(batch=2)), shared_memory=False)
        before = connection.statistics("onnx_model")["success"][0]
        with LoadProcess(connection.url, [workload.serialized(), workload.serialized()], timeout=30) as load:
            assert load.process.pid != os.getpid()
            first = load.run(concurrency=2, warmup=1, seconds=None, count=5, limit=60)
            second = load.run(concurrency=1, warmup=1, seconds=0.5, count=None, limit=60)  # the same process again
            assert load.process.poll() is None
        served = connection.statistics("onnx_model")["success"][0] - before
    assert len(first.requests) == 5 and all(done > sent for sent, done in first.requests)
    assert first.seconds > 0 and second.seconds == pytest.approx(0.5, abs=0.2) and second.requests
    # Everything sent reached the server: warm-up, measured, and the requests in flight when a window closed.
    assert served >= 2 + 5 + 1 + len(second.requests)
    wrong = workload.serialized().replace(b"onnx_model", b"nosuch_mdl")
    with LoadProcess(small_server.grpc_url, [wrong], timeout=30) as load, pytest.raises(LoadError, match="nosuch_mdl"):
        load.run(concurrency=1, warmup=1, seconds=0.2, count=None, limit=10)


@NEEDS_PERF_ANALYZER
def test_perf_analyzers_server_figures_are_tritonizes_for_the_same_statistics(small_server, tmp_path):
    """One perf_analyzer run at batch 4 in count windows; Triton's statistics read right before and after it.
    perf_analyzer's stdout gives its windows' request, inference and execution counts; what the statistics gained
    over the run is the same requests plus the few it sent outside its windows. Per request, tritonize's figures
    from the statistics (the built-in engine's conversion) must be perf_analyzer's: within 25 % where a part
    takes 100 us or more (windows vary that much on a busy machine), within 100 us below. A unit slip (x1000),
    a per-inference average (/4) or a per-execution one would be far outside."""
    from tritonize.client.connection import Connection
    from tritonize.client.perf import perf_analyzer_runs as pa
    from tritonize.client.perf.load_generators import server_delta

    tool = perf_analyzer.find()
    model = "onnx_model"
    with Connection(small_server.grpc_url) as connection:
        info = connection.model(model)
        sample = np.zeros(info.input_dims, np.float32)
        runs = pa.PerfAnalyzerRuns(tool, info.input_name, sample)
        try:
            csv_file = runs.next_csv()
            command = pa.argv(tool, model, small_server.grpc_url, runs.data_file, csv_file, concurrency=1, batch=4,
                              batching=True, seconds=None, requests=30, stability=1000, shared_memory="none",
                              output_bytes=0)
            before = connection.statistics(model)
            row, figures = pa.run_level(command, csv_file, "in the units test", timeout=300)
            after = connection.statistics(model)
        finally:
            runs.close()
    per_request, batches, requests = server_delta(before, after)
    assert figures["requests"] <= requests <= figures["requests"] + 8, (figures, requests)  # its windows, + a few
    assert batches == pytest.approx(4.0) and figures["inferences"] == 4 * figures["requests"]
    for part, column in pa.SERVER_COLUMNS.items():
        theirs = float(row[column])
        assert abs(per_request[part] - theirs) <= max(100.0, 0.25 * theirs), (part, per_request, row)
    assert float(row["Server Compute Infer"]) >= 100  # the comparison above is a relative one for the main part


@pytest.mark.parametrize("load_generator", [pytest.param("perf_analyzer", marks=NEEDS_PERF_ANALYZER), "builtin"])
def test_requests_n_sends_n_and_the_outputs_name_the_model_and_its_path(small_server, tmp_path, load_generator):
    """--requests 6 sends six requests per level (perf_analyzer's count windows made 6 into 74 before), and
    `--models onnx_model` along the server path is reported as onnx_model, not as the ensemble it went through."""
    from tritonize.client.connection import Connection

    with Connection(small_server.grpc_url) as connection:
        before = connection.statistics("onnx_classifier")["success"][0]
        out = tmp_path / "perf"
        result = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", "server", "--concurrency", "2",
                         "--requests", "6", "--warmup-requests", "0", "--load-generator", load_generator,
                         "--output-dir", out, "--url", small_server.grpc_url)
        assert result.exit_code == 0, result.output
        sent = connection.statistics("onnx_classifier")["success"][0] - before
    assert sent == 6
    (level,) = json.loads((out / "perf.json").read_text())["levels"]
    assert (level["model"], level["preprocess"], level["served"], level["requests"]) == (
        "onnx_model", "server", "onnx_classifier", 6)
    table_row = next(line for line in result.stdout.splitlines() if line.strip().startswith("onnx_model"))
    assert "server (onnx_classifier)" in table_row
    assert (out / "onnx_model.server.csv").is_file() and not (out / "onnx_classifier.csv").exists()


@pytest.mark.parametrize("load_generator", [pytest.param("perf_analyzer", marks=NEEDS_PERF_ANALYZER), "builtin"])
def test_requests_n_are_timed_to_the_fraction_of_a_second(small_server, tmp_path, load_generator):
    """One worker sends 8 requests back to back: they take 8 times their mean latency, and the throughput is
    requests over that time. perf_analyzer 2.51 reports a --request-count run over whole seconds (it looks for the
    count once a second: 320 images came out as 320/6, 320/7 and 320/8 img/s), which on deb75ca was the level's."""
    out = tmp_path / "perf"
    result = run_cli("client", "perf", "--models", "onnx_model", "--concurrency", "1", "--requests", "8", "--batch", "2",
                     "--warmup-requests", "1", "--load-generator", load_generator, "--output-dir", out, "--json",
                     "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    (level,) = json.loads(result.stdout)["levels"]
    took = level["requests"] * level["latency"]["avg_ms"] / 1e3  # Little's law, one request in flight
    assert level["requests"] == 8 and level["seconds"] == pytest.approx(took, rel=0.1), level
    assert level["throughput"] == pytest.approx(8 * 2 / level["seconds"], rel=1e-3)
