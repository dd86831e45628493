"""`tritonize deploy k8s`: options in, library call out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import DEFAULT_REPOSITORY, Endpoint, Region, RepositoryArgument, TritonRelease

app = typer.Typer(no_args_is_help=True, help="Deployment bundles for a pushed repository.")


@app.command("k8s")
def k8s_command(
    storage: Annotated[str, typer.Option("--storage", help="Where `tritonize repo push` put the repository: s3://BUCKET/PREFIX.")],
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    endpoint: Endpoint = None,
    cluster_endpoint: Annotated[Optional[str], typer.Option(
        "--cluster-endpoint", help="The store's URL as the pods reach it, when it differs from --endpoint "
                                   "(e.g. http://minio.minio.svc:9000 while --endpoint is a port-forward).")] = None,
    region: Region = None,
    bundle: Annotated[Path, typer.Option("--bundle", help="Directory for the manifests (replaced as a whole).")] = Path("k8s"),
    name: Annotated[str, typer.Option("--name", help="Name of the Deployment, Services and the rest.")] = "tritonize",
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes namespace.")] = "default",
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas at start; the autoscalers' minimum.")] = 1,
    max_replicas: Annotated[int, typer.Option("--max-replicas", help="The autoscalers' maximum.")] = 4,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs per pod (nvidia.com/gpu limit).")] = 1,
    triton_release: TritonRelease = None,
    model_config_name: Annotated[Optional[str], typer.Option(
        "--model-config-name", help="Serve configs/<NAME>.pbtxt (e.g. gpu) instead of config.pbtxt.")] = None,
    load_seconds: Annotated[Optional[float], typer.Option(
        "--load-seconds", help="Measured seconds from server start to ready on the target (sizes the startup "
                               "probe); default: measured here with the embedded engine.")] = None,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Do not read the store's CURRENT pointer: pin this repository's release as is.")] = False,
    monitor_label: Annotated[str, typer.Option(
        "--monitor-label", help="KEY=VALUE label by which the Prometheus Operator selects the PodMonitor and rules.")] = "release=prometheus",
    prometheus_url: Annotated[str, typer.Option(
        "--prometheus-url", help="The in-cluster Prometheus KEDA queries.")] = "http://prometheus-operated.monitoring.svc:9090",
    scale_model: Annotated[Optional[str], typer.Option(
        "--scale-model", help="Model whose queue/compute ratio drives scaling (default: trt_model, else onnx_model).")] = None,
) -> None:
    """Kubernetes manifests for a pushed repository: Deployment (the NGC image matching the plan), Services,
    PodMonitor, PrometheusRule, HPA or KEDA ScaledObject, KServe InferenceService, and smoke.sh."""
    from tritonize.deploy.k8s import DeployOptions, write_k8s_bundle
    from tritonize.progress import say

    options = DeployOptions(
        storage=storage, endpoint=endpoint, cluster_endpoint=cluster_endpoint, region=region, name=name,
        namespace=namespace, replicas=replicas, max_replicas=max_replicas, gpus=gpus, triton_release=triton_release,
        model_config_name=model_config_name, load_seconds=load_seconds, offline=offline, monitor_label=monitor_label,
        prometheus_url=prometheus_url, scale_model=scale_model,
    )
    written = write_k8s_bundle(repository, bundle, options)
    say(f"wrote {bundle}/: " + ", ".join(str(p.relative_to(bundle)) for p in written))
    typer.echo(f"kubectl apply -f {bundle}/s3-secret.template.yaml   # once, after filling in the credentials\n"
               f"kubectl apply -f {bundle}/triton -f {bundle}/hpa     # or -f {bundle}/keda instead of hpa\n"
               f"kubectl apply -f {bundle}/kserve                     # or this instead: KServe runs Triton")
