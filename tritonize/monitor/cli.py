"""`tritonize monitor`: options in, library calls out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import DEFAULT_REPOSITORY, OutputDir, RepositoryArgument, TritonRelease, items

DEFAULT_BUNDLE = Path("monitoring")


def monitor_command(
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    output_dir: OutputDir = DEFAULT_BUNDLE,
    targets: Annotated[Optional[str], typer.Option(
        "--targets", help="Triton metrics endpoints HOST:PORT to scrape, comma-separated "
                          "(default: 127.0.0.1:8002, where `tritonize serve` exports them).", show_default=False)] = None,
    queue_alert_ms: Annotated[float, typer.Option(
        "--queue-alert-ms", help="Alert when a model's requests wait longer than this in the queue, on average over 5 minutes.")] = 100.0,
    triton_release: TritonRelease = None,
    serve: Annotated[bool, typer.Option(
        "--serve", help="Then run a real Prometheus on the bundle here, scraping the running server, until Ctrl-C.")] = False,
    prometheus_port: Annotated[int, typer.Option(
        "--prometheus-port", min=1, max=65535, help="Port of the Prometheus that --serve starts (on 127.0.0.1).")] = 9090,
) -> None:
    """Write a monitoring bundle for a repository's server: prometheus.yml, recording rules and alerts,
    a Grafana dashboard, and compose.yaml (NGC Triton + Prometheus + Grafana for a GPU box), into --output-dir
    (replaced as a whole)."""
    from tritonize.monitor.bundle import DEFAULT_TARGET, BundleOptions, write_bundle
    from tritonize.progress import say

    options = BundleOptions(targets=items(targets, "--targets") or (DEFAULT_TARGET,), queue_alert_ms=queue_alert_ms,
                            triton_release=triton_release)
    written = write_bundle(repository, output_dir, options)
    say(f"wrote {output_dir}/: " + ", ".join(str(p.relative_to(output_dir)) for p in written))
    if serve:
        from tritonize.monitor.watch import watch

        watch(output_dir, prometheus_port)
