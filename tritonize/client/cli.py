"""`tritonize client classify|compare|perf`: options in, library calls out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from tritonize.client.connection import DEFAULT_URL
from tritonize.errors import TritonizeError
from tritonize.images import DEFAULT_MAX_PIXELS
from tritonize.model_repository import DEFAULT_MODEL
from tritonize.options import (
    EXIT_GATE,
    EXIT_USAGE,
    AsJson,
    Batch,
    Concurrency,
    ControlKeyFile,
    Duration,
    LoadGenerator,
    LoadGeneratorOption,
    MaxPixels,
    Model,
    Models,
    OutputDir,
    Preprocess,
    Timeout,
    TlsCa,
    Url,
    int_items,
    items,
)

app = typer.Typer(no_args_is_help=True, help="gRPC client: classify, compare backends, perf sweeps.")

Images = Annotated[List[Path], typer.Argument(help="Image files (JPEG, PNG, ... any Pillow format and mode).", show_default=False)]


def _show_failures(failures: list[str]) -> None:
    for line in failures:
        typer.secho(f"skipped: {line}", err=True, fg=typer.colors.YELLOW)


def _finish(failures: list[str], total: int, error: str | None) -> None:
    """Exit non-zero when a file was bad or the server failed midway (after the results were shown)."""
    if error:
        raise TritonizeError(f"{error}; the results above are partial")
    if failures:
        raise TritonizeError(f"{len(failures)} of {total} inputs could not be read (listed above); the others were processed")


@app.command("classify")
def classify_command(
    images: Images,
    model: Model = DEFAULT_MODEL,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="How many labels to show per image.")] = 5,
    url: Url = DEFAULT_URL,
    control_key_file: ControlKeyFile = None,
    tls_ca: TlsCa = None,
    as_json: AsJson = False,
    timeout: Timeout = 30.0,
    max_pixels: MaxPixels = DEFAULT_MAX_PIXELS,
    preprocess: Preprocess = None,
) -> None:
    """Top-k labels and probabilities per image, preprocessed by the contract the model's config carries."""
    from tritonize import api

    report = api.client_classify(images, model=model, top_k=top_k, url=url, control_key_file=control_key_file,
                                 tls_ca=tls_ca, timeout=timeout, max_pixels=max_pixels, preprocess=preprocess)
    if report.warning:
        typer.secho(f"warning: {report.warning}", err=True, fg=typer.colors.YELLOW)
    _show_failures(report.failures)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.to_text())
    _finish(report.failures, len(images), report.error)


@app.command("compare")
def compare_command(
    images: Images,
    models: Models = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=1000, help="Rounds over all images, for the latency percentiles.")] = 3,
    min_top1_agreement: Annotated[
        Optional[float],
        typer.Option("--min-top1-agreement", min=0.0, max=1.0, help="Exit non-zero when any pair agrees on top-1 for fewer than this fraction of images (e.g. 1.0)."),
    ] = None,
    url: Url = DEFAULT_URL,
    control_key_file: ControlKeyFile = None,
    tls_ca: TlsCa = None,
    as_json: AsJson = False,
    timeout: Timeout = 30.0,
    max_pixels: MaxPixels = DEFAULT_MAX_PIXELS,
    preprocess_paths: Annotated[Optional[str], typer.Option(
        "--preprocess-paths", help="Preprocessing paths to compare, comma-separated (client,server,uint8): every model "
                                   "along each. Default: server when the repository has the ensembles, else client.",
        show_default=False)] = None,
) -> None:
    """Send the same images to several models, or one model along several preprocessing paths, and compare
    logits, top-1/top-5, KL and latency. --models default: every READY classifier that takes the FP32 tensor
    (every classifier model of the repository, not its ensembles)."""
    from tritonize import api

    report = api.client_compare(images, models=models, repeat=repeat, min_top1_agreement=min_top1_agreement, url=url,
                                control_key_file=control_key_file, tls_ca=tls_ca, timeout=timeout,
                                max_pixels=max_pixels, preprocess_paths=preprocess_paths)
    _show_failures(report.failures)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.to_text())
    _finish(report.failures, len(images), report.error)
    if not report.passed:
        worst = min(p["top1_agreement"] for p in report.pairs)
        raise TritonizeError(f"top-1 agreement {worst:.1%} is below --min-top1-agreement {min_top1_agreement:.1%}", exit_code=EXIT_GATE)


@app.command("perf")
def perf_command(
    models: Models = DEFAULT_MODEL,
    concurrency: Concurrency = "1,2,4,8,16",
    batch: Batch = 1,
    requests: Annotated[Optional[int], typer.Option("--requests", min=1, help="Measured requests per level, exactly (instead of --duration).")] = None,
    duration: Duration = 5.0,
    warmup_requests: Annotated[int, typer.Option("--warmup-requests", min=0, help="Unmeasured warm-up requests before each level (per worker with the built-in load generator).")] = 4,
    shared_memory: Annotated[str, typer.Option("--shared-memory", help="`none`, or `system`: tensors through Triton's system shared memory (local server only).")] = "none",
    output_dir: OutputDir = Path("perf"),
    url: Url = DEFAULT_URL,
    control_key_file: ControlKeyFile = None,
    tls_ca: TlsCa = None,
    as_json: AsJson = False,
    timeout: Timeout = 60.0,
    preprocess: Preprocess = None,
    image: Annotated[Optional[Path], typer.Option("--image", help="The image every request carries (default: matplotlib's sample photo).", show_default=False)] = None,
    load_generator: LoadGeneratorOption = LoadGenerator.auto,
    stability: Annotated[float, typer.Option("--stability", help="perf_analyzer's -s: how far (%) its last three windows may differ; its default 10 is rarely met on a busy machine, and then it reports nothing.")] = 100.0,
    stop_on_error: Annotated[bool, typer.Option("--stop-on-error", help="End the sweep at the first level whose requests fail. Without it, such a level is reported with its successes, its failures and the first error, and the sweep goes on (it ends when the server is gone).")] = False,
) -> None:
    """Throughput and latency percentiles per concurrency level, with the server-side time split. Several --models
    go in one plot. --output-dir gets <model>.csv (perf_analyzer columns), latency_vs_throughput.png and perf.json."""
    from tritonize.client.connection import Connection
    from tritonize.client.perf import PerfInterrupted, PerfOptions, run_perf, write_outputs

    levels = int_items(concurrency, "--concurrency")
    names = items(models, "--models")
    if not names:
        raise TritonizeError("--models needs at least one model name", EXIT_USAGE)
    options = PerfOptions(concurrency=levels, batch=batch, requests=requests, duration=None if requests else duration,
                          warmup=warmup_requests, timeout=timeout, shared_memory=shared_memory.lower(), preprocess=preprocess,
                          image=str(image) if image else None, engine=load_generator.value, stability=stability,
                          stop_on_error=stop_on_error)
    if options.engine == "perf_analyzer":
        from tritonize.tools.perf_analyzer import require

        require()  # before any connection: a missing tool is the first thing to say
    error = None
    with Connection(url, timeout, key_file=control_key_file, tls_ca=tls_ca) as connection:
        try:
            report = run_perf(connection, names, options, on_level=_show_level)
        except PerfInterrupted as e:
            report, error = e.report, str(e)
    written = write_outputs(report, output_dir)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.to_text())
    typer.echo("wrote " + ", ".join(str(p) for p in written), err=True)
    if error:
        raise TritonizeError(f"{error}; the levels measured until then were kept in {output_dir}")
    if report.failed_levels:
        raise TritonizeError(f"requests failed in {len(report.failed_levels)} of {len(report.levels)} levels (listed "
                             f"above, with their successes, in {output_dir / 'perf.json'}); the other levels are complete")


def _show_level(r) -> None:
    if r.failures:
        typer.echo(f"  {r.model} ({r.path}) concurrency {r.concurrency}: {r.requests} requests succeeded, {r.failures} failed "
                   f"({r.error})", err=True)
    else:
        typer.echo(f"  {r.model} ({r.path}) concurrency {r.concurrency}: {r.throughput:.1f} infer/s, p50 {r.latency['p50_ms']:.2f} ms",
                   err=True)
