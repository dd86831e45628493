"""`tritonize tune` as one library call: the base config, the server, the search, the winner's config, the report."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.access import ControlKey
from tritonize.client.connection import Connection
from tritonize.control.models import ModelControl
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path
from tritonize.model_repository import CONFIG_NAME, parse_config
from tritonize.progress import say
from tritonize.serve.embedded import EmbeddedServer, for_bundled_core, resolve_config_name
from tritonize.serve.repository import validate_repository
from tritonize.tools import perf_analyzer
from tritonize.tune.search import (
    CONFIRM_ROUNDS,
    OVERHEAD_S,
    Candidate,
    Measurer,
    Search,
    TrialsFile,
    TuneOptions,
    baseline,
    default_space,
    fingerprint,
    median_trial,
)

TUNED_MARK = "tune.p99_budget_ms"  # the parameter that says tune wrote a config (and may replace it)
RELOAD_S = 5.0  # what a config reload costs, for the time left to the confirmation


@dataclass
class TuneResult:
    model: str
    options: TuneOptions
    engine: str
    base_file: Path
    default: Candidate
    winner: Candidate
    scores: dict
    confirm: dict = field(default_factory=dict)  # "default"/"winner" -> median of the confirmation runs
    stopped: str = ""
    verdict: str = ""  # how the winner was decided, when the back-to-back comparison does not say it (Search.verdict)
    written: Path | None = None
    measured_now: int = 0  # trials measured by this run (the others came from trials.csv)
    seconds: float = 0.0


def tune(repository: Path, options: TuneOptions, url: str | None = None, *, key_file: Path | None = None,
         tls_ca: Path | None = None) -> tuple[TuneResult, list]:
    """Search, write configs/<name>.pbtxt for the winner, return the result and every trial. `url`: a running
    server instead of the embedded one (`key_file`, `tls_ca` as for every client of it)."""
    started = time.monotonic()
    repository = Path(repository)
    validate_repository(repository, (options.model,))
    target = repository / options.model / "configs" / f"{options.config_name}.pbtxt"
    _may_write(target, options.force)
    reserve = 2 * CONFIRM_ROUNDS * (options.duration + OVERHEAD_S + RELOAD_S)
    if options.budget_minutes * 60 < reserve + options.duration + OVERHEAD_S:
        raise TritonizeError(f"--budget-minutes {options.budget_minutes:g} leaves no time to search: the final back-to-back "
                             f"comparison alone takes about {reserve:.0f} s with --duration {options.duration:g}")
    config_name = resolve_config_name(repository, None) if url is None else None
    base_file = _base_file(repository, options.model, config_name)
    base = parse_config(base_file)
    if base.platform == "ensemble" or base.backend == "python" or base.max_batch_size < 1:
        raise TritonizeError(f"{options.model} is not a batching classifier model (ensemble, Python model or "
                             "max_batch_size 0): tune the model its ensemble runs, e.g. onnx_model")
    cores = len(os.sched_getaffinity(0))
    space = options.space or default_space(cores)
    tool = None if options.engine == "builtin" else perf_analyzer.find()
    if options.engine == "perf_analyzer" and tool is None:
        tool = perf_analyzer.require()
    engine = "perf_analyzer" if tool else "builtin"
    say(f"tune {options.model}: highest throughput with p99 <= {options.p99_ms:g} ms, budget {options.budget_minutes:g} min, "
        f"measured by {tool or 'the built-in load generator'}; base config {base_file}")
    trials_file = TrialsFile(Path(options.report_dir) / options.model,
                             fingerprint(_model_file(repository, options.model, base), base, options, engine), options.force)
    measured: list = []

    def on_trial(trial) -> None:
        trials_file.append(trial)
        measured.append(trial)
        say(f"    c{trial.concurrency}: {trial.throughput:.1f} infer/s, p99 {trial.p99_ms:.1f} ms")

    with contextlib.ExitStack() as stack:
        stack.callback(trials_file.close)
        connections: list[Connection] = []

        def connect() -> Connection:
            """The server, started (or reached) when the first measurement needs it: a search replayed from
            trials.csv needs none."""
            if not connections:
                grpc_url = stack.enter_context(_server(repository, options.model, config_name, url))
                connections.append(stack.enter_context(Connection(grpc_url, timeout=600, key_file=key_file, tls_ca=tls_ca)))
                if url is not None:  # give the running server its own config back at the end
                    stack.callback(ModelControl(connections[0]).load, options.model)
            return connections[0]

        default = baseline(base, cores)
        # Trial configs go to the server as it serves the model: the embedded one's Triton takes a platform younger
        # than itself through its own Python-based backend (serve/embedded.py); a given server takes the file's.
        served = base if url is not None else for_bundled_core(pb.ModelConfig.FromString(base.SerializeToString()))
        search = Search(options, base, default, space, Measurer(connect, options, served, engine, on_trial),
                        deadline=started + options.budget_minutes * 60, reserve=reserve)
        search.cached = {(t.phase, t.config, t.concurrency, t.round): t for t in trials_file.earlier}
        winner = search.run()
        confirm = {name: median_trial(trials) for name, trials in search.confirm(winner).items() if trials}
    result = TuneResult(options.model, options, str(tool) if tool else "builtin", base_file, default, winner,
                        dict(search.scores), confirm, search.stopped, search.verdict(winner), measured_now=len(measured))
    if search.scores.get(winner.key, (0, 0))[1]:
        result.written = write_winner(target, base, winner, result)
    elif winner.key not in search.scores:
        say("tune: the budget ended before the first config was measured; nothing written (raise --budget-minutes)")
    else:
        say(f"tune: no config measured kept p99 within {options.p99_ms:g} ms; nothing written (raise --p99-ms)")
    result.seconds = time.monotonic() - started
    return result, search.trials


def _base_file(repository: Path, model: str, config_name: str | None) -> Path:
    """The config the server serves: configs/<name>.pbtxt for `serve`'s --model-config-name, else config.pbtxt."""
    variant = repository / model / "configs" / f"{config_name}.pbtxt"
    return variant if config_name and variant.is_file() else repository / model / CONFIG_NAME


def _model_file(repository: Path, model: str, base: pb.ModelConfig) -> Path:
    versions = sorted((p for p in (repository / model).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    files = sorted((p for p in versions[-1].iterdir() if p.is_file()), key=lambda p: p.stat().st_size) if versions else []
    if not files:
        raise TritonizeError(f"{repository / model} has no model file in a version directory")
    named = versions[-1] / base.default_model_filename if base.default_model_filename else None
    return named if named and named.is_file() else files[-1]


def _may_write(target: Path, force: bool) -> None:
    """Refuse to replace a configs/<name>.pbtxt that tune did not write (unless --force)."""
    if target.is_file() and not force:
        existing = parse_config(target)
        if TUNED_MARK not in existing.parameters:
            raise TritonizeError(f"{target} exists and was not written by tune; choose another --config-name or add --force")


@contextlib.contextmanager
def _server(repository: Path, model: str, config_name: str | None, url: str | None):
    """The gRPC address to tune on: the given server, or an embedded one loading only `model`."""
    if url is not None:
        yield url
        return
    # Its control APIs restricted like `tritonize serve`'s: the Connections below find the key by themselves.
    server = EmbeddedServer(repository, model_config_name=config_name or "config", models=(model,),
                            control_key=ControlKey.generate())
    with server as info:
        yield info.grpc_url


def write_winner(target: Path, base: pb.ModelConfig, winner: Candidate, result: TuneResult) -> Path:
    """configs/<name>.pbtxt: the base config with the winner's fields, and what tune measured as parameters."""
    cfg = pb.ModelConfig()
    cfg.CopyFrom(base)
    tuned = winner.apply(base)
    cfg.ClearField("instance_group")
    cfg.instance_group.extend(tuned.instance_group)
    cfg.dynamic_batching.CopyFrom(tuned.dynamic_batching)
    for key, value in tuned.parameters.items():
        cfg.parameters[key].CopyFrom(value)
    throughput, concurrency = result.scores[winner.key]
    notes = {TUNED_MARK: f"{result.options.p99_ms:g}", "tune.client_concurrency": str(concurrency),
             "tune.throughput": f"{throughput:.1f}", "tune.engine": result.engine,
             "tune.measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for key, value in notes.items():
        cfg.parameters[key].string_value = value
    header = (f"Written by `tritonize tune` from {result.base_file.name}: {winner.describe()}.\n"
              f"Best throughput within p99 {result.options.p99_ms:g} ms: {throughput:.1f} infer/s with {concurrency} "
              f"requests in flight (batch {result.options.batch}).\n"
              f"Serve it with `tritonize serve --config-name {target.stem}`; config.pbtxt is unchanged.")
    text = "".join(f"# {line}\n" for line in header.splitlines()) + text_format.MessageToString(cfg)
    target.parent.mkdir(exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.write_text(text)
    parse_config(target)  # what Triton will parse
    say(f"✓ wrote {target}")
    return target
