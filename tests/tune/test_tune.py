"""`tritonize tune` on the embedded server: a short real search, its report, the winner's config, resuming."""

from __future__ import annotations

import csv
import json
import shutil

from PIL import Image

from tests.conftest import run_cli
from tritonize.model_repository import parse_config


def test_tune_writes_the_winner_beside_the_configs_and_resumes_from_its_trials(small_repo, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")
    untouched = {p: p.read_bytes() for p in (repo / "onnx_model").rglob("*.pbtxt")}
    report = tmp_path / "report"
    search = ["tune", repo, "--model", "onnx_model", "--p99-ms", "5000", "--budget-minutes", "3", "--try-instances", "1",
              "--try-threads", "1", "--try-preferred", "4+8+16+32", "--try-concurrency", "1", "--duration", "0.3",
              "--output-dir", report, "--json"]
    first = run_cli(*search, "--try-queue-delay-us", "100")
    assert first.exit_code == 0, first.output
    result = json.loads(first.stdout)
    assert result["configs_measured"] == 2 and result["measured_now"] >= 2  # the default (2 threads) and 1 thread
    assert result["default"]["description"] == "1 instance(s) x 2 threads, queue delay 100 us, preferred 4,8,16,32"
    assert result["engine"] and result["winner"]["throughput"] > 0 and result["winner"]["concurrency"] == 1
    tuned = repo / "onnx_model" / "configs" / "tuned.pbtxt"
    cfg = parse_config(tuned)
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["tune.p99_budget_ms"] == "5000" and params["tune.client_concurrency"] == "1"
    assert cfg.instance_group[0].count == result["winner"]["config"]["instances"]
    assert params["intra_op_thread_count"] == str(result["winner"]["config"]["threads"])
    assert {p: p.read_bytes() for p in untouched} == untouched  # config.pbtxt and the other variants unchanged
    rows = list(csv.DictReader((report / "onnx_model" / "trials.csv").read_text().splitlines()))
    assert len(rows) == result["measured_now"] and {r["phase"] for r in rows} <= {"search", "check", "confirm"}
    with Image.open(report / "onnx_model" / "search.png") as image:
        assert image.format == "PNG"

    # The same command again replays the search from trials.csv: nothing measured, no server started.
    again = run_cli(*search, "--try-queue-delay-us", "100")
    assert again.exit_code == 0, again.output
    replayed = json.loads(again.stdout)
    assert replayed["measured_now"] == 0 and replayed["winner"] == result["winner"] and replayed["seconds"] < 10
    assert len(list(csv.DictReader((report / "onnx_model" / "trials.csv").open()))) == len(rows)


def test_tune_refuses_what_it_must_not_write_and_budgets_too_small(small_repo, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(small_repo / "onnx_model", repo / "onnx_model")
    base = ["tune", repo, "--p99-ms", "100", "--output-dir", tmp_path / "report"]
    for extra, message in ((["--config-name", "config"], "never config.pbtxt"),
                           (["--config-name", "cpu"], "was not written by tune"),
                           (["--budget-minutes", "0.2"], "leaves no time to search"),
                           (["--model", "nosuch"], "nosuch")):
        result = run_cli(*base, *extra)
        assert result.exit_code == 1 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
