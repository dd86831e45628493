"""aoti_model on the real embedded Triton: its CPU package (compiled once per run: `aoti_artifacts`) served under the
repository's own config by the Python-based torch_aoti backend, beside the TorchScript and ONNX exports of the same
model, agreeing with them through the client; and the max_batch_size-0 config of a 26.05 target."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace

import pytest
from google.protobuf import json_format

from tests.client.conftest import PHOTO
from tests.conftest import record, run_cli
from tritonize.manifest import Manifest, Target
from tritonize.model_repository import AOTI_MODEL, parse_config
from tritonize.releases import release_info
from tritonize.repository_builder import RepoOptions, build_repository

CLASSIFIERS = "onnx_model,torch_model,aoti_model"


@pytest.fixture(scope="module")
def served(aoti_artifacts, tmp_path_factory):
    from tritonize.serve.embedded import embedded_server

    repo = tmp_path_factory.mktemp("aoti_repo") / "models"
    build_repository(aoti_artifacts, repo, RepoOptions(models=tuple(CLASSIFIERS.split(","))))
    with embedded_server(repo) as info:
        yield repo, info


def test_the_package_serves_under_the_repository_s_config_and_agrees_with_the_exports(served):
    repo, info = served
    assert {name: info.models[name][0] for name in ("aoti_model", "aoti_classifier", "aoti_classifier_uint8")} == {
        "aoti_model": "READY", "aoti_classifier": "READY", "aoti_classifier_uint8": "READY"}, info.models
    compare = run_cli("client", "compare", PHOTO, PHOTO, "--models", CLASSIFIERS, "--repeat", "1",
                      "--min-top1-agreement", "1", "--url", info.grpc_url, "--json")
    assert compare.exit_code == 0, compare.output
    report = json.loads(compare.stdout)
    pairs = {tuple(sorted((p["reference"], p["candidate"]))): p for p in report["pairs"]}
    assert len(pairs) == 3 and all(p["top1_agreement"] == 1.0 and p["top5_overlap"] == 1.0 for p in pairs.values())
    assert all(p["rel_to_scale"] <= 1e-4 for p in pairs.values()), pairs  # export's FP32 tolerance
    # the repository is served as written: only the view tritonserver reads names the backend it runs here
    assert parse_config(repo / "aoti_model" / "config.pbtxt").backend == "pytorch"


def test_classify_perf_trial_configs_and_metrics_include_it(served):
    repo, info = served
    classify = run_cli("client", "classify", PHOTO, "--model", "aoti_classifier", "--url", info.grpc_url, "--json")
    onnx = run_cli("client", "classify", PHOTO, "--model", "onnx_classifier", "--url", info.grpc_url, "--json")
    assert classify.exit_code == 0, classify.output
    top = lambda result: [t["index"] for t in json.loads(result.stdout)["predictions"][0]["top_k"]]  # noqa: E731
    assert top(classify) == top(onnx)

    perf = run_cli("client", "perf", "--models", "aoti_model", "--concurrency", "1,2", "--batch", "2", "--requests", "8",
                   "--preprocess", "client",
                   "--load-generator", "builtin", "--output-dir", repo.parent / "perf", "--url", info.grpc_url, "--json")
    assert perf.exit_code == 0, perf.output
    levels = json.loads(perf.stdout)["levels"]
    assert [(lv["served"], lv["concurrency"], lv["failures"]) for lv in levels] == [("aoti_model", 1, 0), ("aoti_model", 2, 0)]

    # what tune does: a trial config loaded over the repository API, as the embedded engine serves the model
    from tritonize.client.connection import Connection
    from tritonize.control.models import ModelControl
    from tritonize.serve.embedded import for_bundled_core

    trial = parse_config(repo / "aoti_model" / "config.pbtxt")
    trial.instance_group[0].count = 2
    with Connection(info.grpc_url, timeout=300) as connection:
        state = ModelControl(connection).load_config(
            "aoti_model", json_format.MessageToJson(for_bundled_core(trial), preserving_proto_field_name=True))
        assert state.state == "READY"
        served_config = connection.client.get_model_config("aoti_model", as_json=True)["config"]
        assert served_config["instance_group"][0]["count"] == 2 and served_config["platform"] == AOTI_MODEL.platform

    from tritonize.monitor import promql

    with urllib.request.urlopen(info.metrics_url, timeout=10) as response:  # what the dashboard's panels read
        metrics = response.read().decode()
    per_model = (promql.SUCCESS, promql.INFERENCES, promql.EXECUTIONS, promql.REQUEST_US, promql.QUEUE_US,
                 promql.COMPUTE_INPUT_US, promql.COMPUTE_INFER_US, promql.COMPUTE_OUTPUT_US, promql.PENDING)
    assert [m for m in per_model if f'{m}{{model="aoti_model"' not in metrics] == []


def test_a_26_05_target_is_served_one_image_per_request(aoti_copy):
    from tritonize.serve.embedded import embedded_server

    entry = Manifest.load(aoti_copy).aoti
    record(aoti_copy, AOTI_MODEL.artifact, replace(entry, target=Target("26.05", release_info("26.05").image)))
    repo = aoti_copy / "models"
    build_repository(aoti_copy, repo, RepoOptions(models=("onnx_model", "aoti_model")))
    assert parse_config(repo / "aoti_model" / "config.pbtxt").max_batch_size == 0
    with embedded_server(repo) as info:
        assert info.models["aoti_model"][0] == "READY" and info.models["aoti_classifier"][0] == "READY", info.models
        compare = run_cli("client", "compare", PHOTO, PHOTO, "--models", "onnx_model,aoti_model", "--repeat", "1",
                          "--min-top1-agreement", "1", "--preprocess-paths", "client,server", "--url", info.grpc_url)
        assert compare.exit_code == 0, compare.output
