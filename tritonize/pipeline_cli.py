"""`tritonize build`: options in, the pipeline out, a summary table at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def build_command(
    arch: Annotated[str, typer.Option(help="A torchvision classification model name.")] = "wide_resnet101_2",
    weights: Annotated[Optional[str], typer.Option(help="torchvision weights name (default: the arch's DEFAULT), "
                                                        "`none` for random init, or a state_dict path.")] = None,
    artifacts: Annotated[Path, typer.Option(help="Artifacts directory (exports, plans, manifest).")] = Path("build"),
    out: Annotated[Path, typer.Option(help="Model repository directory.")] = Path("models"),
    min_batch: Annotated[int, typer.Option("--min", help="TensorRT profile: smallest batch.")] = 1,
    opt_batch: Annotated[int, typer.Option("--opt", help="TensorRT profile: batch tuned for.")] = 16,
    max_batch: Annotated[int, typer.Option("--max", help="TensorRT profile max, the export's verified max and the repository's max_batch_size.")] = 32,
    precision: Annotated[str, typer.Option(help="TensorRT precision: fp32, fp16 (mixed) or int8 (needs --calib-images).")] = "fp16",
    calib_images: Annotated[Optional[Path], typer.Option(help="Folder of real images for INT8 calibration.")] = None,
    triton_release: Annotated[Optional[str], typer.Option(help="Triton release YY.MM that will serve the plan.")] = None,
    kind: Annotated[str, typer.Option(help="Instance kind in config.pbtxt: auto, gpu or cpu.")] = "auto",
    instances: Annotated[int, typer.Option(help="Instances per model.")] = 1,
    force: Annotated[bool, typer.Option(help="Rebuild every stage, even up-to-date ones.")] = False,
) -> None:
    """Export -> convert -> repo build -> repo check in one go; finished stages are skipped."""
    from tritonize.client.text import table
    from tritonize.pipeline import BuildOptions, build_all, summary_rows

    options = BuildOptions(arch=arch, weights=weights, artifacts=artifacts, repository=out, min_batch=min_batch,
                           opt_batch=opt_batch, max_batch=max_batch, precision=precision, triton_release=triton_release,
                           calib_images=calib_images, kind=kind, instances=instances, force=force)
    report = build_all(options)
    typer.echo("\nStages")
    typer.echo(table(("stage", "status", "seconds", "detail"),
                     [(s.stage, s.status, f"{s.seconds:.1f}", s.detail) for s in report.stages]))
    typer.echo("\nArtifacts")
    typer.echo(table(("artifact", "file", "size", "verification", "status"), summary_rows(report)))
    typer.echo(f"\nrepository: {out}/   manifest: {artifacts / 'manifest.json'}")
