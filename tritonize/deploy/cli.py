"""`tritonize deploy push` and `tritonize deploy k8s`: options in, library calls out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import (
    DEFAULT_REPOSITORY,
    AsJson,
    ConfigName,
    Endpoint,
    OutputDir,
    Region,
    RepositoryArgument,
    TritonRelease,
)

app = typer.Typer(no_args_is_help=True, help="Push a repository to object storage; deployment bundles for it.")


@app.command("push")
def push_command(
    dest: Annotated[str, typer.Argument(help="s3://BUCKET/PREFIX: releases go to PREFIX/releases/<id>/, the pointer "
                                             "to the current one is PREFIX/CURRENT.")],
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    endpoint: Endpoint = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Copy a checked repository to object storage: a new release prefix, every object verified, then
    the CURRENT pointer. Resumable: run it again after an interruption. Credentials: AWS_ACCESS_KEY_ID
    and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)."""
    from tritonize.deploy.push import push
    from tritonize.deploy.s3 import Store

    store = Store.parse(dest, endpoint, region)
    summary = push(repository, store).summary()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    was = {None: "first release", summary["release"]: "already current"}.get(summary["previous"],
                                                                             f"was {summary['previous']}")
    options = f" --endpoint {endpoint}" if endpoint else ""
    typer.echo("\n".join([
        f"release  {summary['uri']} ({summary['files']} files, {summary['bytes'] / 1e6:.1f} MB: "
        f"{summary['uploaded']} uploaded, {summary['kept']} already there)",
        f"pointer  {summary['pointer']} -> {summary['release']} ({was})",
        "",
        "Triton reads this release with",
        f"  --model-repository={summary['model_repository']}",
        f"and AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION={store.region} in its environment, or",
        "TRITON_CLOUD_CREDENTIAL_PATH=<file> with this file (fill in the two placeholders):",
        json.dumps(summary["credential_file"], indent=2),
        "",
        "Triton follows no pointer: it serves the prefix it was started with. On Kubernetes:",
        f"  tritonize deploy k8s {repository} --storage {store.uri()}{options}",
    ]))



@app.command("k8s")
def k8s_command(
    storage: Annotated[str, typer.Option("--storage", help="Where `tritonize deploy push` put the repository: s3://BUCKET/PREFIX.")],
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    endpoint: Endpoint = None,
    cluster_endpoint: Annotated[Optional[str], typer.Option(
        "--cluster-endpoint", help="The store's URL as the pods reach it, when it differs from --endpoint "
                                   "(e.g. http://minio.minio.svc:9000 while --endpoint is a port-forward).")] = None,
    region: Region = None,
    output_dir: OutputDir = Path("k8s"),
    name: Annotated[str, typer.Option("--name", help="Name of the Deployment, Services and the rest.")] = "tritonize",
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes namespace.")] = "default",
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas at start; the autoscalers' minimum.")] = 1,
    max_replicas: Annotated[int, typer.Option("--max-replicas", help="The autoscalers' maximum.")] = 4,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs per pod (nvidia.com/gpu limit).")] = 1,
    triton_release: TritonRelease = None,
    config_name: ConfigName = None,
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
        "--scale-model", help="Model whose queue/compute ratio drives scaling (default: the repository's TensorRT model, "
                               "else the first classifier that runs anywhere).")] = None,
) -> None:
    """Kubernetes manifests for a pushed repository: Deployment (the NGC image matching the plan), Services,
    PodMonitor, PrometheusRule, HPA or KEDA ScaledObject, KServe InferenceService, and smoke.sh, into --output-dir
    (replaced as a whole)."""
    from tritonize.deploy.k8s import DeployOptions, write_k8s_bundle
    from tritonize.progress import say

    options = DeployOptions(
        storage=storage, endpoint=endpoint, cluster_endpoint=cluster_endpoint, region=region, name=name,
        namespace=namespace, replicas=replicas, max_replicas=max_replicas, gpus=gpus, triton_release=triton_release,
        config_name=config_name, load_seconds=load_seconds, offline=offline, monitor_label=monitor_label,
        prometheus_url=prometheus_url, scale_model=scale_model,
    )
    bundle = output_dir
    written = write_k8s_bundle(repository, bundle, options)
    say(f"wrote {bundle}/: " + ", ".join(str(p.relative_to(bundle)) for p in written))
    typer.echo(f"kubectl apply -f {bundle}/s3-secret.template.yaml   # once, after filling in the credentials\n"
               f"kubectl apply -f {bundle}/triton -f {bundle}/hpa     # or -f {bundle}/keda instead of hpa\n"
               f"kubectl apply -f {bundle}/kserve                     # or this instead: KServe runs Triton")
