"""`client perf` along the server's preprocessing path, against the real embedded server: what it reports of the server
is what its steps did (`preprocess`, then the classifier), not the ensemble's own statistics, where every request is
one execution of batch 1 and the steps' queues do not show."""

from __future__ import annotations

import json

import pytest

from tests.client.test_perf_engines import NEEDS_PERF_ANALYZER
from tests.conftest import run_cli

STEPS = ("preprocess", "onnx_model")


def _counts(connection, model: str) -> tuple[int, int, int]:
    """(requests, inferences, executions) the server counted for `model` so far."""
    stats = connection.statistics(model)
    return stats["success"][0], stats["executions"][1], stats["executions"][0]


def test_builtin_perf_on_the_ensemble_reports_the_batch_and_times_of_each_step(small_server, tmp_path):
    from tritonize.client.connection import Connection

    with Connection(small_server.grpc_url) as connection:
        before = {step: _counts(connection, step) for step in STEPS}
        result = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", "server", "--concurrency", "6",
                         "--requests", "24", "--warmup-requests", "0", "--load-generator", "builtin", "--json",
                         "--output-dir", tmp_path, "--url", small_server.grpc_url)
        after = {step: _counts(connection, step) for step in STEPS}
    assert result.exit_code == 0, result.output
    (level,) = json.loads(result.stdout)["levels"]
    assert (level["model"], level["served"]) == ("onnx_model", "onnx_classifier")
    assert list(level["steps"]) == list(STEPS)
    for step in STEPS:  # no warm-up: the level is all the server did between the two reads here
        requests, inferences, executions = (a - b for a, b in zip(after[step], before[step]))
        assert requests >= 24 and level["steps"][step]["server_batches"] == pytest.approx(inferences / executions, rel=0.1)
        assert level["steps"][step]["server_us"]["compute_infer"] > 0
    assert level["server_batches"] == level["steps"]["onnx_model"]["server_batches"]
    for part, us in level["server_us"].items():
        assert us == pytest.approx(sum(level["steps"][step]["server_us"][part] for step in STEPS))
    assert level["server_us"]["queue"] > 0  # the steps queue; the ensemble itself never does


@NEEDS_PERF_ANALYZER
def test_perf_analyzer_on_the_ensemble_reports_the_batch_and_times_of_each_step(small_server, tmp_path):
    result = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", "server", "--concurrency", "4",
                     "--requests", "12", "--warmup-requests", "1", "--load-generator", "perf_analyzer", "--json",
                     "--output-dir", tmp_path, "--url", small_server.grpc_url)
    assert result.exit_code == 0, result.output
    (level,) = json.loads(result.stdout)["levels"]
    assert set(level["steps"]) == set(STEPS)
    assert level["server_batches"] == level["steps"]["onnx_model"]["server_batches"] >= 1
    for part, us in level["server_us"].items():
        assert us == pytest.approx(sum(level["steps"][step]["server_us"][part] for step in STEPS))
    text = run_cli("client", "perf", "--models", "onnx_model", "--preprocess", "server", "--concurrency", "2",
                   "--requests", "4", "--warmup-requests", "1", "--load-generator", "perf_analyzer",
                   "--output-dir", tmp_path / "text", "--url", small_server.grpc_url).stdout
    assert "onnx_model at concurrency 2 through onnx_classifier: preprocess batch " in text, text
