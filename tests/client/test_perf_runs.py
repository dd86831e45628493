"""`client perf`'s parts that need no server (they run in `make mutation`): perf_analyzer's command line, a run of it
read back (here commands that answer as perf_analyzer 2.51 does: its exit codes, its CSV, its `-v` lines), its input
file, and the request the built-in load generator sends, built once. A real perf_analyzer against the real server
is in test_perf_engines.py."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tritonize.client.connection import ModelInfo
from tritonize.client.perf import perf_analyzer_runs as pa
from tritonize.client.perf.workload import Workload
from tritonize.preprocessing import Preprocessing
from tritonize.tools.perf_analyzer import PerfAnalyzer

TOOL = PerfAnalyzer(Path("/opt/pa/perf_analyzer"), "2.51.0")
CONTRACT = Preprocessing(resize=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _info(max_batch_size: int = 8, dtype: str = "TYPE_FP32", dims=(3, 224, 224), name: str = "onnx_model") -> ModelInfo:
    return ModelInfo.from_config({
        "name": name, "max_batch_size": max_batch_size,
        "input": [{"name": "input", "data_type": dtype, "dims": list(dims)}],
        "output": [{"name": "output", "data_type": "TYPE_FP32", "dims": [1000]}],
        "parameters": {k: {"string_value": v} for k, v in CONTRACT.to_parameters().items()},
    })


def test_the_command_line_of_a_level_in_every_mode(tmp_path):
    data, out = tmp_path / "in.json", tmp_path / "level.csv"
    base = [str(TOOL.path), "-m", "onnx_model", "-i", "grpc", "-u", "127.0.0.1:8001", "--input-data", str(data),
            "--concurrency-range", "2", "-s", "100", "-r", "10", "-f", str(out), "--verbose-csv", "-v"]
    timed = pa.argv(TOOL, "onnx_model", "127.0.0.1:8001", data, out, concurrency=2, batch=8, batching=True, seconds=1.5,
                    requests=None, stability=100.0, shared_memory="none", output_bytes=32000)
    assert timed == [*base, "-b", "8", "-p", "500"]
    counted = pa.argv(TOOL, "onnx_model", "127.0.0.1:8001", data, out, concurrency=2, batch=1, batching=False, seconds=None,
                      requests=40, stability=100.0, shared_memory="system", output_bytes=4000,
                      headers={"tritonize-control-key": "k" * 24}, root_certificates="/ca.pem")
    assert counted == [*base, "--request-count", "40", "-H", f"tritonize-control-key:{'k' * 24}", "--ssl-grpc-use-ssl",
                       "true", "--ssl-grpc-root-certifications-file", "/ca.pem", "--shared-memory", "system",
                       "--output-shared-memory-size", "4000"]
    assert pa.argv(TOOL, "m", "u", data, out, concurrency=1, batch=1, batching=False, seconds=None, requests=None,
                   stability=12.5, shared_memory="none", output_bytes=1)[-2:] == ["-p", "1667"]
    assert "12.5" in pa.argv(TOOL, "m", "u", data, out, concurrency=1, batch=1, batching=False, seconds=None,
                             requests=None, stability=12.5, shared_memory="none", output_bytes=1)


ROW = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
       "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
       "Avg latency,request/response,response wait\n1,53.3333,120,330,50,100,2000,20,30,2500,3000,3250,3750,2750,150,2500\n")


def _perf_analyzer(tmp_path: Path, code: int, stdout: str = "", rows: str | None = ROW, sleep: float = 0.0) -> list[str]:
    """A command that answers as perf_analyzer 2.51 does: its stdout, its CSV (when it writes one), its exit code."""
    script = tmp_path / "perf_analyzer.py"
    script.write_text(f"import sys, time\ntime.sleep({sleep})\nsys.stdout.write({stdout!r})\n"
                      + (f"open(sys.argv[1], 'w').write({rows!r})\n" if rows is not None else "")
                      + f"sys.exit({code})\n")
    return [sys.executable, str(script), str(tmp_path / "level.csv")]


def test_a_run_read_back_its_row_and_its_summarys_counts(tmp_path):
    summary = "Request count: 40\n  Server:\n    Inference count: 320\n    Execution count: 40\n"
    row, figures = pa.run_level(_perf_analyzer(tmp_path, 0, summary), tmp_path / "level.csv", "during m", 30)
    assert row["Inferences/Second"] == "53.3333" and row["Avg latency"] == "2750"
    assert figures == {"requests": 40, "inferences": 320, "executions": 40}


@pytest.mark.parametrize("code, stdout, rows, says", [
    (2, "", None, "^perf_analyzer found no stable measurement during m within 10 windows \\(the machine is busy\\?\\); "
                  "raise --stability or --duration$"),
    (99, "error: failed to get model metadata: unknown model 'x'\nmore\n", None,
     "^perf_analyzer failed during m: error: failed to get model metadata: unknown model 'x'$"),
    (99, "the last line\n", None, "^perf_analyzer failed during m: the last line$"),
    (99, "", None, "^perf_analyzer failed during m: exit code 99$"),
    (0, "", None, "^perf_analyzer failed during m: exit code 0$"),  # finished, but no CSV
    (0, "", ROW + ROW.splitlines()[1] + "\n", "^perf_analyzer wrote 2 CSV rows during m, expected one$"),
])
def test_a_run_that_fails_says_why(tmp_path, code, stdout, rows, says):
    with pytest.raises(pa.PerfAnalyzerFailed, match=says) as failed:
        pa.run_level(_perf_analyzer(tmp_path, code, stdout, rows), tmp_path / "level.csv", "during m", 30)
    assert not failed.value.gone and not isinstance(failed.value, pa.RequestsFailed)


def test_a_lost_server_and_failed_requests_keep_the_windows_measured_before(tmp_path):
    with pytest.raises(pa.PerfAnalyzerFailed) as lost:
        pa.run_level(_perf_analyzer(tmp_path, 99, "error: failed to connect to all addresses\n", None),
                     tmp_path / "level.csv", "during m", 30)
    assert lost.value.gone
    stdout = ("  Pass [1] throughput: 53.3333 infer/sec. Avg latency: 2750 usec (std 20 usec). \n"
              "  Pass [2] throughput: 40 infer/sec. Avg latency: 3000 usec (std 20 usec). \n"
              "Thread [0] had error: [StatusCode.INTERNAL] Stub process 'm_0_0' is not healthy.\n"
              "Thread [1] had error: Socket closed\n")
    with pytest.raises(pa.RequestsFailed) as failed:
        pa.run_level(_perf_analyzer(tmp_path, 99, stdout, None), tmp_path / "level.csv", "during m", 30)
    e = failed.value
    assert str(e) == "requests failed during m: [StatusCode.INTERNAL] Stub process 'm_0_0' is not healthy."
    assert e.passes == [(53.3333, 2750.0), (40.0, 3000.0)] and e.failures == 2 and not e.gone
    assert e.first_error == "[StatusCode.INTERNAL] Stub process 'm_0_0' is not healthy."
    with pytest.raises(pa.RequestsFailed) as closed:
        pa.run_level(_perf_analyzer(tmp_path, 99, "Thread [0] had error: Socket closed\n", None),
                     tmp_path / "level.csv", "during m", 30)
    assert closed.value.gone and closed.value.passes == []


def test_a_run_past_its_time_limit_is_stopped(tmp_path):
    with pytest.raises(pa.PerfAnalyzerFailed, match="^perf_analyzer did not finish during m within 1 s$"):
        pa.run_level(_perf_analyzer(tmp_path, 0, sleep=30), tmp_path / "level.csv", "during m", 1)


def test_the_input_file_holds_one_image_as_perf_analyzer_reads_it(tmp_path):
    image = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    assert pa.input_data("input", image) == {"data": [{"input": {
        "content": {"b64": base64.b64encode(image.tobytes()).decode()}, "shape": [1, 2, 3]}}]}
    encoded = np.array([b"\x89PNG..."], dtype=np.object_)
    assert base64.b64decode(pa.input_data("image", encoded)["data"][0]["image"]["content"]["b64"]) == len(b"\x89PNG...").to_bytes(4, "little") + b"\x89PNG..."
    runs = pa.PerfAnalyzerRuns(TOOL, "input", image)
    try:
        assert json.loads(runs.data_file.read_text()) == pa.input_data("input", image)
        assert [runs.next_csv().name, runs.next_csv().name] == ["level_1.csv", "level_2.csv"]
        folder = runs.data_file.parent
    finally:
        runs.close()
    assert not folder.exists()


def test_a_request_is_built_once_with_its_data_or_its_shared_memory_regions():
    from tritonclient.grpc import service_pb2

    class Regions:
        input = ("tritonize_1_in", 4_816_896)

        @staticmethod
        def output(slot):
            return (f"tritonize_1_out{slot}", 32_000)

    batch = np.ones((8, 3, 224, 224), np.float32)
    workload = Workload(_info(), batch, shared_memory=False)
    assert (workload.in_bytes, workload.out_bytes, workload.out_shape) == (4_816_896, 32_000, (8, 1000))
    assert workload.transport == "grpc" and workload.tensor_bytes_on_wire == 4_816_896 + 32_000 and workload.model == "onnx_model"
    request = service_pb2.ModelInferRequest.FromString(workload.serialized())
    assert request.model_name == "onnx_model" and request.raw_input_contents == [batch.tobytes()]
    assert (request.inputs[0].name, request.inputs[0].datatype, list(request.inputs[0].shape)) == ("input", "FP32", [8, 3, 224, 224])
    assert [o.name for o in request.outputs] == ["output"]
    shared = Workload(_info(), batch, shared_memory=True, model="asked")
    assert shared.transport == "system shared memory" and shared.tensor_bytes_on_wire == 0 and shared.model == "asked"
    request = service_pb2.ModelInferRequest.FromString(shared.serialized(Regions, slot=3))
    assert not request.raw_input_contents
    params = lambda t: {k: (v.string_param or v.int64_param) for k, v in t.parameters.items()}  # noqa: E731
    assert params(request.inputs[0]) == {"shared_memory_region": "tritonize_1_in", "shared_memory_byte_size": 4_816_896}
    assert params(request.outputs[0]) == {"shared_memory_region": "tritonize_1_out3", "shared_memory_byte_size": 32_000}
    unbatched = Workload(_info(max_batch_size=0), batch[:1], shared_memory=False)
    assert list(service_pb2.ModelInferRequest.FromString(unbatched.serialized()).inputs[0].shape) == [3, 224, 224]
    images = np.array([[b"\x89PNG one"], [b"two"]], dtype=np.object_)  # the preprocess model's encoded images
    ensemble = ModelInfo.from_config({"name": "onnx_ensemble", "platform": "ensemble", "max_batch_size": 8,
                                      "input": [{"name": "image", "data_type": "TYPE_STRING", "dims": [1]}],
                                      "output": [{"name": "output", "data_type": "TYPE_FP32", "dims": [1000]}],
                                      "parameters": {k: {"string_value": v} for k, v in CONTRACT.to_parameters().items()},
                                      "ensemble_scheduling": {"step": [{"model_name": "preprocess"},
                                                                       {"model_name": "onnx_model"}]}})
    encoded = Workload(ensemble, images, shared_memory=False)
    wire = b"".join(len(b).to_bytes(4, "little") + b for b in (b"\x89PNG one", b"two"))  # BYTES: a 4-byte length, the bytes
    assert encoded.in_bytes == len(wire)
    assert service_pb2.ModelInferRequest.FromString(encoded.serialized()).raw_input_contents == [wire]
