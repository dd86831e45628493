"""Command-line options that several commands share, declared once.

One name per concept: `--artifacts DIR` is always the artifacts directory (exports, plans,
manifest.json; default build/), `--repository DIR` (or the positional argument) the Triton model
repository (default models/). Earlier releases spelled them `--out` in some commands; those
spellings still work, hidden from --help, and say which name replaces them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, TypeVar

import typer

from tritonize.progress import say

DEFAULT_ARTIFACTS = Path("build")
DEFAULT_REPOSITORY = Path("models")

Artifacts = Annotated[Path, typer.Option("--artifacts", help="Artifacts directory: exports, plans and manifest.json.")]
Repository = Annotated[Path, typer.Option("--repository", help="Triton model repository directory.")]
RepositoryArgument = Annotated[Path, typer.Argument(help="Triton model repository directory.")]
OldOut = Annotated[Optional[Path], typer.Option("--out", hidden=True, help="Old spelling; see the command's help.")]

Arch = Annotated[str, typer.Option(help="A torchvision classification model name.")]
Weights = Annotated[
    Optional[str],
    typer.Option(help="torchvision weights name (default: the arch's DEFAULT pretrained weights), "
                      "`none` for random init, or a path to a local state_dict checkpoint."),
]
MaxBatch = Annotated[int, typer.Option("--max-batch", help="Largest batch the artifacts are verified at and served with.")]
Force = Annotated[bool, typer.Option("--force", help="Redo the work even when the outputs are up to date.")]
TritonRelease = Annotated[Optional[str], typer.Option("--triton-release", help="Triton container release YY.MM that serves the plan (convert trt also takes `auto`: the release whose TensorRT is this machine's).")]

GpuCC = Annotated[Optional[str], typer.Option(
    "--gpu-cc", help="Compute capability MAJOR.MINOR of the GPU that will serve (default: this machine's GPU, when one "
                     "is visible); trt_model's plans are compared with it.", show_default=False)]
Url = Annotated[str, typer.Option("--url", help="Triton gRPC endpoint HOST:PORT (`tritonize serve` listens on localhost:8001).")]
Timeout = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each server call.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
ControlKeyFile = Annotated[Optional[Path], typer.Option(
    "--control-key-file", help="File holding the server's control-API key (the one `tritonize serve` printed), for "
                               "the model repository, statistics and shared memory of a server that restricts them. "
                               "Default: the key in $TRITONIZE_CONTROL_KEY, if set.", show_default=False)]
TlsCa = Annotated[Optional[Path], typer.Option(
    "--tls-ca", help="CA certificate (PEM) that signed the server's gRPC certificate: connect over TLS and verify "
                     "the server with it.", show_default=False)]

Endpoint = Annotated[Optional[str], typer.Option(
    "--endpoint", help="URL of an S3-compatible store (MinIO, Ceph, ...): http://HOST:PORT or https://HOST[:PORT]; "
                       "default: AWS S3.")]
Region = Annotated[Optional[str], typer.Option(
    "--region", help="The store's region (default: AWS_REGION or AWS_DEFAULT_REGION, else us-east-1).")]

T = TypeVar("T")


def renamed(value: T, old_value: T | None, old: str, new: str) -> T:
    """The value of `new`, or of its old spelling `old` when that was given (with a note)."""
    if old_value is None:
        return value
    say(f"note: {old} is the old spelling of {new}; use {new} (the old one goes in a later release)")
    return old_value

