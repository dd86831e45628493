"""classify / compare / perf against the real embedded Triton server."""

from __future__ import annotations

import contextlib
import csv
import json
import socket
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from tests.client.conftest import PHOTO
from tests.client.test_reports import PERF_ANALYZER_HEADER
from tests.conftest import run_cli
from tritonize.errors import TritonizeError


def reference_logits(artifacts, image) -> np.ndarray:
    """Local onnxruntime on the input torchvision's own transforms make of `image` (a path or a PIL image):
    what the server must return."""
    import onnxruntime as ort
    import torchvision

    transforms = torchvision.models.ResNet18_Weights.DEFAULT.transforms()
    picture = image if isinstance(image, Image.Image) else Image.open(image).convert("RGB")
    x = transforms(picture).numpy()[None]
    session = ort.InferenceSession(str(artifacts / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits.astype(np.float64) - logits.max())
    return e / e.sum()


def test_classify_table_matches_local_onnxruntime_and_torchvision_labels(small_server, small_artifacts):
    import torchvision

    result = run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    probs = _softmax(reference_logits(small_artifacts, PHOTO)[0])
    categories = torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"]
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()[:2] in {f"{i}." for i in range(1, 6)}]
    assert len(lines) == 5
    for rank, index in enumerate(np.argsort(-probs)[:5]):
        row = result.stdout.splitlines()[rank + 2]
        assert categories[index] in row and f"{probs[index]:.4f}" in row, (row, categories[index])


# Random-init weights rank the classes almost the same whatever the input (the top-5 indices of the photo,
# the photo rotated, in BGR, or noise are equal): the probabilities tell the inputs apart. 1e-6 is far
# below what each of these preprocessing mistakes moves them (checked below), far above float noise.
PROBABILITY_TOLERANCE = 1e-6


def test_classify_probabilities_match_torchvision_closely_enough_to_catch_preprocessing_mistakes(
        small_server, small_artifacts, tmp_path):
    wide = tmp_path / "wide.png"  # 512x347: 256 * 512 / 347 is not a whole number, so the resize rounds
    Image.open(PHOTO).convert("RGB").crop((0, 100, 512, 447)).save(wide)
    for path in (PHOTO, wide):
        result = run_cli("client", "classify", path, "--model", "onnx_model", "--json", "--url", small_server.grpc_url)
        assert result.exit_code == 0, result.output
        (prediction,) = json.loads(result.stdout)["predictions"]
        picture = Image.open(path).convert("RGB")
        expected = _softmax(reference_logits(small_artifacts, picture)[0])
        served = {t["index"]: t["probability"] for t in prediction["top_k"]}
        assert list(served) == list(np.argsort(-expected)[:5])
        assert max(abs(p - expected[i]) for i, p in served.items()) <= PROBABILITY_TOLERANCE
        mistakes = {
            "rotated": picture.rotate(90, expand=True),
            "BGR": Image.fromarray(np.asarray(picture)[..., ::-1].copy()),
            "resized as if tall": picture.resize((256, round(256 * picture.height / picture.width))).transpose(
                Image.Transpose.TRANSPOSE).resize(picture.size),
            "long side rounded up": picture.resize((picture.width + 1, picture.height)),
        }
        for mistake, wrong in mistakes.items():
            moved = _softmax(reference_logits(small_artifacts, wrong)[0])
            assert max(abs(p - moved[i]) for i, p in served.items()) > 100 * PROBABILITY_TOLERANCE, mistake


def test_classify_json_every_mode_and_bad_files(small_server, tmp_path):
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(rng.integers(0, 256, (180, 240, 3), dtype=np.uint8), "RGB")
    good = []
    for mode in ["1", "L", "LA", "P", "RGBA", "CMYK", "I;16"]:
        image = rgb.convert("L").convert(mode) if mode == "I;16" else rgb.convert(mode)
        path = tmp_path / f"mode_{mode.replace(';', '_')}.{'jpg' if mode == 'CMYK' else 'png'}"
        image.save(path)
        good.append(path)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(PHOTO.read_bytes()[:3000])
    text = tmp_path / "readme.png"
    text.write_text("not a picture")
    folder = tmp_path / "a_directory"
    folder.mkdir()
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)
    bad = [empty, truncated, text, folder, bomb]

    result = run_cli("client", "classify", *good, *bad, PHOTO, "--model", "torch_model", "--top-k", "3", "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [p["image"] for p in report["predictions"]] == [str(p) for p in [*good, PHOTO]]
    for p in report["predictions"]:
        assert len(p["top_k"]) == 3 and 0 < p["top_k"][2]["probability"] <= p["top_k"][0]["probability"] < 1
        assert all(t["label"] and not t["label"].startswith("class ") for t in p["top_k"])
    assert len(report["failures"]) == len(bad) and report["error"] is None
    assert report["preprocess"] == "server"  # the default where the repository has the ensembles
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == len(bad)
    for path, expected in zip(bad, ["empty file", "truncated or corrupt", "not an image", "is a directory", "decompression bomb"]):
        (line,) = [line for line in skipped if line.startswith(f"skipped: {path}: ")]  # the server's refusals come last
        assert expected in line, line
    assert f"{len(bad)} of {len(good) + len(bad) + 1} inputs could not be read" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path", ["client", "uint8", "server"])
def test_thin_and_tall_images_are_one_line_on_every_preprocessing_path(small_server, tmp_path, path):
    """Resized to 256 on their shorter side, 1x12000 and 20x20000 would become 786 and 66 Mpx: the client refuses
    them before decoding where it preprocesses, the server's preprocess model where it does, in the same line."""
    thin, tall = tmp_path / "thin.png", tmp_path / "tall.png"
    Image.new("RGB", (1, 12000)).save(thin)
    Image.new("RGB", (20000, 20)).save(tall)
    result = run_cli("client", "classify", thin, PHOTO, tall, "--preprocess", path, "--url", small_server.grpc_url)
    assert result.exit_code == 1 and "Traceback" not in result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert sorted(skipped) == sorted([f"skipped: {thin}: 1x12000 has an aspect ratio of 1:12000; no classifier needs more "
                                      "than 1:50 (crop it to what should be classified)",
                                      f"skipped: {tall}: 20000x20 has an aspect ratio of 1:1000; no classifier needs "
                                      "more than 1:50 (crop it to what should be classified)"])
    assert f"{PHOTO}  (onnx_" in result.stdout  # the photo between them is classified


def test_requests_respect_max_batch_size(small_server, tmp_path):
    from tritonize.client.classify import classify
    from tritonize.client.connection import Connection

    paths = [PHOTO] * 40
    with Connection(small_server.grpc_url) as server:
        before = server.statistics("onnx_model")
        report = classify(server, "onnx_model", paths, top_k=1, preprocess="client")
        deadline = time.monotonic() + 10  # the backend reports a batch's statistics after its responses left
        while (after := server.statistics("onnx_model"))["success"][0] - before["success"][0] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(report.predictions) == 40
    requests = after["success"][0] - before["success"][0]
    inferences = after["executions"][1] - before["executions"][1]
    assert requests == 1 + 2  # the label request, then 32 + 8 images (max_batch_size 32)
    assert inferences == 1 + 40
    assert len({json.dumps(p["top_k"]) for p in report.predictions}) == 1  # same image, same answer in any batch


def test_compare_agreeing_backends(small_server, sample_images):
    result = run_cli("client", "compare", *sample_images, "--repeat", "2", "--min-top1-agreement", "1.0",
                     "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and len(report["images"]) == len(sample_images)
    (pair,) = report["pairs"]
    assert {pair["reference"], pair["candidate"]} == {"onnx_classifier", "torch_classifier"}  # server preprocessing
    assert pair["top1_agreement"] == 1.0 and pair["top5_overlap"] == 1.0 and pair["disagreements"] == []
    assert pair["rel_to_scale"] < 1e-4 and pair["max_abs"] >= 0 and pair["mean_kl"] < 1e-6
    for name in ("onnx_classifier", "torch_classifier"):
        model = report["models"][name]
        assert model["status"] == "READY" and model["requests"] == 2  # 8 images in one request, twice
        assert 0 < model["latency"]["p50_ms"] <= model["latency"]["p95_ms"] <= model["latency"]["p99_ms"]


def test_compare_lists_unavailable_models_and_prints_a_table(small_server):
    result = run_cli("client", "compare", PHOTO, "--models", "onnx_model,torch_model,trt_model", "--repeat", "1",
                     "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    assert "trt_model" in result.stdout and "not in the repository" in result.stdout
    assert "100.0%" in result.stdout and "all models give the same top-1" in result.stdout


def test_compare_detects_a_real_disagreement(disagreeing_server, sample_images):
    url = disagreeing_server.grpc_url
    result = run_cli("client", "compare", *sample_images, "--repeat", "1", "--min-top1-agreement", "0.99", "--json", "--url", url)
    assert result.exit_code == 4, result.output  # EXIT_GATE: a threshold the user set was not met (2 is a usage error)
    report = json.loads(result.stdout)
    (pair,) = report["pairs"]
    assert not report["passed"] and pair["top1_agreement"] < 0.99 and not pair["passed"]
    assert pair["rel_to_scale"] > 0.1 and pair["mean_kl"] > 0
    wrong = pair["disagreements"]
    assert len(wrong) == round((1 - pair["top1_agreement"]) * len(sample_images)) > 0
    assert all(d["onnx_model"] != d["torch_model"] for d in wrong)
    assert "below --min-top1-agreement 99.0%" in result.stderr
    table = run_cli("client", "compare", *sample_images, "--repeat", "1", "--url", url)
    assert table.exit_code == 0 and "images where top-1 differs" in table.stdout


def test_perf_writes_perf_analyzer_csv_plot_and_json(small_server, tmp_path):
    out = tmp_path / "perf"
    result = run_cli("client", "perf", "--models", "onnx_model,torch_model", "--concurrency", "1,2", "--requests", "6",
                     "--warmup-requests", "1", "--output-dir", out, "--url", small_server.grpc_url, "--preprocess", "client",
                     "--load-generator", "builtin")
    assert result.exit_code == 0, result.output
    for model in ("onnx_model", "torch_model"):
        lines = (out / f"{model}.client.csv").read_text().splitlines()
        assert lines[0] == PERF_ANALYZER_HEADER
        rows = list(csv.DictReader(lines))
        assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2]
        for r in rows:
            assert float(r["Inferences/Second"]) > 0
            assert int(r["Server Compute Infer"]) > 0 and int(r["p50 latency"]) <= int(r["p99 latency"])
            assert int(r["Server Compute Infer"]) < int(r["Avg latency"])  # the server's part fits inside the client's
    with Image.open(out / "latency_vs_throughput.png") as image:
        assert image.format == "PNG"
    report = json.loads((out / "perf.json").read_text())
    assert len(report["levels"]) == 4 and all(level["requests"] == 6 for level in report["levels"])
    assert report["engine"] == "builtin" and "measured by builtin" in result.stdout
    assert "onnx_model" in result.stdout and "p99 ms" in result.stdout


def test_perf_with_system_shared_memory_reports_what_it_saves(small_server, tmp_path):
    result = run_cli("client", "perf", "--models", "onnx_model", "--concurrency", "2", "--requests", "8", "--batch", "2",
                     "--shared-memory", "system", "--json", "--output-dir", tmp_path, "--url", small_server.grpc_url,
                     "--preprocess", "client", "--load-generator", "builtin")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (level,) = report["levels"]
    assert level["transport"] == "system shared memory" and level["tensor_bytes_on_wire"] == 0 and level["requests"] == 8
    savings = report["shared_memory_savings"]["onnx_model"]
    assert savings["bytes_saved_per_request"] == 2 * 3 * 224 * 224 * 4 + 2 * 1000 * 4
    assert savings["grpc"]["avg_ms"] > 0 and savings["system_shared_memory"]["avg_ms"] > 0
    from tritonize.client.connection import Connection

    with Connection(small_server.grpc_url) as server:  # every region was unregistered afterwards
        assert server.client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [["classify", PHOTO], ["compare", PHOTO], ["perf"]])
def test_unreachable_server_is_one_line_with_the_url_and_hint(command):
    url = f"127.0.0.1:{free_port()}"
    result = run_cli("client", *command, "--url", url, "--timeout", "2")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "tritonize serve" in lines[0] and lines[0].startswith("error:")


@pytest.mark.parametrize("url, says", [("", "it is empty"), ("127.0.0.1:99999", "port 99999 is out of range"),
                                       ("127.0.0.1", "no port"), ("localhost:80a", "port '80a' is not a number"),
                                       (":8001", "no host"), ("http://localhost:8001", "gRPC takes no scheme")])
def test_a_malformed_url_is_one_line_that_names_what_was_given(url, says):
    """Run as users run it (gRPC logs from C before Python sees an error; it reads its verbosity once per process)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "tritonize.cli", "client", "classify", str(PHOTO), "--url", url,
                             "--timeout", "2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""  # a usage error (options.EXIT_USAGE)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --url {url!r}: {says}") and "HOST:PORT" in line, line


def test_unknown_model_lists_the_available_ones(small_server):
    for command in (["classify", PHOTO, "--model", "resnet_model"], ["perf", "--models", "resnet_model"],
                    ["compare", PHOTO, "--models", "onnx_model,resnet_model"]):
        result = run_cli("client", *command, "--url", small_server.grpc_url)
        assert result.exit_code == 1, result.output
        line = result.output.strip().splitlines()[-1]
        assert "resnet_model" in line and "onnx_model (READY)" in line and "torch_model (READY)" in line


def test_bad_perf_options_are_one_line(small_server):
    result = run_cli("client", "perf", "--models", "onnx_model", "--batch", "64", "--url", small_server.grpc_url)
    assert result.exit_code == 1 and "max_batch_size 32" in result.output
    result = run_cli("client", "perf", "--concurrency", "1,two", "--url", small_server.grpc_url)
    assert result.exit_code == 2 and "--concurrency" in result.output  # a usage error


@pytest.mark.parametrize("engine", ["builtin", "perf_analyzer"])
def test_server_dying_mid_run_keeps_the_partial_results(small_repo, tmp_path, engine):
    from tritonize.tools.perf_analyzer import find

    if engine == "perf_analyzer" and find() is None:
        pytest.skip("perf_analyzer not found: `tritonize tools get-perf-analyzer` (make test runs it) gets it")
    import shutil

    from tritonize.client.connection import Connection
    from tritonize.client.perf import PerfInterrupted, PerfOptions, run_perf, write_outputs
    from tritonize.serve.embedded import embedded_server

    repo = tmp_path / "models"
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")  # its own server, onnx only (fast start)
    with contextlib.ExitStack() as stack:
        info = stack.enter_context(embedded_server(repo))  # stack.close() stops the server
        server = Connection(info.grpc_url, timeout=10)
        options = PerfOptions(concurrency=(1, 2, 4), requests=5, duration=None, warmup=1, engine=engine)
        with pytest.raises(PerfInterrupted) as caught:
            run_perf(server, ["onnx_model"], options, on_level=lambda level: stack.close() if level.concurrency == 1 else None)
    error = caught.value
    assert f"lost the Triton server at {info.grpc_url} during onnx_model at concurrency 2" in str(error)
    assert [level.concurrency for level in error.report.levels] == [1, 2] and error.report.error
    gone = error.report.levels[1]  # its warm-up found no server: nothing measured, one failure, then the sweep ended
    assert (gone.requests, gone.failures) == (0, 1) and gone.error
    written = write_outputs(error.report, tmp_path / "partial")
    rows = list(csv.DictReader((tmp_path / "partial" / "onnx_model.client.csv").read_text().splitlines()))
    assert [r["Concurrency"] for r in rows] == ["1"] and len(written) == 3
    with pytest.raises(TritonizeError, match="tritonize serve"):
        Connection(info.grpc_url, timeout=2)


def _kill_stub_in_the_window(connection, server_pid: int, model: str, after_successes: int, delay: float) -> threading.Thread:
    """A thread that kills -9 the model's stub (as the OOM killer would) once the server counted `after_successes` more
    successful requests of it (the level's window has begun), and then `delay` seconds (a window of it is over)."""
    import os
    import signal

    from tests.serve.helpers import children

    start = connection.statistics(model)["success"][0]
    [stub] = [pid for pid, command in children(server_pid).items() if f" {model}_0_0 " in command]

    def kill() -> None:
        deadline = time.monotonic() + 60
        while connection.statistics(model)["success"][0] < start + after_successes and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        os.kill(stub, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("engine", ["builtin", "perf_analyzer"])
def test_a_stub_killed_mid_level_is_reported_with_its_successes_and_the_sweep_goes_on(small_repo, tmp_path, engine):
    """kill -9 of the model's stub during the level at concurrency 2: that level keeps the requests that succeeded, its
    failure count and the first error; the sweep goes on to concurrency 4 (the server heals the stub meanwhile);
    with --stop-on-error it ends there."""
    import shutil

    from tritonize.client.connection import Connection
    from tritonize.client.perf import PerfInterrupted, PerfOptions, run_perf, write_outputs
    from tritonize.serve.embedded import embedded_server
    from tritonize.tools.perf_analyzer import find

    if engine == "perf_analyzer" and find() is None:
        pytest.skip("perf_analyzer not found: `tritonize tools get-perf-analyzer` (make test runs it) gets it")
    repo = tmp_path / "models"
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")
    window = 2.0  # perf_analyzer measures a 6 s level in three 2 s windows; the kill comes after the first
    with embedded_server(repo) as info, Connection(info.grpc_url, timeout=30) as connection:
        killers = []

        def at(level) -> None:
            if level.concurrency == 1:  # the next level's warm-up is 2 x 2 requests at most
                killers.append(_kill_stub_in_the_window(connection, info.pid, "onnx_model", 8, window + 0.5))

        options = PerfOptions(concurrency=(1, 2, 4), duration=3 * window, warmup=2, engine=engine, stop_on_error=False)
        report = run_perf(connection, ["onnx_model"], options, on_level=at)
        killers[0].join()
        assert [level.concurrency for level in report.levels] == [1, 2, 4]  # the sweep went on
        first, killed = report.levels[:2]
        assert first.failures == 0 and first.error is None and first.requests > 0
        assert killed.failures >= 1 and killed.requests >= 2 and killed.throughput > 0, killed
        assert "onnx_model_0_0" in killed.error and "not healthy" in killed.error, killed.error
        text = report.to_text()
        assert f"onnx_model at concurrency 2: {killed.failures} request(s) failed, {killed.requests} succeeded; " \
               f"first error: {killed.error}" in text
        write_outputs(report, tmp_path / "perf")
        rows = list(csv.DictReader((tmp_path / "perf" / "onnx_model.client.csv").read_text().splitlines()))
        assert "2" not in [r["Concurrency"] for r in rows]  # perf_analyzer's CSV has no column for failures
        levels = json.loads((tmp_path / "perf" / "perf.json").read_text())["levels"]
        saved = levels[1]
        assert (saved["failures"], saved["requests"], saved["error"]) == (killed.failures, killed.requests, killed.error)
        for level in levels:  # the killed model was reloaded: its statistics started again, its times never negative
            assert level["server_us"] is None or min(level["server_us"].values()) >= 0, level

        if engine == "builtin":  # once healed, the same with --stop-on-error: the sweep ends at the failed level
            deadline = time.monotonic() + 60
            while not connection.client.is_model_ready("onnx_model") and time.monotonic() < deadline:
                time.sleep(0.2)
            with pytest.raises(PerfInterrupted, match="request\\(s\\) failed during onnx_model at concurrency 2 .*"
                                                      "stopped there \\(--stop-on-error\\)") as caught:
                run_perf(connection, ["onnx_model"], replace(options, stop_on_error=True), on_level=at)
            killers[1].join()
            assert [level.concurrency for level in caught.value.report.levels] == [1, 2]
            assert caught.value.report.levels[1].failures >= 1


def test_server_dying_between_batches_keeps_the_logits_received(small_repo, tmp_path):
    import shutil

    from tritonize.client.connection import Connection, PartialResult
    from tritonize.images import load_images
    from tritonize.serve.embedded import embedded_server

    repo = tmp_path / "models"
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")
    with contextlib.ExitStack() as stack:
        info = stack.enter_context(embedded_server(repo))  # stack.close() stops the server
        server = Connection(info.grpc_url, timeout=10)
        model = server.model("onnx_model")
        arrays = load_images([PHOTO], model.preprocess).arrays * 40  # two requests: 32 + 8
        with pytest.raises(PartialResult, match=f"lost the Triton server at {info.grpc_url}") as caught:
            server.infer_all(model, arrays, on_batch=lambda logits, seconds: stack.close())
    assert caught.value.logits.shape == (32, 1000) and np.isfinite(caught.value.logits).all()


# ------------------------------------------------------------------ preprocessing paths (--preprocess)

def test_classify_sends_the_encoded_file_and_gives_the_client_paths_top5(small_server):
    url = ["--url", small_server.grpc_url, "--json"]
    server = json.loads(run_cli("client", "classify", PHOTO, "--model", "onnx_model", *url).stdout)
    assert (server["model"], server["preprocess"]) == ("onnx_classifier", "server")  # the default with ensembles
    for path, model in (("client", "onnx_model"), ("uint8", "onnx_classifier_uint8")):
        other = json.loads(run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--preprocess", path, *url).stdout)
        assert (other["model"], other["preprocess"]) == (model, path)
        assert other["predictions"] == server["predictions"]  # same labels, same probabilities


def test_compare_one_backend_across_preprocessing_paths(small_server, sample_images):
    result = run_cli("client", "compare", *sample_images, "--models", "onnx_model", "--preprocess-paths", "client,server,uint8",
                     "--repeat", "1", "--min-top1-agreement", "1.0", "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {name: m["preprocessing_path"] for name, m in report["models"].items()} == {
        "onnx_model": "client", "onnx_classifier": "server", "onnx_classifier_uint8": "uint8"}
    assert len(report["pairs"]) == 3 and len(report["images"]) == len(sample_images)
    for pair in report["pairs"]:
        assert pair["top1_agreement"] == 1.0 and pair["passed"]
        assert pair["rel_to_scale"] <= 1e-4  # the FP32 tolerance the exports are verified with (verify.FP32)


def test_compare_drops_what_the_server_refuses_from_every_path(small_server, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    result = run_cli("client", "compare", PHOTO, broken, PHOTO, "--models", "onnx_model", "--preprocess-paths", "client,server",
                     "--repeat", "1", "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["images"] == [str(PHOTO), str(PHOTO)] and report["pairs"][0]["max_abs"] == 0
    (line,) = report["failures"]  # decoded and refused twice, by this client and by the server: said once
    assert line.startswith(f"{broken}: ")


def test_compare_counts_a_file_refused_along_two_paths_once(small_server, tmp_path):
    """A bomb refused by this client (its hint: --max-pixels) and by the server (its own hint): two different lines
    for one file, which the summary counted as two bad inputs of two."""
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)  # 144 Mpx in 17 kB
    result = run_cli("client", "compare", PHOTO, bomb, "--models", "onnx_model", "--preprocess-paths", "client,server",
                     "--repeat", "1", "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["images"] == [str(PHOTO)]
    (line,) = report["failures"]
    assert line.startswith(f"{bomb}: 12000x12000 = 144,000,000 pixels is above the limit of 89,478,485"), line
    assert "error: 1 of 2 inputs could not be read" in result.output


def test_preprocessing_path_mistakes_are_one_line(small_server, disagreeing_server):
    cases = [
        (small_server, ["--model", "onnx_classifier", "--preprocess", "client"], "name its classifier instead (--model onnx_model)"),
        (small_server, ["--model", "preprocess"], "preprocessing model, not a classifier"),
        (small_server, ["--preprocess", "gpu"], "--preprocess must be one of client, server, uint8"),
        (disagreeing_server, ["--model", "onnx_model", "--preprocess", "server"],
         "no READY ensemble at {url} runs onnx_model with server preprocessing"),
    ]
    for server, args, message in cases:
        result = run_cli("client", "classify", PHOTO, *args, "--url", server.grpc_url)
        assert result.exit_code == 1, result.output
        assert message.format(url=server.grpc_url) in result.output and "Traceback" not in result.output
    # Without ensembles the default is the client path.
    result = run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--json", "--url", disagreeing_server.grpc_url)
    assert json.loads(result.stdout)["preprocess"] == "client"


def test_perf_along_server_and_uint8_paths_counts_their_bytes(small_server, tmp_path):
    sizes = {}
    for path, extra in (("server", ["--shared-memory", "system"]), ("uint8", [])):
        result = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", path, "--concurrency", "2", "--requests", "6",
                         "--warmup-requests", "1", "--batch", "2", "--json", "--output-dir", tmp_path / path, "--url", small_server.grpc_url,
                         "--load-generator", "builtin", *extra)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        (level,) = report["levels"]
        assert level["requests"] == 6 and level["throughput"] > 0
        sizes[level["served"]] = report["shared_memory_savings"].get(level["model"], {}).get("bytes_saved_per_request",
                                                                                             level["tensor_bytes_on_wire"])
    # Two images per request: the file with its 4-byte length each, or 224x224x3 UINT8 each, then 2 x 1000 logits.
    assert sizes == {"onnx_classifier": 2 * (PHOTO.stat().st_size + 4) + 8000, "onnx_classifier_uint8": 2 * 150_528 + 8000}


def test_trt_model_waiting_for_a_gpu_says_why_and_what_to_run(artifacts_copy, tmp_path):
    """On a machine without TensorRT the plan waits for a GPU box: `repo build` leaves a note, the
    embedded server lists trt_model UNAVAILABLE with it, and the client repeats it."""
    from tests.conftest import plan_entry, record
    from tritonize.serve.embedded import embedded_server

    record(artifacts_copy, "tensorrt", plan_entry("waiting_for_gpu"))
    repo = tmp_path / "models"
    built = run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--models", "onnx_model,trt_model",
                    "--no-ensembles", "--no-warmup")
    assert built.exit_code == 0, built.output
    with embedded_server(repo) as info:
        state, reason = info.models["trt_model"]
        assert state == "UNAVAILABLE" and "trt_model was not built: its TensorRT plan is waiting for a GPU" in reason
        result = run_cli("client", "classify", PHOTO, "--model", "trt_model", "--url", info.grpc_url)
        assert result.exit_code == 1
        [line] = result.output.strip().splitlines()
        assert line.startswith("error: model 'trt_model' is UNAVAILABLE: ") and "waiting for a GPU" in line
        assert "On a GPU box run `tritonize convert trt`" in line and "then `tritonize repo build` again" in line
        assert "onnx_model (READY)" in line
        assert run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--url", info.grpc_url).exit_code == 0


@pytest.mark.parametrize("model", ["trt_model", "trt_classifier"])
def test_trt_model_of_a_repository_built_without_a_plan_says_where_plans_are_built(small_server, model):
    result = run_cli("client", "classify", PHOTO, "--model", model, "--url", small_server.grpc_url)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: model {model!r} is not in the repository at {small_server.grpc_url}: "), line
    assert "TensorRT plan is built on a GPU box: run `tritonize convert trt` there, then `tritonize repo build`" in line
    assert "onnx_model (READY)" in line


def test_classify_warns_when_the_served_model_was_built_from_random_weights(small_server):
    """The small repository is built with --weights none: its labels mean nothing, and classify says so."""
    from tritonize.client.classify import ClassifyReport

    result = run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--json", "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["weights"] == "none"
    assert "warning: onnx_classifier was built with --weights none (random init)" in result.stderr
    assert ClassifyReport("m", "u", weights="IMAGENET1K_V1").warning is None
    assert ClassifyReport("m", "u", weights="/ckpt/model.pth").warning is None
