"""`tritonize tools get-perf-analyzer`: options in, library call out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import Force

app = typer.Typer(no_args_is_help=True, help="Get the external tools tritonize uses when present (perf_analyzer).")


@app.command("get-perf-analyzer")
def get_perf_analyzer_command(
    home: Annotated[Optional[Path], typer.Option(
        "--home", help="Tools directory (default: $TRITONIZE_TOOLS, else ~/.cache/tritonize/tools); "
                       "`client perf` and `tune` look there after PATH.", show_default=False)] = None,
    force: Force = False,
) -> None:
    """Fetch Triton's perf_analyzer: the binary from the tritonclient 2.51.0 wheel, libcudart from the
    nvidia-cuda-runtime-cu12 wheel (no GPU needed), libb64 from the system or the Debian package libb64-0d."""
    from tritonize.tools.perf_analyzer import fetch

    found = fetch(home, force)
    typer.echo(str(found.path))
