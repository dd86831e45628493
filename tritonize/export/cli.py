"""`tritonize export`: options in, library call out."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer


class Format(str, Enum):
    torchscript = "torchscript"
    onnx = "onnx"
    all = "all"


def export_command(
    format: Annotated[Format, typer.Option("--format", help="Which artifacts to export.")] = Format.all,
    arch: Annotated[str, typer.Option(help="A torchvision classification model name.")] = "wide_resnet101_2",
    weights: Annotated[
        Optional[str],
        typer.Option(help="torchvision weights name (default: the arch's DEFAULT pretrained weights), "
                          "`none` for random init, or a path to a local state_dict checkpoint."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Artifacts directory.")] = Path("build"),
    opset: Annotated[int, typer.Option(help="ONNX opset (>= 18 uses the dynamo exporter, lower the legacy one).")] = 18,
    simplify: Annotated[bool, typer.Option("--simplify/--no-simplify", help="Simplify the ONNX graph with onnxsim.")] = True,
    max_batch: Annotated[int, typer.Option(help="Largest batch the artifacts are verified at.")] = 32,
    force: Annotated[bool, typer.Option(help="Overwrite existing artifacts, even up-to-date ones.")] = False,
) -> None:
    """Export a torchvision classifier to TorchScript and ONNX (dynamic batch), verified against PyTorch."""
    from tritonize.export import ExportOptions, export_artifacts
    from tritonize.spec import resolve_spec

    formats = ("torchscript", "onnx") if format is Format.all else (format.value,)
    options = ExportOptions(formats=formats, opset=opset, simplify=simplify, max_batch=max_batch, force=force)
    spec = resolve_spec(arch, weights)
    export_artifacts(spec, out, options)
    typer.echo(f"manifest: {out / 'manifest.json'}")
