"""`tritonize monitor`: the bundle's files, checked by the real promtool, and its bad inputs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tritonize.monitor import promql
from tritonize.monitor.bundle import COMPOSE, DASHBOARD, FILES, PROMETHEUS_CONFIG, RULES


def _promtool(promtool: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_config_and_rules(bundle, promtool):
    config = _promtool(promtool, "check", "config", bundle / PROMETHEUS_CONFIG)  # also checks the rule file
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout
    rules = _promtool(promtool, "check", "rules", "--lint-fatal", bundle / RULES)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"{len(promql.RECORDING_RULES) + 3} rules found" in rules.stdout


def _series(metric: str, values: str, **extra: str) -> dict:
    labels = {"job": "triton", "instance": "t:8002", "namespace": "prod", "pod": "triton-0", "model": "m",
              "version": "1", **extra}
    return {"series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def _labels(**extra: str) -> str:
    base = {"job": "triton", "instance": "t:8002", "namespace": "prod", "pod": "triton-0", "model": "m", "version": "1"}
    return "{" + ",".join(f'{k}="{v}"' for k, v in {**base, **extra}.items()) + "}"


def test_rules_and_alerts_on_synthetic_series(tmp_path, small_repo, promtool):
    """promtool's rule unit tests: each recording rule's value and labels (namespace/pod kept for a
    Kubernetes HPA), idle behaviour, and when each alert fires."""
    from tritonize.monitor.bundle import BundleOptions, write_bundle

    bundle = tmp_path / "monitoring"
    write_bundle(small_repo, bundle, BundleOptions(queue_alert_ms=1))
    # 15 s steps: 10 requests/s for 10 min, then idle; 1 failure/s; 2 ms queue and 10 ms compute per
    # request; 4 images per request, one execution per request; the target down from minute 12.
    busy, idle = 40, 20
    tests = {"rule_files": [str(bundle / RULES)], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [
            _series(promql.SUCCESS, f"0+150x{busy} 6000x{idle}"),
            _series(promql.FAILURE, f"0+15x{busy} 600x{idle}", reason="BACKEND"),
            _series(promql.FAILURE, f"0x{busy + idle}", reason="REJECTED"),
            _series(promql.QUEUE_US, f"0+300000x{busy} 12000000x{idle}"),
            _series(promql.COMPUTE_INFER_US, f"0+1500000x{busy} 60000000x{idle}"),
            _series(promql.INFERENCES, f"0+600x{busy} 24000x{idle}"),
            _series(promql.EXECUTIONS, f"0+150x{busy} 6000x{idle}"),
            {"series": 'up{job="triton",instance="t:8002"}', "values": f"1x{busy + 7} 0x{idle - 7}"},
        ],
        "promql_expr_test": [
            *({"expr": record, "eval_time": "5m", "exp_samples": [{"labels": record + _labels(), "value": value}]}
              for record, value in ((promql.REQUEST_RATE, 11), (promql.FAILURE_RATE, 1), (promql.INFERENCE_RATE, 40),
                                    (promql.QUEUE_AVG, 2000), (promql.COMPUTE_INFER_AVG, 10000),
                                    (promql.QUEUE_COMPUTE_RATIO, 0.2), (promql.BATCH_SIZE, 4))),
            # idle: the ratio an autoscaler reads is 0, the averages have no series (not NaN)
            {"expr": promql.QUEUE_COMPUTE_RATIO, "eval_time": "14m",
             "exp_samples": [{"labels": promql.QUEUE_COMPUTE_RATIO + _labels(), "value": 0}]},
            {"expr": promql.QUEUE_AVG, "eval_time": "14m", "exp_samples": []},
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "TritonModelFailingRequests", "exp_alerts": [{
                "exp_labels": {"severity": "warning", **dict(re.findall(r'(\w+)="([^"]*)"', _labels()))},
                "exp_annotations": {"summary": "m v1 on t:8002 fails 1 requests/s"}}]},
            {"eval_time": "4m", "alertname": "TritonQueueTimeHigh", "exp_alerts": []},  # not yet 5 minutes
            {"eval_time": "8m", "alertname": "TritonQueueTimeHigh", "exp_alerts": [{
                "exp_labels": {"severity": "warning", **dict(re.findall(r'(\w+)="([^"]*)"', _labels()))},
                "exp_annotations": {"summary": "m requests on t:8002 wait 2kus in the queue on average"}}]},
            {"eval_time": "10m", "alertname": "TritonServerDown", "exp_alerts": []},
            {"eval_time": "14m", "alertname": "TritonServerDown", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "job": "triton", "instance": "t:8002"},
                "exp_annotations": {"summary": "Triton metrics endpoint t:8002 does not answer"}}]},
        ],
    }]}
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool(promtool, "test", "rules", tmp_path / "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_has_a_datasource_variable_and_every_panel_uses_it(bundle):
    dashboard = json.loads((bundle / DASHBOARD).read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"instance", "model"} <= set(variables)
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in ("Throughput", "queue / compute input / infer / output", "Batch size", "Failed",
                   "Pending", "CPU", "memory"):
        assert any(wanted in t for t in titles), wanted
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_compose_runs_the_repositorys_triton_prometheus_and_grafana(bundle, small_repo):
    from tritonize.serve.docker import choose_release, container_command

    compose = yaml.safe_load((bundle / COMPOSE).read_text())
    services = compose["services"]
    assert set(services) == {"triton", "prometheus", "grafana"}
    triton = services["triton"]
    release = choose_release(None, small_repo).release
    assert triton["image"] == f"nvcr.io/nvidia/tritonserver:{release}-py3"
    assert "--model-control-mode=explicit" in triton["command"]
    # Every interface (host network): restricted to the key in the environment of `docker compose up`, which
    # compose passes on; `$$` keeps compose from expanding what the container's shell expands.
    assert triton["environment"] == ["TRITONIZE_CONTROL_KEY"]
    assert [a.replace("$$", "$") for a in triton["command"]] == container_command(small_repo, release, restricted=True)
    assert any("$$TRITONIZE_CONTROL_KEY" in a for a in triton["command"])
    assert all("$" not in a.replace("$$", "") for a in triton["command"])
    assert triton["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    for service in services.values():  # every mounted file exists, relative to compose.yaml
        for volume in service.get("volumes", []):
            source = (bundle / volume.split(":")[0]).resolve()
            assert source.exists(), volume
    assert (bundle / services["triton"]["volumes"][0].split(":")[0]).resolve() == small_repo.resolve()
    provisioned = {v.split(":")[1] for v in services["grafana"]["volumes"]}
    assert "/var/lib/grafana/dashboards/triton.json" in provisioned
    dashboards = yaml.safe_load((bundle / "grafana/dashboards.yaml").read_text())
    assert dashboards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_targets_and_threshold_reach_the_files(small_repo, tmp_path):
    out = tmp_path / "mon"
    result = run_cli("monitor", small_repo, "--output-dir", out, "--targets", "gpu1:8002,gpu2:8002",
                     "--queue-alert-ms", "20")
    assert result.exit_code == 0, result.output
    config = yaml.safe_load((out / PROMETHEUS_CONFIG).read_text())
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["gpu1:8002", "gpu2:8002"]
    alerts = {r["alert"]: r for r in yaml.safe_load((out / RULES).read_text())["groups"][1]["rules"]}
    assert alerts["TritonQueueTimeHigh"]["expr"].endswith("> 20000")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(FILES)
    again = run_cli("monitor", small_repo, "--output-dir", out)  # a bundle is replaced as a whole
    assert again.exit_code == 0, again.output
    assert "gpu1" not in (out / PROMETHEUS_CONFIG).read_text()


@pytest.mark.parametrize("args, message", [
    (["--targets", "localhost"], "--targets takes HOST:PORT"),
    (["--targets", "http://h:8002/metrics"], "--targets takes HOST:PORT"),
    (["--queue-alert-ms", "0"], "--queue-alert-ms must be positive"),
])
def test_bad_options(small_repo, tmp_path, args, message):
    result = run_cli("monitor", small_repo, "--output-dir", tmp_path / "mon", *args)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "mon").exists()


def test_refuses_to_replace_a_directory_that_is_not_a_bundle(small_repo, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = run_cli("monitor", small_repo, "--output-dir", tmp_path)
    assert result.exit_code == 1
    assert "holds files that are not a monitoring bundle (notes.txt)" in result.output
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_missing_repository(tmp_path):
    result = run_cli("monitor", tmp_path / "models", "--output-dir", tmp_path / "mon")
    assert result.exit_code == 1
    assert "does not exist" in result.output


def test_serve_without_prometheus_says_how_to_get_it(small_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(__file__).parent))  # a PATH without prometheus
    result = run_cli("monitor", small_repo, "--output-dir", tmp_path / "mon", "--serve")
    assert result.exit_code == 1
    assert "prometheus and promtool not found on PATH; Debian/Ubuntu: `apt-get install prometheus`" in result.output


def test_serve_on_a_port_in_use_is_one_line(small_repo, tmp_path, promtool):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_cli("monitor", small_repo, "--output-dir", tmp_path / "mon", "--serve", "--prometheus-port", port)
    assert result.exit_code == 1
    assert f"error: port {port} on 127.0.0.1 is not available (Address already in use)" in result.output
