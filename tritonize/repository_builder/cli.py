"""`tritonize repo build` and `tritonize repo check`: options in, library call out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(no_args_is_help=True, help="Build and check the Triton model repository.")

ArtifactsOption = Annotated[Path, typer.Option(help="Artifacts directory (with manifest.json).")]


@app.command("build")
def build_command(
    artifacts: ArtifactsOption = Path("build"),
    out: Annotated[Path, typer.Option(help="Model repository to write.")] = Path("models"),
    max_batch: Annotated[int, typer.Option(help="max_batch_size (never above a TensorRT plan's profile max).")] = 32,
    preferred: Annotated[str, typer.Option(help="Preferred dynamic batch sizes, comma-separated (capped at max batch).")] = "4,8,16,32",
    queue_delay_us: Annotated[int, typer.Option(help="Dynamic batcher max queue delay in microseconds.")] = 100,
    instances: Annotated[int, typer.Option(help="Instances per model (instance_group count).")] = 1,
    kind: Annotated[str, typer.Option(help="Instance kind in config.pbtxt: auto (Triton picks GPU if present), gpu or cpu.")] = "auto",
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="Warm up each model at batch 1 and at max batch.")] = True,
    models: Annotated[Optional[str], typer.Option(help="Subset to build, comma-separated (onnx_model,torch_model,trt_model).")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing repository.")] = False,
) -> None:
    """Build onnx_model, torch_model and (when a plan exists) trt_model from the artifacts."""
    from tritonize.repository_builder import RepoOptions, build_repository
    from tritonize.repository_builder.options import parse_int_list

    options = RepoOptions(
        max_batch=max_batch,
        preferred=parse_int_list(preferred, "--preferred"),
        queue_delay_us=queue_delay_us,
        instances=instances,
        kind=kind,
        warmup=warmup,
        models=tuple(m.strip() for m in models.split(",") if m.strip()) if models is not None else None,
        force=force,
    )
    build_repository(artifacts, out, options)
    typer.echo(f"repository: {out}")


@app.command("check")
def check_command(
    repo: Annotated[Path, typer.Argument(help="Model repository to check.")] = Path("models"),
    artifacts: Annotated[
        Optional[Path],
        typer.Option(help="Artifacts directory to check hashes and the plan profile against "
                          "(default: build/ when it has a manifest)."),
    ] = None,
    triton_release: Annotated[
        Optional[str], typer.Option(help="Triton container release YY.MM that will serve the plan.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
) -> None:
    """Lint the repository: what would make Triton refuse or misbehave. Exits 1 on any error."""
    from tritonize.repository_builder import check_repository

    if artifacts is None and (Path("build") / "manifest.json").is_file():
        artifacts = Path("build")
    findings = check_repository(repo, artifacts, triton_release)
    errors = [f for f in findings if f.severity == "error"]
    if as_json:
        typer.echo(json.dumps({"repository": str(repo), "artifacts": str(artifacts) if artifacts else None,
                               "errors": len(errors), "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        for f in findings:
            typer.echo(f"{f.severity}: {f.model}: {f.message} -> fix: {f.fix}")
        against = f" against {artifacts}/manifest.json" if artifacts else " (no manifest: hashes and plan profile not checked)"
        typer.echo(f"{repo}: {len(errors)} error(s), {len(findings) - len(errors)} warning(s){against}")
    if errors:
        raise typer.Exit(1)
