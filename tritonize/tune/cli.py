"""`tritonize tune`: options in, library call out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.errors import TritonizeError
from tritonize.options import DEFAULT_REPOSITORY, AsJson, ControlKeyFile, RepositoryArgument, TlsCa


def _ints(text: str | None, option: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise TritonizeError(f"{option} takes comma-separated integers, got {text!r}") from None


def _preferred(text: str | None) -> tuple[tuple[int, ...], ...] | None:
    """"none;4;8,16" -> ((), (4,), (8, 16))."""
    if text is None:
        return None
    sets = []
    for part in text.split(";"):
        part = part.strip()
        sets.append(() if part in ("none", "") else _ints(part, "--preferred"))
    return tuple(sets)


def tune_command(
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    model: Annotated[str, typer.Option("--model", "-m", help="The model to tune (a classifier such as onnx_model).")] = "onnx_model",
    p99_ms: Annotated[float, typer.Option("--p99-ms", help="Latency budget: the winner is the highest throughput whose "
                                                           "p99 stays within it.", show_default=False)] = ...,
    budget_minutes: Annotated[float, typer.Option("--budget-minutes", help="Stop measuring after this long; the "
                                                                           "same command goes on from there.")] = 10.0,
    config_name: Annotated[str, typer.Option("--config-name", help="Write the winner to <model>/configs/NAME.pbtxt "
                                                                   "(serve it with `tritonize serve --config-name NAME`).")] = "tuned",
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Where <model>/trials.csv, search.png and "
                                                                  "report.json go.")] = Path("tune"),
    instances: Annotated[Optional[str], typer.Option(help="Instance counts to try (default 1,2 and up to 4 with the cores).", show_default=False)] = None,
    threads: Annotated[Optional[str], typer.Option(help="Intra-op threads per CPU instance to try (default as --instances).", show_default=False)] = None,
    queue_delay_us: Annotated[Optional[str], typer.Option(help="max_queue_delay_microseconds values to try (default 0,100,1000,5000).", show_default=False)] = None,
    preferred: Annotated[Optional[str], typer.Option(help="Preferred batch size sets to try, `;`-separated (default none;4;8;4,8,16,32).", show_default=False)] = None,
    concurrency: Annotated[Optional[str], typer.Option(help="Client concurrency levels each config is swept over (default 1,2,4,8,16).", show_default=False)] = None,
    batch: Annotated[int, typer.Option(help="Images per request.")] = 1,
    duration: Annotated[float, typer.Option(help="Measured seconds per trial.")] = 3.0,
    engine: Annotated[str, typer.Option(help="What measures: perf_analyzer, builtin, or auto (perf_analyzer when found).")] = "auto",
    url: Annotated[Optional[str], typer.Option("--url", help="Tune on this running server (gRPC HOST:PORT, explicit model "
                                                             "control, serving REPOSITORY) instead of starting the embedded one; "
                                                             "its own config is loaded back at the end.", show_default=False)] = None,
    control_key_file: ControlKeyFile = None,
    tls_ca: TlsCa = None,
    as_json: AsJson = False,
    force: Annotated[bool, typer.Option("--force", help="Start afresh (ignore earlier trials) and replace a "
                                                        "configs/NAME.pbtxt tune did not write.")] = False,
) -> None:
    """Search instance count, threads per instance, queue delay, preferred batch size and client concurrency for
    the highest throughput within --p99-ms, measured on the server (perf_analyzer when found); write the winner
    as configs/NAME.pbtxt (config.pbtxt is never touched) and a report."""
    from tritonize.tune.report import to_dict, to_text, write_report
    from tritonize.tune.run import tune
    from tritonize.tune.search import Space, TuneOptions, default_space

    space = None
    given = {"instances": _ints(instances, "--instances"), "threads": _ints(threads, "--threads"),
             "queue_delay_us": _ints(queue_delay_us, "--queue-delay-us"), "preferred": _preferred(preferred),
             "concurrency": _ints(concurrency, "--concurrency")}
    if any(v is not None for v in given.values()):
        defaults = default_space(len(os.sched_getaffinity(0)))
        space = Space(**{k: v if v is not None else getattr(defaults, k) for k, v in given.items()})
    options = TuneOptions(model=model, p99_ms=p99_ms, budget_minutes=budget_minutes, space=space, batch=batch,
                          duration=duration, engine=engine, config_name=config_name, report_dir=report_dir, force=force)
    result, trials = tune(repository, options, url, key_file=control_key_file, tls_ca=tls_ca)
    written = write_report(result, trials, report_dir / model)
    typer.echo(json.dumps(to_dict(result), indent=2) if as_json else to_text(result))
    typer.echo("wrote " + ", ".join(str(p) for p in [*written, *([result.written] if result.written else [])]), err=True)
