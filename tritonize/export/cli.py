"""`tritonize export`: options in, library call out."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from tritonize.options import DEFAULT_ARTIFACTS, Arch, Artifacts, Force, MaxBatch, Weights
from tritonize.spec import DEFAULT_ARCH


class Format(str, Enum):
    torchscript = "torchscript"
    onnx = "onnx"
    all = "all"


def export_command(
    format: Annotated[Format, typer.Option("--format", help="Which artifacts to export.")] = Format.all,
    arch: Arch = DEFAULT_ARCH,
    weights: Weights = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    opset: Annotated[int, typer.Option(help="ONNX opset (>= 18 uses the dynamo exporter, lower the legacy one).")] = 18,
    simplify: Annotated[bool, typer.Option("--simplify/--no-simplify", help="Simplify the ONNX graph with onnxsim.")] = True,
    max_batch: MaxBatch = 32,
    force: Force = False,
) -> None:
    """Export a torchvision classifier to TorchScript and ONNX (dynamic batch), verified against PyTorch."""
    from tritonize.export import ExportOptions, export_artifacts
    from tritonize.spec import resolve_spec

    formats = ("torchscript", "onnx") if format is Format.all else (format.value,)
    options = ExportOptions(formats=formats, opset=opset, simplify=simplify, max_batch=max_batch, force=force)
    export_artifacts(resolve_spec(arch, weights), artifacts, options)
    typer.echo(f"manifest: {artifacts / 'manifest.json'}")
