"""`tritonize deploy k8s`, validated offline: core objects against the Kubernetes API schemas
(kubernetes-validate, strict), custom resources against their CRDs' OpenAPI schemas (tests/data/crds,
unknown fields forbidden), the PrometheusRule's PromQL with promtool, smoke.sh with shellcheck; each
validator is shown to reject a planted fault."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import run_cli
from tests.repository_builder.helpers import add_trt_model
from tritonize.deploy.k8s import FILES, DeployOptions, write_k8s_bundle
from tritonize.monitor import promql

# The minor versions upstream Kubernetes supports as of kubernetes-validate 1.37.0 (its newest schemas).
KUBERNETES_VERSIONS = ("1.35", "1.36", "1.37")
CRDS = Path(__file__).resolve().parent.parent / "data" / "crds"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_v1_podmonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_v1_prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): "serving.kserve.io_v1beta1_inferenceservice.trimmed.json",
}
STORAGE, ENDPOINT = "s3://models/prod/resnet", "http://minio.minio.svc:9000"


def _strict(schema):
    """CRD schemas never forbid unknown fields (the API server prunes them): forbid them here, except
    where the schema preserves unknown fields or says what extra properties may be."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {k: _strict(v) for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


@lru_cache(maxsize=None)
def _crd_validator(name: str):
    schema = _strict(json.loads((CRDS / name).read_text()))
    schema["properties"]["metadata"] = {"type": "object", "required": ["name", "namespace"]}  # ObjectMeta's job
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def schema_errors(doc: dict) -> list[str]:
    """Every schema violation of a manifest; a kind with no schema here raises (SchemaNotFoundError)."""
    crd = CRD_SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
    if crd:
        return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in _crd_validator(crd).iter_errors(doc)]
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"Kubernetes {version}: {'.'.join(map(str, e.path))}: {e.message}")
    return errors


def documents(bundle: Path) -> dict[str, list[dict]]:
    return {p.relative_to(bundle).as_posix(): list(yaml.safe_load_all(p.read_text()))
            for p in sorted(bundle.rglob("*.yaml"))}


def _doc(bundle: Path, kind: str, name: str | None = None) -> dict:
    return next(d for docs in documents(bundle).values() for d in docs
                if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


@pytest.fixture(scope="module")
def bundle(small_repo, tmp_path_factory) -> Path:
    """The bundle for small_repo (classifiers, preprocessing models, ensembles) on a MinIO endpoint."""
    out = tmp_path_factory.mktemp("k8s") / "k8s"
    write_k8s_bundle(small_repo, out, DeployOptions(storage=STORAGE, endpoint=ENDPOINT, offline=True, load_seconds=12))
    return out


@pytest.fixture(scope="module")
def trt_repo(small_artifacts, tmp_path_factory) -> Path:
    """onnx_model plus a trt_model whose plan was built with TensorRT 10.5.0.18 for 24.10 (config only:
    no plan can be built here)."""
    from tritonize.repository_builder import RepoOptions, build_repository

    root = tmp_path_factory.mktemp("k8s-trt")
    artifacts = root / "artifacts"
    shutil.copytree(small_artifacts, artifacts)
    repo = root / "models"
    build_repository(artifacts, repo, RepoOptions(models=("onnx_model",), warmup=False, ensembles=False))
    add_trt_model(repo, artifacts, tensorrt_version="10.5.0.18", triton_release="24.10", version_compatible=True)
    return repo


def test_every_object_passes_its_schema(bundle):
    kinds = []
    for name, docs in documents(bundle).items():
        for doc in docs:
            assert schema_errors(doc) == [], f"{name}: {doc['kind']}"
            kinds.append(doc["kind"])
    assert sorted(kinds) == sorted(["Deployment", "Service", "Service", "ConfigMap", "PodMonitor", "PrometheusRule",
                                    "HorizontalPodAutoscaler", "ScaledObject", "ServiceAccount", "InferenceService",
                                    "Secret", "Secret"])
    assert sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()) == sorted(FILES)


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return change


_DELETE = object()
CONTAINER = "spec.template.spec.containers.0"
PLANTED = {  # kind -> (a mistake, what the validator says)
    "typo in a probe field": ("Deployment", _set(f"{CONTAINER}.startupprobe", {}), "'startupprobe' was unexpected"),
    "replicas as text": ("Deployment", _set("spec.replicas", "2"), "'2' is not of type"),
    "Service port as text": ("Service", _set("spec.ports.0.port", "8000"), "'8000' is not of type"),
    "HPA without maxReplicas": ("HorizontalPodAutoscaler", _set("spec.maxReplicas", _DELETE), "'maxReplicas' is a required"),
    "ConfigMap data not text": ("ConfigMap", _set("data.x", 1), "1 is not of type 'string'"),
    "scrape interval in words": ("PodMonitor", _set("spec.podMetricsEndpoints.0.interval", "5 seconds"), "does not match"),
    "rule without expr": ("PrometheusRule", _set("spec.groups.0.rules.0.expr", _DELETE), "'expr' is a required"),
    "KEDA threshold as a number": ("ScaledObject", _set("spec.triggers.0.metadata.threshold", 1), "1 is not of type 'string'"),
    "KEDA target without name": ("ScaledObject", _set("spec.scaleTargetRef.name", _DELETE), "'name' is a required"),
    "typo modelformat": ("InferenceService", lambda d: d["spec"]["predictor"]["model"].update(
        modelformat=d["spec"]["predictor"]["model"].pop("modelFormat")), "'modelformat' was unexpected"),
    "minReplicas as text": ("InferenceService", _set("spec.predictor.minReplicas", "1"), "'1' is not of type 'integer'"),
}


@pytest.mark.parametrize("fault", PLANTED)
def test_planted_faults_fail_validation(bundle, fault):
    kind, change, message = PLANTED[fault]
    doc = copy.deepcopy(_doc(bundle, kind))
    change(doc)
    errors = schema_errors(doc)
    assert any(message in e for e in errors), errors


def test_the_trimmed_inferenceservice_schema_keeps_every_field_the_bundle_writes(bundle):
    """Trimming opened only fields tritonize does not write: those it writes meet KServe's own schema."""
    schema = json.loads((CRDS / CRD_SCHEMAS[("serving.kserve.io/v1beta1", "InferenceService")]).read_text())
    predictor = schema["properties"]["spec"]["properties"]["predictor"]["properties"]
    written = _doc(bundle, "InferenceService")["spec"]["predictor"]
    opened = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert [field for field in written if predictor[field] == opened] == []
    assert set(written["model"]) <= set(predictor["model"]["properties"])


def _promtool() -> str:
    from tritonize.monitor.prometheus import INSTALL_HINT

    path = shutil.which("promtool")
    if path is None:
        pytest.skip(f"promtool not installed; {INSTALL_HINT}")
    return path


def test_prometheusrule_promql_passes_promtool_and_a_broken_one_does_not(bundle, tmp_path):
    groups = _doc(bundle, "PrometheusRule")["spec"]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups))
    result = subprocess.run([_promtool(), "check", "rules", "--lint-fatal", tmp_path / "rules.yml"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(promql.RECORDING_RULES) + 3} rules found" in result.stdout
    broken = copy.deepcopy(groups)
    broken["groups"][0]["rules"][0]["expr"] = broken["groups"][0]["rules"][0]["expr"].replace("[1m]", "[1m", 1)
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    result = subprocess.run([_promtool(), "check", "rules", tmp_path / "broken.yml"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0


def test_rules_read_only_this_podmonitors_job_and_keep_namespace_and_pod(bundle, tmp_path):
    """promtool's rule unit test: the Prometheus Operator names a PodMonitor's job <namespace>/<name>;
    another deployment's series (another job) produce nothing here, the recorded ratio keeps the
    `namespace` and `pod` labels prometheus-adapter needs, and TritonServerDown watches this job."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_doc(bundle, "PrometheusRule")["spec"]))
    ours = 'job="default/tritonize",namespace="default",pod="tritonize-7d4b9-x2x7q",model="onnx_model",version="1"'
    theirs = 'job="default/other",namespace="default",pod="other-5f6c8-abcde",model="onnx_model",version="1"'
    series = [
        {"series": f"{promql.QUEUE_US}{{{labels}}}", "values": "0+300000x40"} for labels in (ours, theirs)] + [
        {"series": f"{promql.COMPUTE_INFER_US}{{{labels}}}", "values": "0+1500000x40"} for labels in (ours, theirs)] + [
        {"series": 'up{job="default/tritonize",instance="10.1.2.3:8002",namespace="default",pod="tritonize-7d4b9-x2x7q"}',
         "values": "1x10 0x30"}]
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": series,
        "promql_expr_test": [{"expr": promql.QUEUE_COMPUTE_RATIO, "eval_time": "5m",
                              "exp_samples": [{"labels": f"{promql.QUEUE_COMPUTE_RATIO}{{{ours}}}", "value": 0.2}]}],
        "alert_rule_test": [{"eval_time": "5m", "alertname": "TritonServerDown", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "job": "default/tritonize", "instance": "10.1.2.3:8002",
                           "namespace": "default", "pod": "tritonize-7d4b9-x2x7q"},
            "exp_annotations": {"summary": "Triton metrics endpoint 10.1.2.3:8002 does not answer"}}]}],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_autoscalers_read_the_recorded_ratio_of_the_served_classifier(bundle):
    hpa, keda = _doc(bundle, "HorizontalPodAutoscaler"), _doc(bundle, "ScaledObject")
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]
    rule_names = [r.get("record") for g in _doc(bundle, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert metric["name"] == promql.QUEUE_COMPUTE_RATIO in rule_names
    assert metric["selector"]["matchLabels"] == {"model": "onnx_model"}
    assert hpa["spec"]["scaleTargetRef"]["name"] == _doc(bundle, "Deployment")["metadata"]["name"]
    assert keda["spec"]["triggers"][0]["metadata"]["query"] == \
        f'sum({promql.QUEUE_COMPUTE_RATIO}{{job="default/tritonize", model="onnx_model"}})'
    # the PodMonitor selects the Deployment's pods, on the port that serves /metrics
    pods = _doc(bundle, "Deployment")["spec"]["template"]["metadata"]["labels"]
    monitor = _doc(bundle, "PodMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= pods.items()
    ports = {p["name"] for p in _doc(bundle, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert monitor["podMetricsEndpoints"][0]["port"] in ports


def test_services_http_and_headless_grpc(bundle):
    http, grpc = _doc(bundle, "Service", "tritonize"), _doc(bundle, "Service", "tritonize-grpc")
    assert {p["name"] for p in http["spec"]["ports"]} == {"http", "metrics"} and "clusterIP" not in http["spec"]
    assert grpc["spec"]["clusterIP"] == "None"
    assert grpc["spec"]["ports"] == [{"name": "grpc", "port": 8001, "targetPort": "grpc",
                                      "appProtocol": "kubernetes.io/h2c"}]


def test_deployment_runs_the_same_container_command_as_docker_reading_the_store(bundle, small_repo):
    from tritonize.serve.docker import choose_release, container_command

    deployment = _doc(bundle, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    release = choose_release(None, small_repo).release
    uri = next(a for a in container["args"] if a.startswith("--model-repository="))
    assert re.fullmatch(r"--model-repository=s3://minio\.minio\.svc:9000/models/prod/resnet/releases/[0-9a-f]{16}", uri)
    assert container["args"] == container_command(small_repo, release, model_repository=uri.split("=", 1)[1],
                                                  requirements_dir="/etc/tritonize/requirements", restricted=True)
    assert container["image"] == f"nvcr.io/nvidia/tritonserver:{release}-py3"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    # the preprocess model's requirements.txt reaches the pip step through the ConfigMap
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    configmap = _doc(bundle, "ConfigMap")
    assert volume["configMap"]["items"] == [{"key": "preprocess.requirements.txt", "path": "preprocess/requirements.txt"}]
    assert configmap["data"]["preprocess.requirements.txt"] == (small_repo / "preprocess" / "requirements.txt").read_text()
    assert "-r /etc/tritonize/requirements/preprocess/requirements.txt" in container["args"][2]
    assert container["envFrom"] == [{"secretRef": {"name": "tritonize-s3"}}]
    secret = _doc(bundle, "Secret", "tritonize-s3")
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"] == "minio.minio.svc:9000"


def test_every_pod_restricts_the_control_apis_to_the_key_in_its_secret(bundle):
    """Everything in the cluster reaches Triton's ports, as with `serve --host 0.0.0.0`: the Deployment and
    the InferenceService take the key from the control-key Secret, and the smoke test's load sends it."""
    from tritonize.access import GRPC_KEY_HEADER, KEY_ENV, restriction_flags

    from_secret = {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": "tritonize-control-key", "key": "key"}}}
    container = _doc(bundle, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert from_secret in container["env"]
    assert all(f'"{flag}"' in container["args"][2] for flag in restriction_flags(f"${KEY_ENV}"))
    model = _doc(bundle, "InferenceService")["spec"]["predictor"]["model"]
    assert model["env"] == [from_secret] and set(restriction_flags(f"$({KEY_ENV})")) <= set(model["args"])
    assert _doc(bundle, "Secret", "tritonize-control-key")["stringData"] == {"key": "<a long random value>"}
    smoke = (bundle / "smoke.sh").read_text()
    assert f'KEY_HEADER="${{KEY_HEADER:-{GRPC_KEY_HEADER}}}"' in smoke and "-H '$KEY_HEADER:$key'" in smoke


def test_probes_on_tritons_health_endpoints_and_a_startup_budget_from_the_load_time(bundle, small_repo):
    container = _doc(bundle, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
    size = sum(p.stat().st_size for p in small_repo.rglob("*") if p.is_file())
    assert startup >= 3 * (12 + size / 50e6)  # 3 x (load --load-seconds 12 + downloading the release)
    assert "load 12 s given with --load-seconds" in _doc(bundle, "Deployment")["metadata"]["annotations"]["tritonize.io/startup-budget"]


def test_measures_the_load_time_when_not_given(trt_repo, tmp_path):
    """Without --load-seconds the embedded engine starts on the repository (here onnx_model loads; the
    plan-less trt_model cannot) and the time to ready sizes the startup probe."""
    result = run_cli("deploy", "k8s", trt_repo, "--storage", STORAGE, "--offline", "--output-dir", tmp_path / "k8s")
    assert result.exit_code == 0, result.output
    seconds = float(re.search(r"model load: ([\d.]+) s, measured here with the embedded engine", result.output).group(1))
    container = _doc(tmp_path / "k8s", "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert seconds > 0 and container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 3 * seconds


def test_the_image_and_runtime_are_the_release_whose_tensorrt_runs_the_plan(trt_repo, tmp_path):
    result = run_cli("deploy", "k8s", trt_repo, "--storage", STORAGE, "--offline", "--load-seconds", "30",
                     "--config-name", "gpu", "--replicas", "2", "--max-replicas", "6", "--gpus", "2",
                     "--namespace", "vision", "--name", "resnet", "--output-dir", tmp_path / "k8s")
    assert result.exit_code == 0, result.output
    bundle = tmp_path / "k8s"
    for docs in documents(bundle).values():
        for doc in docs:
            assert schema_errors(doc) == [], doc["kind"]
            assert doc["metadata"]["namespace"] == "vision"
    deployment, isvc, hpa = _doc(bundle, "Deployment"), _doc(bundle, "InferenceService"), _doc(bundle, "HorizontalPodAutoscaler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"  # runs TensorRT 10.5.0.18
    assert container["args"][:2] == ["sh", "-c"] and "pip" not in container["args"][2]  # no Python model needs packages
    assert {"--model-config-name=gpu", "--backend-config=tensorrt,version-compatible=true"} <= set(container["args"])
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2} and deployment["spec"]["replicas"] == 2
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtimeVersion"] == "24.10-py3" and model["modelFormat"] == {"name": "triton"}
    assert model["storageUri"].startswith("s3://models/prod/resnet/releases/")
    assert "--model-config-name=gpu" in model["args"] and "--load-model=trt_model" in model["args"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["selector"]["matchLabels"] == {"model": "trt_model"}
    assert _doc(bundle, "Service", "resnet-grpc")
    assert 'job="vision/resnet"' in _doc(bundle, "PrometheusRule")["spec"]["groups"][1]["rules"][2]["expr"]
    assert not (bundle / "triton" / "requirements.yaml").exists()


def test_inferenceservice_loads_only_models_that_need_no_pip_packages(bundle):
    """KServe's Triton runtime starts tritonserver itself (no pip step): the preprocess model (Pillow)
    and the ensembles through it are left out; the UINT8 path needs no package and is loaded."""
    args = _doc(bundle, "InferenceService")["spec"]["predictor"]["model"]["args"]
    loaded = {a.split("=", 1)[1] for a in args if a.startswith("--load-model=")}
    assert loaded == {"onnx_model", "torch_model", "preprocess_uint8", "onnx_classifier_uint8", "torch_classifier_uint8"}


@pytest.mark.parametrize("args, message", [
    (["--name", "Bad_Name"], "--name must be a DNS label"),
    (["--replicas", "3", "--max-replicas", "2"], "need 1 <= --replicas <= --max-replicas"),
    (["--gpus", "0"], "--gpus must be at least 1"),
    (["--monitor-label", "prometheus"], "--monitor-label takes KEY=VALUE"),
    (["--config-name", "tpu"], "has configs/tpu.pbtxt"),
    (["--scale-model", "resnet"], "--scale-model: resnet not in"),
    (["--triton-release", "24.04", "--config-name", "gpu"], "Triton 24.04 has no --model-config-name"),
])
def test_bad_options_are_one_line_and_write_nothing(small_repo, tmp_path, args, message):
    result = run_cli("deploy", "k8s", small_repo, "--storage", STORAGE, "--offline", "--load-seconds", "5",
                     "--output-dir", tmp_path / "k8s", *args)
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "k8s").exists()


def test_smoke_script_passes_shellcheck_and_a_broken_one_does_not(bundle, tmp_path):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (Debian/Ubuntu: apt-get install shellcheck; `make test` does this as root)")
    script = bundle / "smoke.sh"
    assert script.stat().st_mode & 0o111
    result = subprocess.run([shellcheck, script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
    assert 'NAMESPACE="${NAMESPACE:-default}"' in script.read_text() and 'CLASSIFIER="${CLASSIFIER:-onnx_classifier}"' in script.read_text()
    (tmp_path / "broken.sh").write_text(script.read_text().replace('k get secret "$NAME-s3"', "k get secret $NAME-s3 $("))
    assert subprocess.run([shellcheck, tmp_path / "broken.sh"], capture_output=True, timeout=60).returncode != 0


def test_a_pytorch_2_package_deploys_with_the_release_it_was_made_for(aoti_artifacts, tmp_path):
    from tritonize.manifest import Manifest
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path / "models"
    build_repository(aoti_artifacts, repo, RepoOptions(models=("onnx_model", "aoti_model")))
    release = Manifest.load(aoti_artifacts).aoti.target.triton_release
    result = run_cli("deploy", "k8s", repo, "--storage", STORAGE, "--offline", "--load-seconds", "30", "--output-dir",
                     tmp_path / "k8s")
    assert result.exit_code == 0, result.output
    container = _doc(tmp_path / "k8s", "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"nvcr.io/nvidia/tritonserver:{release}-py3"
    assert f"{release}: the release aoti_model's package was made for" in str(_doc(tmp_path / "k8s", "Deployment"))
    refused = run_cli("deploy", "k8s", repo, "--storage", STORAGE, "--offline", "--load-seconds", "30",
                      "--triton-release", "26.04", "--output-dir", tmp_path / "k8s2")
    assert refused.exit_code == 1 and "error: aoti_model in" in refused.output
    assert "Triton 26.04 cannot serve aoti_model" in refused.output and "drop --triton-release" in refused.output
    assert not (tmp_path / "k8s2").exists()
