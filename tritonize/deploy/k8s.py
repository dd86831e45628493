"""`tritonize deploy k8s`: Kubernetes manifests that serve a pushed repository, written into one directory.

    triton/deployment.yaml        the NGC Triton image whose TensorRT runs the plan (serve/docker.py decides,
                                  as for `serve --engine docker`), reading the release from S3 itself
    triton/services.yaml          HTTP + metrics Service; headless gRPC Service (clients balance per call)
    triton/requirements.yaml      ConfigMap: the Python models' requirements.txt (only when there are some)
    triton/podmonitor.yaml        Prometheus Operator: scrape the pods' metrics port
    triton/prometheusrule.yaml    the recording rules and alerts of monitor/promql.py, for this PodMonitor's job
    hpa/hpa.yaml                  autoscaling/v2 on the queue/compute ratio (through prometheus-adapter)
    keda/scaledobject.yaml        the alternative to hpa/: KEDA reads the same ratio from Prometheus
    kserve/inferenceservice.yaml  the second way in: KServe runs Triton on the same release
    s3-secret.template.yaml       the store's credentials, to fill in and apply once
    control-key-secret.template.yaml  the key the control APIs want (every pod reaches Triton's ports)
    smoke.sh                      for a user with a cluster: apply, wait, classify through the Service, scale

The release pinned is the one the store's CURRENT pointer names, which must be this repository (the
provenance the image is chosen from is read here); --offline pins this repository's release unread.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from tritonize.access import GRPC_KEY_HEADER, KEY_ENV, restriction_flags
from tritonize.deploy.push import current_release, snapshot
from tritonize.deploy.s3 import Store
from tritonize.errors import TritonizeError
from tritonize.files import replace_tree
from tritonize.model_repository import BACKENDS
from tritonize.monitor import promql
from tritonize.monitor.bundle import SCRAPE_INTERVAL_S, BundleOptions, rules
from tritonize.progress import say
from tritonize.releases import release_info
from tritonize.serve.docker import choose_release, container_command, tritonserver_flags
from tritonize.serve.embedded import EmbeddedServer
from tritonize.serve.repository import (
    has_config_variant,
    models_without_python_requirements,
    python_requirements,
    validate_repository,
)

# The classifiers whose queue/compute ratio drives scaling by default, the first one the repository has: a GPU
# model first, then those that run anywhere (a CPU-only variant never scales a GPU deployment).
SCALED_BY = sorted((b for b in BACKENDS.values() if not b.cpu_only), key=lambda b: not b.needs_gpu)

FILES = ("triton/deployment.yaml", "triton/services.yaml", "triton/requirements.yaml", "triton/podmonitor.yaml",
         "triton/prometheusrule.yaml", "hpa/hpa.yaml", "keda/scaledobject.yaml", "kserve/inferenceservice.yaml",
         "s3-secret.template.yaml", "control-key-secret.template.yaml", "smoke.sh")
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # tritonserver's defaults
REQUIREMENTS_DIR = "/etc/tritonize/requirements"
# Startup probe budget: SAFETY x (measured load + downloading the release) (+ the pip step), at least
# MIN_STARTUP_S. Triton copies the whole release from the store before it loads anything.
DOWNLOAD_BYTES_PER_S = 50e6  # an assumption (the store's bandwidth to a pod); stated in the annotation
PIP_INSTALL_S = 60  # allowance for `pip install` of the Python models' requirements at container start
SAFETY = 3
MIN_STARTUP_S = 60
PROBE_PERIOD_S = 10
EXIT_TIMEOUT_S = 30  # tritonserver's --exit-timeout-secs default: in-flight requests finish on SIGTERM
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class DeployOptions:
    storage: str  # s3://bucket/prefix that `deploy push` wrote
    endpoint: str | None = None  # where this machine reaches the store (CURRENT is read there)
    cluster_endpoint: str | None = None  # where the pods reach it; None: the same
    region: str | None = None
    name: str = "tritonize"
    namespace: str = "default"
    replicas: int = 1  # the Deployment's, and the autoscalers' minimum
    max_replicas: int = 4
    gpus: int = 1  # per pod
    triton_release: str | None = None  # None: from the plan's provenance in the repository
    config_name: str | None = None  # Triton's --model-config-name (configs/<name>.pbtxt)
    load_seconds: float | None = None  # measured start-to-ready time; None: measure here (embedded engine)
    offline: bool = False
    monitor_label: str = "release=prometheus"  # kube-prometheus-stack selects PodMonitors/rules by it
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"  # KEDA's Prometheus
    scale_model: str | None = None  # the model whose queue/compute ratio scales; None: the plan, else ONNX

    def __post_init__(self):
        # Services are named <name>-grpc; Kubernetes Service names are DNS-1035 labels of 63 characters.
        if not _DNS_LABEL.fullmatch(self.name) or len(self.name) > 58:
            raise TritonizeError(f"--name must be a DNS label of at most 58 characters: a-z, 0-9 and '-', "
                                 f"starting with a letter (got {self.name!r})")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", self.namespace) or len(self.namespace) > 63:
            raise TritonizeError(f"--namespace must be a DNS label: a-z, 0-9 and '-' (got {self.namespace!r})")
        if self.replicas < 1 or self.max_replicas < self.replicas:
            raise TritonizeError(f"need 1 <= --replicas <= --max-replicas (got {self.replicas} and {self.max_replicas})")
        if self.gpus < 1:
            raise TritonizeError(f"--gpus must be at least 1 (got {self.gpus})")
        if self.load_seconds is not None and not self.load_seconds > 0:
            raise TritonizeError(f"--load-seconds must be positive (got {self.load_seconds})")
        key, _, value = self.monitor_label.partition("=")
        if not key or not value:
            raise TritonizeError(f"--monitor-label takes KEY=VALUE (got {self.monitor_label!r})")


@dataclass(frozen=True)
class DeploymentPlan:
    """Everything the manifests are made from, decided once."""

    repository: Path
    options: DeployOptions
    store: Store
    release_key: str  # "releases/<id>"
    release_bytes: int
    triton_release: str
    why: str
    scale_model: str
    load_seconds: float
    load_source: str  # where load_seconds comes from

    @property
    def job(self) -> str:
        """The scrape job of the PodMonitor's targets: the Prometheus Operator names it <namespace>/<name>
        (pkg/prometheus/promcfg.go, v0.93.0)."""
        return f"{self.options.namespace}/{self.options.name}"

    @property
    def startup_seconds(self) -> int:
        pip = PIP_INSTALL_S if python_requirements(self.repository) else 0
        return max(MIN_STARTUP_S, math.ceil(SAFETY * (self.load_seconds + self.release_bytes / DOWNLOAD_BYTES_PER_S) + pip))


def write_k8s_bundle(repository: Path, bundle: Path, options: DeployOptions) -> list[Path]:
    """Decide, render and write the bundle (replaced as a whole); returns its files."""
    plan = make_plan(Path(repository), options)
    return replace_tree(bundle, render(plan), FILES, "a Kubernetes bundle", "--output-dir", executables=("smoke.sh",))


def make_plan(repository: Path, options: DeployOptions) -> DeploymentPlan:
    names = validate_repository(repository)
    store = Store.parse(options.storage, options.cluster_endpoint or options.endpoint, options.region)
    if options.config_name and not has_config_variant(repository, options.config_name):
        raise TritonizeError(f"no model in {repository} has configs/{options.config_name}.pbtxt "
                             "(--config-name)")
    scale_model = options.scale_model or next((b.name for b in SCALED_BY if b.name in names), None)
    if scale_model not in names:
        raise TritonizeError(f"--scale-model: {scale_model or 'no classifier'} not in {repository}; "
                             f"it has {', '.join(names)}")
    release = snapshot(repository)
    if not options.offline:
        current = current_release(Store.parse(options.storage, options.endpoint, options.region))
        if current != release.key:
            raise TritonizeError(
                f"{store.uri('CURRENT')} names {current or 'no release'}, but {repository} is {release.key}: "
                f"push it first (`tritonize deploy push {store.uri()} {repository}`), or deploy the "
                "repository that was pushed")
    choice = choose_release(options.triton_release, repository)
    say(f"Triton {choice.release}: {choice.why}")
    if options.load_seconds is not None:
        load, source = options.load_seconds, "given with --load-seconds"
    else:
        load, source = measure_load_seconds(repository), "measured here with the embedded engine (CPU)"
    say(f"model load: {load:.1f} s, {source}")
    return DeploymentPlan(repository, options, store, release.key, release.size, choice.release, choice.why, scale_model,
                load, source)


def measure_load_seconds(repository: Path) -> float:
    """Seconds from starting Triton (the embedded engine) on `repository` until it is ready."""
    start = time.perf_counter()
    with EmbeddedServer(repository):
        return round(time.perf_counter() - start, 1)


def render(plan: DeploymentPlan) -> dict[str, str]:
    """File name -> contents."""
    header = (f"# Generated by `tritonize deploy k8s` for {plan.repository} ({plan.store.uri(plan.release_key)});\n"
              "# regenerate rather than edit. tritonize's tests check such bundles against the Kubernetes and CRD\n"
              "# schemas offline; none has been applied to a cluster there.\n")
    files = {
        "triton/deployment.yaml": deployment(plan),
        "triton/services.yaml": services(plan),
        "triton/requirements.yaml": requirements_configmap(plan),
        "triton/podmonitor.yaml": pod_monitor(plan),
        "triton/prometheusrule.yaml": prometheus_rule(plan),
        "hpa/hpa.yaml": hpa(plan),
        "keda/scaledobject.yaml": scaled_object(plan),
        "kserve/inferenceservice.yaml": [kserve_service_account(plan), inference_service(plan)],
        "s3-secret.template.yaml": s3_secret(plan),
        "control-key-secret.template.yaml": control_key_secret(plan),
    }
    out = {name: header + _yaml(docs) for name, docs in files.items() if docs}
    out["smoke.sh"] = smoke_script(plan)
    return out


def _meta(plan: DeploymentPlan, name: str | None = None, labels: dict | None = None, **extra) -> dict:
    o = plan.options
    return {"name": name or o.name, "namespace": o.namespace, "labels": {**app_labels(plan), **(labels or {})}, **extra}


def selector_labels(plan: DeploymentPlan) -> dict:
    return {"app.kubernetes.io/name": "tritonize", "app.kubernetes.io/instance": plan.options.name}


def app_labels(plan: DeploymentPlan) -> dict:
    return {**selector_labels(plan), "app.kubernetes.io/component": "triton", "app.kubernetes.io/managed-by": "tritonize"}


def _monitor_labels(plan: DeploymentPlan) -> dict:
    key, _, value = plan.options.monitor_label.partition("=")
    return {key: value}


def deployment(plan: DeploymentPlan) -> dict:
    o = plan.options
    requirements = python_requirements(plan.repository)
    # Every pod of the cluster reaches the ports: the control APIs want the key (from its Secret).
    args = container_command(plan.repository, plan.triton_release, model_config_name=o.config_name,
                             model_repository=plan.store.triton_uri(plan.release_key), requirements_dir=REQUIREMENTS_DIR,
                             restricted=True)
    health = {"ready": {"httpGet": {"path": "/v2/health/ready", "port": "http"}},
              "live": {"httpGet": {"path": "/v2/health/live", "port": "http"}}}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    # The Python backend passes tensors through /dev/shm; a pod's default is 64 MB (docker: --ipc=host).
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    if requirements:
        mounts.append({"name": "requirements", "mountPath": REQUIREMENTS_DIR, "readOnly": True})
        volumes.append({"name": "requirements", "configMap": {"name": f"{o.name}-requirements", "items": [
            {"key": _requirements_key(r), "path": r} for r in requirements]}})
    container = {
        "name": "triton",
        "image": release_info(plan.triton_release).image,
        "args": args,  # the image's entrypoint (NVIDIA's) runs them, as with `docker run`
        "ports": [{"name": name, "containerPort": port} for name, port in PORTS.items()],
        "envFrom": [{"secretRef": {"name": f"{o.name}-s3"}}],  # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
        "env": [{"name": "AWS_DEFAULT_REGION", "value": plan.store.region}, _control_key_env(plan)],
        "resources": {"limits": {"nvidia.com/gpu": o.gpus}},
        # Triton opens its ports only once every model has loaded: the startup probe waits that long.
        "startupProbe": {**health["ready"], "periodSeconds": PROBE_PERIOD_S,
                         "failureThreshold": math.ceil(plan.startup_seconds / PROBE_PERIOD_S)},
        "readinessProbe": {**health["ready"], "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**health["live"], "periodSeconds": 10, "failureThreshold": 6},
        "volumeMounts": mounts,
    }
    startup = (f"{plan.startup_seconds} s = max({MIN_STARTUP_S}, {SAFETY} x (load {plan.load_seconds:g} s "
               f"{plan.load_source} + {plan.release_bytes / 1e6:.0f} MB at an assumed {DOWNLOAD_BYTES_PER_S / 1e6:g} MB/s)"
               + (f" + {PIP_INSTALL_S} s pip" if requirements else "") + ")")
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(plan, annotations={"tritonize.io/release": plan.store.uri(plan.release_key),
                                             "tritonize.io/triton-release": f"{plan.triton_release}: {plan.why}",
                                             "tritonize.io/startup-budget": startup}),
        "spec": {
            "replicas": o.replicas,
            "selector": {"matchLabels": selector_labels(plan)},
            "template": {
                "metadata": {"labels": app_labels(plan)},
                "spec": {"terminationGracePeriodSeconds": EXIT_TIMEOUT_S + 10, "containers": [container],
                         "volumes": volumes},
            },
        },
    }


def services(plan: DeploymentPlan) -> list[dict]:
    """A ClusterIP balances per connection, and a gRPC client keeps one connection: through it every
    call would go to one pod. The headless Service's DNS name returns every ready pod, so a client
    with a round_robin policy balances per call."""
    o = plan.options
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(plan),
         "spec": {"selector": selector_labels(plan), "ports": [
             {"name": name, "port": PORTS[name], "targetPort": name} for name in ("http", "metrics")]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(plan, f"{o.name}-grpc"),
         "spec": {"clusterIP": "None", "selector": selector_labels(plan), "ports": [
             {"name": "grpc", "port": PORTS["grpc"], "targetPort": "grpc", "appProtocol": "kubernetes.io/h2c"}]}},
    ]


def _requirements_key(path: str) -> str:
    return path.replace("/", ".")  # ConfigMap keys allow no '/'


def requirements_configmap(plan: DeploymentPlan) -> dict | None:
    requirements = python_requirements(plan.repository)
    if not requirements:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(plan, f"{plan.options.name}-requirements"),
            "data": {_requirements_key(r): (plan.repository / r).read_text() for r in requirements}}


def pod_monitor(plan: DeploymentPlan) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": _meta(plan, labels=_monitor_labels(plan)),
            "spec": {"selector": {"matchLabels": selector_labels(plan)},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics",
                                              "interval": f"{SCRAPE_INTERVAL_S}s"}]}}


def prometheus_rule(plan: DeploymentPlan) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta(plan, labels=_monitor_labels(plan)),
            "spec": rules(BundleOptions().queue_alert_ms, plan.job)}


def hpa(plan: DeploymentPlan) -> dict:
    """Pods metric: prometheus-adapter serves a recorded series that has `namespace` and `pod` labels
    under its own name (NVIDIA's autoscaling tutorial relies on the chart's default rules for this);
    the selector picks the model whose queue/compute ratio decides."""
    o = plan.options
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(plan),
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": o.name},
                     "minReplicas": o.replicas, "maxReplicas": o.max_replicas,
                     "metrics": [{"type": "Pods", "pods": {
                         "metric": {"name": promql.QUEUE_COMPUTE_RATIO,
                                    "selector": {"matchLabels": {"model": plan.scale_model}}},
                         "target": {"type": "AverageValue", "averageValue": "1"}}}]}}


def scaled_object(plan: DeploymentPlan) -> dict:
    """KEDA creates and owns the HPA itself: apply this instead of hpa/, never both. AverageValue: the
    query's sum over pods is divided by the replicas, the same target as the HPA's."""
    o = plan.options
    query = f'sum({promql.QUEUE_COMPUTE_RATIO}{{job="{plan.job}", model="{plan.scale_model}"}})'
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": _meta(plan),
            "spec": {"scaleTargetRef": {"name": o.name}, "minReplicaCount": o.replicas,
                     "maxReplicaCount": o.max_replicas, "pollingInterval": 15, "cooldownPeriod": 300,
                     "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                         "serverAddress": o.prometheus_url, "query": query, "threshold": "1"}}]}}


def kserve_service_account(plan: DeploymentPlan) -> dict:
    """KServe's storage initializer reads the credentials from the Secrets of the predictor's ServiceAccount."""
    name = f"{plan.options.name}-s3"
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan, name), "secrets": [{"name": name}]}


def inference_service(plan: DeploymentPlan) -> dict:
    """KServe downloads the release to /mnt/models and starts its kserve-tritonserver runtime, whose
    args (tritonserver --model-store=/mnt/models ...) come first; these are appended. That runtime has no
    pip step, so the models needing Python packages (preprocessing and its ensembles) are not loaded:
    clients send preprocessed tensors (`tritonize client classify --preprocess client`)."""
    o = plan.options
    models = tuple(models_without_python_requirements(plan.repository))
    args = tritonserver_flags(plan.repository, plan.triton_release, model_config_name=o.config_name,
                              models=models) + restriction_flags(f"$({KEY_ENV})")  # Kubernetes expands $(VAR)
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": _meta(plan),
            "spec": {"predictor": {
                "minReplicas": o.replicas, "maxReplicas": o.max_replicas, "serviceAccountName": f"{o.name}-s3",
                "model": {"modelFormat": {"name": "triton"}, "protocolVersion": "v2",
                          "runtimeVersion": f"{plan.triton_release}-py3",  # pinned: the runtime's default tag is old
                          "storageUri": plan.store.uri(plan.release_key), "args": args, "env": [_control_key_env(plan)],
                          "resources": {"limits": {"nvidia.com/gpu": o.gpus}}}}}}


def s3_secret(plan: DeploymentPlan) -> dict:
    """Credentials for Triton (as environment variables) and KServe (annotations name the endpoint)."""
    store = plan.store
    annotations = {"serving.kserve.io/s3-region": store.region}
    if store.endpoint:
        annotations.update({"serving.kserve.io/s3-endpoint": store.endpoint,
                            "serving.kserve.io/s3-usehttps": "1" if store.secure else "0",
                            "serving.kserve.io/s3-usevirtualbucket": "false"})
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(plan, f"{plan.options.name}-s3", annotations=annotations),
            "type": "Opaque",
            "stringData": {"AWS_ACCESS_KEY_ID": "<access key id>", "AWS_SECRET_ACCESS_KEY": "<secret access key>"}}


def _control_key_env(plan: DeploymentPlan) -> dict:
    """$TRITONIZE_CONTROL_KEY from the control-key Secret (a pod without that Secret does not start)."""
    return {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": f"{plan.options.name}-control-key", "key": "key"}}}


def control_key_secret(plan: DeploymentPlan) -> dict:
    """The key Triton's control APIs (model repository, statistics, ...) want, as `tritonize serve` off
    loopback: put a long random value in (e.g. `openssl rand -hex 16`)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(plan, f"{plan.options.name}-control-key"),
            "type": "Opaque", "stringData": {"key": "<a long random value>"}}


def smoke_script(plan: DeploymentPlan) -> str:
    o = plan.options
    backend = BACKENDS.get(plan.scale_model)
    classifier = backend.ensemble if backend else plan.scale_model.removesuffix("_model") + "_classifier"
    settings = {
        "NAMESPACE": o.namespace, "NAME": o.name, "REPLICAS": str(o.replicas), "MODEL": plan.scale_model,
        "METRIC": promql.QUEUE_COMPUTE_RATIO,
        "CLASSIFIER": classifier if (plan.repository / classifier).is_dir() else "",
        "SDK_IMAGE": release_info(plan.triton_release).image.replace("-py3", "-py3-sdk"),
        "KEY_HEADER": GRPC_KEY_HEADER,
        "ROLLOUT_TIMEOUT_S": str(plan.startup_seconds + 600),  # + pulling the image (~15 GB) on a new node
    }
    body = resources.files("tritonize.deploy").joinpath("smoke.sh").read_text()
    lines = [f'{k}="${{{k}:-{v}}}"' for k, v in settings.items()]
    return body.replace("# @SETTINGS@\n", "\n".join(lines) + "\n")


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # a probe shared by two fields is written out twice, not as &id001
        return True


def _yaml(documents: dict | list[dict]) -> str:
    documents = documents if isinstance(documents, list) else [documents]
    return yaml.dump_all(documents, Dumper=_NoAliases, sort_keys=False, width=120, allow_unicode=True)
