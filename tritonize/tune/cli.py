"""`tritonize tune`: options in, library call out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.model_repository import DEFAULT_MODEL
from tritonize.options import (
    DEFAULT_REPOSITORY,
    AsJson,
    Batch,
    ConfigName,
    ControlKeyFile,
    Duration,
    Force,
    LoadGenerator,
    LoadGeneratorOption,
    Model,
    OutputDir,
    RepositoryArgument,
    TlsCa,
    Url,
    int_items,
    items,
)


def _preferred_sets(text: str | None) -> tuple[tuple[int, ...], ...] | None:
    """"none,4,8+16" -> ((), (4,), (8, 16)): one comma list whose items are sets written with `+`."""
    if text is None:
        return None
    return items(text, "--try-preferred", lambda item: () if item == "none" else tuple(int(v) for v in item.split("+")),
                 "none,4,8,4+8+16+32")


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    return None if text is None else int_items(text, flag)


def tune_command(
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    model: Model = DEFAULT_MODEL,
    p99_ms: Annotated[float, typer.Option("--p99-ms", help="Latency budget: the winner is the highest throughput whose "
                                                           "p99 stays within it.", show_default=False)] = ...,
    budget_minutes: Annotated[float, typer.Option("--budget-minutes", help="Stop measuring after this long; the "
                                                                           "same command goes on from there.")] = 10.0,
    config_name: ConfigName = "tuned",
    output_dir: OutputDir = Path("tune"),
    try_instances: Annotated[Optional[str], typer.Option("--try-instances", help="Instance counts to try, comma-separated (default 1,2 and up to 4 with the cores).", show_default=False)] = None,
    try_threads: Annotated[Optional[str], typer.Option("--try-threads", help="Intra-op threads per CPU instance to try, comma-separated (default as --try-instances).", show_default=False)] = None,
    try_queue_delay_us: Annotated[Optional[str], typer.Option("--try-queue-delay-us", help="max_queue_delay_microseconds values to try, comma-separated (default 0,100,1000,5000).", show_default=False)] = None,
    try_preferred: Annotated[Optional[str], typer.Option("--try-preferred", help="Preferred batch size sets to try, comma-separated, each set's sizes joined by + (default none,4,8,4+8+16+32).", show_default=False)] = None,
    try_concurrency: Annotated[Optional[str], typer.Option("--try-concurrency", help="Client concurrency levels each config is swept over, comma-separated (default 1,2,4,8,16).", show_default=False)] = None,
    batch: Batch = 1,
    duration: Duration = 3.0,
    load_generator: LoadGeneratorOption = LoadGenerator.auto,
    url: Url = None,
    control_key_file: ControlKeyFile = None,
    tls_ca: TlsCa = None,
    as_json: AsJson = False,
    force: Force = False,
) -> None:
    """Search instance count, threads per instance, queue delay, preferred batch size and client concurrency for
    the highest throughput within --p99-ms, measured on the server (perf_analyzer when found); write the winner
    as configs/NAME.pbtxt (config.pbtxt is never touched) and a report (<model>/trials.csv, search.png and
    report.json in --output-dir).

    --url: tune on this running server (explicit model control, serving REPOSITORY) instead of starting the
    embedded one; its own config is loaded back at the end. --force: start afresh (ignore earlier trials) and
    replace a configs/NAME.pbtxt tune did not write."""
    from tritonize.tune.report import to_dict, to_text, write_report
    from tritonize.tune.run import tune
    from tritonize.tune.search import Space, TuneOptions, default_space

    space = None
    given = {"instances": _ints(try_instances, "--try-instances"), "threads": _ints(try_threads, "--try-threads"),
             "queue_delay_us": _ints(try_queue_delay_us, "--try-queue-delay-us"),
             "preferred": _preferred_sets(try_preferred), "concurrency": _ints(try_concurrency, "--try-concurrency")}
    if any(v is not None for v in given.values()):
        defaults = default_space(len(os.sched_getaffinity(0)))
        space = Space(**{k: v if v is not None else getattr(defaults, k) for k, v in given.items()})
    options = TuneOptions(model=model, p99_ms=p99_ms, budget_minutes=budget_minutes, space=space, batch=batch,
                          duration=duration, engine=load_generator.value, config_name=config_name, report_dir=output_dir,
                          force=force)
    result, trials = tune(repository, options, url, key_file=control_key_file, tls_ca=tls_ca)
    written = write_report(result, trials, output_dir / model)
    typer.echo(json.dumps(to_dict(result), indent=2) if as_json else to_text(result))
    typer.echo("wrote " + ", ".join(str(p) for p in [*written, *([result.written] if result.written else [])]), err=True)
