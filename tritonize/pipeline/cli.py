"""`tritonize build`: options in, the pipeline out, a summary table at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import (
    DEFAULT_ARTIFACTS, DEFAULT_REPOSITORY, Arch, Artifacts, Force, OldOut, Repository, TritonRelease, Weights, renamed,
)
from tritonize.spec import DEFAULT_ARCH


def build_command(
    arch: Arch = DEFAULT_ARCH,
    weights: Weights = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    repository: Repository = DEFAULT_REPOSITORY,
    out: OldOut = None,
    min_batch: Annotated[int, typer.Option("--min", help="TensorRT profile: smallest batch.")] = 1,
    opt_batch: Annotated[int, typer.Option("--opt", help="TensorRT profile: batch tuned for.")] = 16,
    max_batch: Annotated[int, typer.Option("--max", help="TensorRT profile max, the export's verified max and the repository's max_batch_size.")] = 32,
    precision: Annotated[str, typer.Option(help="TensorRT precision: fp32, fp16 (mixed) or int8 (needs --calib-images).")] = "fp16",
    calib_images: Annotated[Optional[Path], typer.Option(help="Folder of real images for INT8 calibration.")] = None,
    triton_release: TritonRelease = None,
    kind: Annotated[str, typer.Option(help="Instance kind in config.pbtxt: auto, gpu or cpu.")] = "auto",
    instances: Annotated[int, typer.Option(help="Instances per model.")] = 1,
    force: Force = False,
) -> None:
    """Export -> convert -> repo build -> repo check in one go; finished stages are skipped."""
    from tritonize.console import table
    from tritonize.pipeline.stages import BuildOptions, build_all, summary_rows

    repository = renamed(repository, out, "--out", "--repository")
    options = BuildOptions(arch=arch, weights=weights, artifacts=artifacts, repository=repository, min_batch=min_batch,
                           opt_batch=opt_batch, max_batch=max_batch, precision=precision, triton_release=triton_release,
                           calib_images=calib_images, kind=kind, instances=instances, force=force)
    report = build_all(options)
    typer.echo("\nStages")
    typer.echo(table(("stage", "status", "seconds", "detail"),
                     [(t.result.stage, t.result.status.value, f"{t.seconds:.1f}", t.result.detail) for t in report.stages]))
    typer.echo("\nArtifacts")
    typer.echo(table(("artifact", "file", "size", "verification", "status"), summary_rows(artifacts)))
    typer.echo(f"\nrepository: {repository}/   manifest: {artifacts / 'manifest.json'}")
