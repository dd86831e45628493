"""`tritonize repo build` and `tritonize repo check`: options in, library call out."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from tritonize.options import (
    DEFAULT_ARTIFACTS,
    DEFAULT_REPOSITORY,
    Artifacts,
    AsJson,
    Force,
    GpuCC,
    Instances,
    Kind,
    LatencyInstances,
    MaxBatch,
    Models,
    RepositoryArgument,
    TritonRelease,
)

app = typer.Typer(no_args_is_help=True, help="Build and check the Triton model repository.")


@app.command("build")
def build_command(
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    max_batch: MaxBatch = None,
    preferred: Annotated[str, typer.Option(help="Preferred dynamic batch sizes, comma-separated (capped at max batch).")] = "4,8,16,32",
    queue_delay_us: Annotated[int, typer.Option(help="Dynamic batcher max queue delay in microseconds.")] = 100,
    instances: Instances = 1,
    latency_instances: LatencyInstances = None,
    kind: Kind = "auto",
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="Warm up each model at batch 1 and at max batch.")] = True,
    models: Models = None,
    ensembles: Annotated[bool, typer.Option("--ensembles/--no-ensembles", help="Also build the preprocessing models and, per classifier, the ensembles that take encoded images (<backend>_classifier) or UINT8 pixels (<backend>_classifier_uint8).")] = True,
    force: Force = False,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs/--no-cuda-graphs", help="trt_model: capture CUDA graphs (optimization.cuda.graphs) for batch 1, "
                                               "the preferred sizes and max_batch_size, within the plan's profile.")] = False,
    context_memory: Annotated[Optional[str], typer.Option(
        "--context-memory", help="trt_model's execution_context_allocation_strategy (Triton 25.05+): static (memory "
                                 "for the largest profile, Triton's default) or on-profile-change.", show_default=False)] = None,
    plans: Annotated[Optional[str], typer.Option(
        "--plans", help="Artifacts directories, comma-separated, whose TensorRT plans were built on other GPU kinds (copies "
                        "of these artifacts, converted there). trt_model then carries one plan per compute capability "
                        "(cc_model_filenames), each checked against its manifest.", show_default=False)] = None,
) -> None:
    """Build a classifier model for each artifact of the manifest that can serve (a TensorRT plan once built), and
    the ensembles that preprocess on the server (--models: a subset of these; --force replaces an existing repository).
    --max-batch is each config's max_batch_size; default: the largest batch each model's artifact was verified at
    (a TensorRT plan: its profile max). A larger one is refused."""
    from tritonize import api

    result = api.repo_build(artifacts=artifacts, repository=repository, max_batch=max_batch, preferred=preferred,
                            queue_delay_us=queue_delay_us, instances=instances, latency_instances=latency_instances,
                            kind=kind, warmup=warmup, models=models, ensembles=ensembles, force=force,
                            cuda_graphs=cuda_graphs, context_memory=context_memory, plans=plans)
    typer.echo(f"repository: {repository} ({result.status.value})")


@app.command("check")
def check_command(
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    artifacts: Artifacts = None,
    triton_release: TritonRelease = None,
    as_json: AsJson = False,
    gpu_cc: GpuCC = None,
    in_image: Annotated[bool, typer.Option(
        "--in-image", help="Also run trt_model's plan with the trtexec of its serving release's image (Docker with the "
                           "NVIDIA runtime) on one batch and compare it with onnxruntime on the export (needs --artifacts).")] = False,
) -> None:
    """Lint the repository: what would make Triton refuse or misbehave. Exits 1 on any error. --artifacts: the
    manifest to check hashes and the plan profile against (default: build/ when it has a manifest)."""
    from tritonize import api

    if artifacts is None and (DEFAULT_ARTIFACTS / "manifest.json").is_file():
        artifacts = DEFAULT_ARTIFACTS
    findings = api.repo_check(repository=repository, artifacts=artifacts, triton_release=triton_release, gpu_cc=gpu_cc)
    errors = [f for f in findings if f.severity == "error"]
    if as_json:
        typer.echo(json.dumps({"repository": str(repository), "artifacts": str(artifacts) if artifacts else None,
                               "errors": len(errors), "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        for f in findings:
            typer.echo(f"{f.severity}: {f.model}: {f.message} -> fix: {f.fix}")
        against = f" against {artifacts}/manifest.json" if artifacts else " (no manifest: hashes and plan profile not checked)"
        typer.echo(f"{repository}: {len(errors)} error(s), {len(findings) - len(errors)} warning(s){against}")
    if in_image:
        from tritonize.repository_builder.in_image import MODEL, check_in_image

        release, plan, report = check_in_image(repository, artifacts, triton_release)
        mark = "✓" if report.passed else "✗"
        typer.echo(f"{mark} {MODEL}: {plan} ran in {release.image} (its trtexec, TensorRT {release.tensorrt or '?'}) "
                   f"on a batch of {', '.join(report.batches)}: {report.summary()}")
        if not report.passed:
            raise typer.Exit(1)
    if errors:
        raise typer.Exit(1)
