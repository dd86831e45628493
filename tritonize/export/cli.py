"""`tritonize export`: options in, library call out."""

from __future__ import annotations

from typing import Annotated

import typer

from tritonize.options import (
    DEFAULT_ARTIFACTS,
    Antialias,
    Arch,
    Artifacts,
    ChannelOrder,
    Crop,
    CropOffset,
    Force,
    Interpolation,
    Labels,
    Layout,
    MaxBatch,
    Mean,
    PixelScale,
    Resize,
    Std,
    Weights,
    contract_changes,
    items,
)
from tritonize.spec import DEFAULT_ARCH


def _formats(value: str) -> tuple[str, ...]:
    """`all` or a comma-separated list of the export formats; anything else is a usage error."""
    from tritonize.export.exporter import FORMATS

    formats = FORMATS if value.strip() == "all" else items(value, "--format")
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise typer.BadParameter(f"{', '.join(unknown) or repr(value)}: choose from {', '.join(FORMATS)}, or all",
                                 param_hint="'--format'")
    return formats


def export_command(
    format: Annotated[str, typer.Option("--format", help="Which artifacts to export, comma-separated: torchscript, "
                                                         "onnx, exported_program (a torch.export .pt2 for the "
                                                         "torch-tensorrt builder), or all.")] = "torchscript,onnx",
    arch: Arch = DEFAULT_ARCH,
    weights: Weights = None,
    labels: Labels = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    opset: Annotated[int, typer.Option(help="ONNX opset (>= 18 uses the dynamo exporter, lower the legacy one).")] = 18,
    simplify: Annotated[bool, typer.Option("--simplify/--no-simplify", help="Simplify the ONNX graph with onnxsim.")] = True,
    max_batch: MaxBatch = 32,
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
    """Export a classifier (torchvision, timm, Hugging Face, your own code) to TorchScript and ONNX (and torch.export's
    .pt2 when asked), with a dynamic batch, verified against PyTorch."""
    from tritonize import api

    api.export(arch, weights=weights, labels=labels, artifacts=artifacts, format=_formats(format), opset=opset,
               simplify=simplify, max_batch=max_batch, force=force,
               preprocessing=contract_changes(resize, crop, mean, std, interpolation, antialias, channel_order, layout,
                                              pixel_scale, crop_offset))
    typer.echo(f"manifest: {artifacts / 'manifest.json'}")
