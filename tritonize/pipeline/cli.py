"""`tritonize build`: options in, the pipeline out, a summary table at the end."""

from __future__ import annotations

import typer

from tritonize.options import (
    DEFAULT_ARTIFACTS,
    DEFAULT_REPOSITORY,
    Antialias,
    Arch,
    Artifacts,
    CalibImages,
    ChannelOrder,
    Crop,
    CropOffset,
    Force,
    Instances,
    Interpolation,
    Kind,
    Labels,
    Layout,
    MaxBatch,
    Mean,
    MinBatch,
    OptBatch,
    PixelScale,
    Precision,
    PrecisionOption,
    RepositoryArgument,
    Resize,
    Std,
    TritonRelease,
    Weights,
    contract_changes,
)
from tritonize.spec import DEFAULT_ARCH


def build_command(
    arch: Arch = DEFAULT_ARCH,
    weights: Weights = None,
    labels: Labels = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    min_batch: MinBatch = 1,
    opt_batch: OptBatch = 16,
    max_batch: MaxBatch = 32,
    precision: PrecisionOption = Precision.fp16,
    calib_images: CalibImages = None,
    triton_release: TritonRelease = None,
    kind: Kind = "auto",
    instances: Instances = 1,
    force: Force = False,
    resize: Resize = None,
    crop: Crop = None,
    mean: Mean = None,
    std: Std = None,
    interpolation: Interpolation = None,
    antialias: Antialias = None,
    channel_order: ChannelOrder = None,
    layout: Layout = None,
    pixel_scale: PixelScale = None,
    crop_offset: CropOffset = None,
) -> None:
    """Export -> convert -> repo build -> repo check in one go; finished stages are skipped. --max-batch is the
    TensorRT profile max, the export's verified max and the repository's max_batch_size."""
    from tritonize import api
    from tritonize.console import table
    from tritonize.pipeline.stages import summary_rows

    report = api.build(arch, weights=weights, labels=labels, artifacts=artifacts, repository=repository,
                       min_batch=min_batch, opt_batch=opt_batch, max_batch=max_batch, precision=precision.value,
                       calib_images=calib_images, triton_release=triton_release, kind=kind, instances=instances,
                       force=force, preprocessing=contract_changes(resize, crop, mean, std, interpolation, antialias,
                                                                   channel_order, layout, pixel_scale, crop_offset))
    typer.echo("\nStages")
    typer.echo(table(("stage", "status", "seconds", "detail"),
                     [(t.result.stage, t.result.status.value, f"{t.seconds:.1f}", t.result.detail) for t in report.stages]))
    typer.echo("\nArtifacts")
    typer.echo(table(("artifact", "file", "size", "verification", "status"), summary_rows(artifacts)))
    typer.echo(f"\nrepository: {repository}/   manifest: {artifacts / 'manifest.json'}")
