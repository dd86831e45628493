"""`tritonize tune`: the serving config with the highest throughput whose p99 latency stays within a budget.

What is searched, on the server the user runs (the embedded engine here, or `--url` for a running one,
e.g. the NGC container on a GPU box): instance count, intra-op threads per instance (CPU instances:
the onnxruntime backend's `intra_op_thread_count`), `max_queue_delay_microseconds`, the preferred
batch size, and the client concurrency. Each candidate config is loaded through Triton's model
repository API with the config in the request (the repository's files are not touched) and swept over
the concurrency levels, low to high, until its p99 exceeds the budget; its score is its best
throughput within the budget. The search is a coordinate descent from the served (default) config:
placement (instances x threads), then queue delay, then preferred batch size, each time keeping a
value only when it beats the best so far by MIN_GAIN, both in the sweeps and when the two are measured
again back to back (throughput drifts between sweeps minutes apart on a shared machine).
Finally the default and the winner, each at its best concurrency, are measured again back to back
(CONFIRM_ROUNDS rounds, order alternating): the comparison at the same budget that the report shows.

Bounded and resumable: every measurement is appended to trials.csv as it finishes; a new run with the
same model file, base config and measurement settings replays the search from those rows (no time
spent) and measures only what is missing, and no measurement starts that would end past the budget.
The budget is spent: the time kept for the final comparison is kept only once a config other than the
default leads (while the default holds, no comparison is needed and the search goes on). When the budget
ends in the middle of a sweep or before a back-to-back check, the best config measured so far within the
p99 budget is the winner, and the report says it was not measured back to back.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.client.connection import Connection
from tritonize.client.perf import LOAD_GENERATORS, UNJUDGED, PerfOptions, run_perf
from tritonize.control.models import ModelControl
from tritonize.errors import TritonizeError
from tritonize.files import sha256_file
from tritonize.progress import say

MIN_GAIN = 0.03  # a candidate replaces the best only when at least 3 % faster
CONFIRM_ROUNDS = 2
SATURATED = 0.9  # stop a sweep once throughput falls below 90 % of its best level (more clients only queue)
OVERHEAD_S = 2.5  # per measurement beyond its measured window: warm-up, tool start, statistics
THREADS_PARAMETER = "intra_op_thread_count"
TRIALS_NAME = "trials.csv"
STATE_NAME = "search.json"


@dataclass(frozen=True)
class Candidate:
    """One server config: the fields tune changes in the base config."""

    instances: int
    threads: int | None  # intra-op threads per instance; None: GPU instances (not set)
    queue_delay_us: int
    preferred: tuple[int, ...]  # preferred_batch_size; () none

    @property
    def key(self) -> str:
        threads = "-" if self.threads is None else self.threads
        return f"i{self.instances}_t{threads}_d{self.queue_delay_us}_p{'-'.join(map(str, self.preferred)) or 'none'}"

    def describe(self) -> str:
        threads = "" if self.threads is None else f" x {self.threads} threads"
        preferred = ",".join(map(str, self.preferred)) or "none"
        return f"{self.instances} instance(s){threads}, queue delay {self.queue_delay_us} us, preferred {preferred}"

    def apply(self, base: pb.ModelConfig) -> pb.ModelConfig:
        """The base config with this candidate's fields; model_warmup dropped (trials warm up with requests)."""
        cfg = pb.ModelConfig()
        cfg.CopyFrom(base)
        kind = base.instance_group[0].kind if base.instance_group else pb.ModelInstanceGroup.KIND_AUTO
        del cfg.instance_group[:]
        cfg.instance_group.add(count=self.instances, kind=kind)
        if self.threads is not None:
            cfg.parameters[THREADS_PARAMETER].string_value = str(self.threads)
        cfg.dynamic_batching.max_queue_delay_microseconds = self.queue_delay_us
        del cfg.dynamic_batching.preferred_batch_size[:]
        cfg.dynamic_batching.preferred_batch_size.extend(self.preferred)
        return cfg


def baseline(base: pb.ModelConfig, cores: int) -> Candidate:
    """The base config as a candidate: its instances, threads (the backend's rule when unset: the cores
    shared by the instances), queue delay and preferred sizes."""
    instances = sum(g.count or 1 for g in base.instance_group) or 1
    gpu = any(g.kind == pb.ModelInstanceGroup.KIND_GPU for g in base.instance_group)
    threads = None
    if not gpu:
        explicit = base.parameters[THREADS_PARAMETER].string_value if THREADS_PARAMETER in base.parameters else ""
        threads = int(explicit) if explicit.isdigit() and int(explicit) > 0 else max(1, cores // instances)
    return Candidate(instances, threads, base.dynamic_batching.max_queue_delay_microseconds,
                     tuple(base.dynamic_batching.preferred_batch_size))


@dataclass(frozen=True)
class Space:
    """The values tried per dimension (the base config's own values are always tried too)."""

    instances: tuple[int, ...]
    threads: tuple[int, ...]
    queue_delay_us: tuple[int, ...]
    preferred: tuple[tuple[int, ...], ...]
    concurrency: tuple[int, ...]

    def __post_init__(self):
        for name in ("instances", "threads", "concurrency"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise TritonizeError(f"--try-{name.replace('_', '-')} needs values >= 1, got {list(values)}")
        if not self.queue_delay_us or min(self.queue_delay_us) < 0:
            raise TritonizeError(f"--try-queue-delay-us needs values >= 0, got {list(self.queue_delay_us)}")
        if any(p and min(p) < 1 for p in self.preferred):
            raise TritonizeError("--try-preferred sizes must be >= 1 (or `none`)")

    def dimensions(self, start: Candidate, max_batch: int) -> list[tuple[str, list[dict]]]:
        """Per dimension, the changes to try (the fields of Candidate they set)."""
        threads = self.threads if start.threads is not None else (None,)
        return [
            ("placement", [{"instances": i, "threads": t} for i in self.instances for t in threads]),
            ("queue delay", [{"queue_delay_us": d} for d in self.queue_delay_us]),
            ("preferred batch", [{"preferred": tuple(s for s in p if s <= max_batch)} for p in self.preferred]),
        ]


@dataclass
class Trial:
    """One measurement: a candidate config at one client concurrency."""

    phase: str  # "search" (sweeps) | "check" (a challenger and the best, back to back) | "confirm" (the end)
    config: str  # Candidate.key
    instances: int
    threads: int | None
    queue_delay_us: int
    preferred: str  # "4-8" | "none"
    concurrency: int
    round: int
    throughput: float  # inferences/s
    p50_ms: float
    p90_ms: float
    p99_ms: float
    avg_ms: float
    queue_ms: float
    compute_infer_ms: float
    server_batch: float
    requests: int
    engine: str
    measured: str

    COLUMNS = ("phase", "config", "instances", "threads", "queue_delay_us", "preferred", "concurrency", "round",
               "throughput", "p50_ms", "p90_ms", "p99_ms", "avg_ms", "queue_ms", "compute_infer_ms", "server_batch",
               "requests", "engine", "measured")

    @classmethod
    def from_row(cls, row: dict) -> "Trial":
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for name in cls.COLUMNS:
            text = row[name]
            kind = types[name]
            if name == "threads":
                values[name] = int(text) if text else None
            elif kind == "int":
                values[name] = int(text)
            elif kind == "float":
                values[name] = float(text)
            else:
                values[name] = text
        return cls(**values)

    def row(self) -> dict:
        data = asdict(self)
        data["threads"] = "" if self.threads is None else self.threads
        return data


@dataclass(frozen=True)
class TuneOptions:
    model: str
    p99_ms: float
    budget_minutes: float = 10.0
    space: Space | None = None  # None: default_space()
    batch: int = 1  # images per request
    duration: float = 3.0  # measured seconds per trial
    engine: str = "auto"
    config_name: str = "tuned"
    report_dir: Path = Path("tune")
    force: bool = False  # overwrite a configs/<config_name>.pbtxt tune did not write; discard earlier trials

    def __post_init__(self):
        if self.p99_ms <= 0:
            raise TritonizeError(f"--p99-ms must be a positive number of milliseconds, got {self.p99_ms}")
        if not 0 < self.budget_minutes <= 24 * 60:
            raise TritonizeError(f"--budget-minutes must be between 0 and 1440, got {self.budget_minutes}")
        if not 0 < self.duration <= 600:
            raise TritonizeError(f"--duration must be between 0 and 600 seconds, got {self.duration}")
        if self.batch < 1:
            raise TritonizeError(f"--batch must be >= 1, got {self.batch}")
        if self.engine not in LOAD_GENERATORS:
            raise TritonizeError(f"--load-generator must be one of {', '.join(LOAD_GENERATORS)}, got {self.engine!r}")
        if self.config_name in ("", "config") or "/" in self.config_name:
            raise TritonizeError(f"--config-name {self.config_name!r}: tune writes configs/<name>.pbtxt and never "
                                 "config.pbtxt; choose another name, e.g. tuned")


def default_space(cores: int) -> Space:
    """What a search covers unless told otherwise (sized for the CPU cores here)."""
    counts = tuple(sorted({1, 2, min(4, max(1, cores))}))
    return Space(instances=counts, threads=counts, queue_delay_us=(0, 100, 1000, 5000),
                 preferred=((), (4,), (8,), (4, 8, 16, 32)), concurrency=(1, 2, 4, 8, 16))


class BudgetSpent(Exception):
    """The next measurement would end past the budget."""


@dataclass
class Search:
    """The measurements of one tune run (earlier ones from trials.csv included) and the decisions made."""

    options: TuneOptions
    base: pb.ModelConfig
    default: Candidate
    space: Space
    measure: Callable[[Candidate, int, int, str], Trial]  # (candidate, concurrency, round, phase) -> a new Trial
    deadline: float  # clock() when the budget is spent
    reserve: float = 0.0  # seconds of the budget the search leaves to the confirmation, once a challenger leads
    cached: dict[tuple, Trial] = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    scores: dict[str, tuple[float, int]] = field(default_factory=dict)  # config -> (best feasible infer/s, its concurrency)
    stopped: str = ""  # why the search ended early
    checks: int = 0  # back-to-back checks made (numbers their trials)
    clock: Callable[[], float] = time.monotonic
    swept: dict[str, Candidate] = field(default_factory=dict)  # the configs whose sweep ran or began
    lost: dict[str, Candidate] = field(default_factory=dict)  # led in their sweep, not back to back
    unchecked: Candidate | None = None  # the winner, when the budget ended before it was measured back to back
    leading: Candidate | None = None  # the config the search holds so far (None: the default)

    def trial(self, candidate: Candidate, concurrency: int, phase: str = "search", round_: int = 0) -> Trial:
        key = (phase, candidate.key, concurrency, round_)
        if key in self.cached:
            found = self.cached.pop(key)
        else:
            confirming = self.leading not in (None, self.default)  # a comparison will be needed at the end
            limit = self.deadline - (self.reserve if phase == "search" and confirming else 0.0)
            if self.clock() + self.options.duration + OVERHEAD_S > limit:
                raise BudgetSpent()
            found = self.measure(candidate, concurrency, round_, phase)
        self.trials.append(found)
        return found

    def sweep(self, candidate: Candidate) -> tuple[float, int]:
        """Best throughput within the p99 budget over the concurrency levels (0, 0 when none is within)."""
        if candidate.key in self.scores:
            return self.scores[candidate.key]
        self.swept[candidate.key] = candidate
        best, at, peak = 0.0, 0, 0.0
        for level in self.space.concurrency:
            try:
                trial = self.trial(candidate, level)
            except BudgetSpent:
                if at:  # what the levels measured so far served within the p99 budget
                    self.scores[candidate.key] = (best, at)
                raise
            if trial.p99_ms > self.options.p99_ms:
                break
            if trial.throughput > best:
                best, at = trial.throughput, level
            peak = max(peak, trial.throughput)
            if trial.throughput < SATURATED * peak:
                break
        self.scores[candidate.key] = (best, at)
        say(f"  {candidate.describe()}: " + (f"{best:.1f} infer/s at concurrency {at}" if at else
                                              f"no level within p99 {self.options.p99_ms:g} ms"))
        return best, at

    def run(self) -> Candidate:
        """Coordinate descent from the default; returns the winner (the default when nothing beat it)."""
        current = self.leading = self.default
        try:
            best, _ = self.sweep(current)
            for name, changes in self.space.dimensions(current, self.base.max_batch_size):
                say(f"tune: {name}")
                for change in changes:
                    candidate = replace(current, **change)
                    if candidate.key in self.scores:
                        continue
                    score, _ = self.sweep(candidate)
                    if score > best * (1 + MIN_GAIN):
                        if self.beats(candidate, current):
                            current = self.leading = candidate
                            best = score
                        else:
                            self.lost[candidate.key] = candidate
        except BudgetSpent:
            self.stopped = "the budget was spent before the search covered every dimension"
            say(f"tune: {self.stopped}; the same command goes on from here")
            current = self.leading = self._best_unchecked(current)
        return current

    def _best_unchecked(self, current: Candidate) -> Candidate:
        """When the budget ended in a sweep or before a back-to-back check: the config with the best score measured
        within the p99 budget, when it beats the one held by MIN_GAIN and did not lose a check."""
        held = self.scores.get(current.key, (0.0, 0))[0]
        best = max((key for key in self.swept if key not in self.lost and self.scores.get(key, (0, 0))[1]),
                   key=lambda key: self.scores[key][0], default=None)
        if best is None or best == current.key or self.scores[best][0] <= held * (1 + MIN_GAIN):
            return current
        self.unchecked = self.swept[best]
        return self.unchecked

    def verdict(self, winner: Candidate) -> str:
        """One line on how the winner was decided, for the report (never "the default is best" when a measured
        config served more within the p99 budget)."""
        default = self.scores.get(self.default.key, (0.0, 0))[0]
        if self.unchecked is not None and winner == self.unchecked:
            return (f"{winner.describe()} served {self.scores[winner.key][0]:.1f} infer/s within p99 "
                    f"{self.options.p99_ms:g} ms in its sweep, the default {default:.1f}; the budget ended before they "
                    "were measured back to back")
        if winner != self.default:
            return ""
        faster = sorted(((score, key) for key, (score, at) in self.scores.items()
                         if at and key != self.default.key and score > default), reverse=True)
        if not faster:
            return "the default config is the best found" + (" so far" if self.stopped else "")
        score, key = faster[0]
        name = self.swept[key].describe()
        gain = f"{MIN_GAIN * 100:.0f} %"
        why = f"but not {gain} more back to back" if key in self.lost else f"less than the {gain} more a change must serve"
        return f"the default stays: {name} served {score:.1f} infer/s in its sweep, the default {default:.1f}, {why}"

    def beats(self, candidate: Candidate, current: Candidate) -> bool:
        """Measure both again back to back, each at its best concurrency: on a shared machine throughput drifts
        between sweeps minutes apart, so a lead in the sweeps alone does not make a winner."""
        if not self.scores[current.key][1]:
            return True  # the current config has no level within the budget: nothing to hold
        self.checks += 1
        challenger = self.trial(candidate, self.scores[candidate.key][1], "check", self.checks)
        holder = self.trial(current, self.scores[current.key][1], "check", self.checks)
        won = challenger.p99_ms <= self.options.p99_ms and challenger.throughput > holder.throughput * (1 + MIN_GAIN)
        say(f"  back to back: {challenger.throughput:.1f} vs {holder.throughput:.1f} infer/s: "
            + ("the new config leads" if won else "the current one stays"))
        return won

    def confirm(self, winner: Candidate) -> dict[str, list[Trial]]:
        """Default and winner at their best concurrency, back to back, CONFIRM_ROUNDS rounds."""
        pairs = {"default": self.default, "winner": winner}
        found: dict[str, list[Trial]] = {"default": [], "winner": []}
        if winner == self.default or not all(self.scores.get(c.key, (0, 0))[1] for c in pairs.values()):
            return found
        try:
            for round_ in range(CONFIRM_ROUNDS):
                for name in (("default", "winner") if round_ % 2 == 0 else ("winner", "default")):
                    candidate = pairs[name]
                    found[name].append(self.trial(candidate, self.scores[candidate.key][1], "confirm", round_))
        except BudgetSpent:
            self.stopped = self.stopped or "the budget was spent during the confirmation"
        return found


def median_trial(trials: list[Trial]) -> dict:
    return {"throughput": statistics.median(t.throughput for t in trials), "p99_ms": statistics.median(t.p99_ms for t in trials),
            "p50_ms": statistics.median(t.p50_ms for t in trials), "concurrency": trials[0].concurrency,
            "rounds": len(trials)}


# --- measuring ----------------------------------------------------------------------------------------

class Measurer:
    """Loads a candidate config into the server (once per config in a row) and measures one level."""

    def __init__(self, connect: Callable[[], Connection], options: TuneOptions, base: pb.ModelConfig, engine: str,
                 on_trial: Callable[[Trial], None]):
        self.connect, self.options, self.base, self.engine = connect, options, base, engine
        self.loaded: str | None = None
        self.on_trial = on_trial

    def __call__(self, candidate: Candidate, concurrency: int, round_: int, phase: str) -> Trial:
        connection = self.connect()
        if self.loaded != candidate.key:
            config = json_format.MessageToJson(candidate.apply(self.base), preserving_proto_field_name=True)
            ModelControl(connection).load_config(self.options.model, config)
            self.loaded = candidate.key
        perf = PerfOptions(concurrency=(concurrency,), batch=self.options.batch, duration=self.options.duration,
                           warmup=2, engine=self.engine, preprocess="client", stability=UNJUDGED,
                           level_time_limit=max(60.0, 4 * self.options.duration))
        report = run_perf(connection, [self.options.model], perf)
        (level,) = report.levels
        trial = Trial(phase=phase, config=candidate.key, instances=candidate.instances, threads=candidate.threads,
                      queue_delay_us=candidate.queue_delay_us, preferred="-".join(map(str, candidate.preferred)) or "none",
                      concurrency=concurrency, round=round_, throughput=round(level.throughput, 3),
                      p50_ms=round(level.latency["p50_ms"], 3), p90_ms=round(level.latency["p90_ms"], 3),
                      p99_ms=round(level.latency["p99_ms"], 3), avg_ms=round(level.latency["avg_ms"], 3),
                      queue_ms=round((level.server_us or {}).get("queue", math.nan) / 1e3, 3),  # NaN: unknown
                      compute_infer_ms=round((level.server_us or {}).get("compute_infer", math.nan) / 1e3, 3),
                      server_batch=round(math.nan if level.server_batches is None else level.server_batches, 3),
                      requests=level.requests, engine=report.engine,
                      measured=time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.on_trial(trial)
        return trial


# --- the trials file and the resume state -------------------------------------------------------------

def fingerprint(model_file: Path, base: pb.ModelConfig, options: TuneOptions, engine: str) -> str:
    """What measurements depend on: the model file, the base config, the request batch and window, the engine."""
    from google.protobuf import text_format

    parts = {"model_file": sha256_file(model_file), "base": text_format.MessageToString(base), "batch": options.batch,
             "duration": options.duration, "engine": engine}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class TrialsFile:
    """trials.csv, appended one row per measurement (flushed: an interrupted run keeps what it measured)."""

    def __init__(self, directory: Path, print_: str, fresh: bool):
        self.path = directory / TRIALS_NAME
        self.state = directory / STATE_NAME
        directory.mkdir(parents=True, exist_ok=True)
        previous = json.loads(self.state.read_text()) if self.state.is_file() else {}
        self.earlier: list[Trial] = []
        if not fresh and previous.get("fingerprint") == print_ and self.path.is_file():
            with open(self.path, newline="") as f:
                self.earlier = [Trial.from_row(row) for row in csv.DictReader(f)]
        elif self.path.is_file():
            say(f"tune: {self.path} holds trials of another model file, base config or measurement settings: starting afresh")
        self.state.write_text(json.dumps({"fingerprint": print_}) + "\n")
        self._file = open(self.path, "w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=Trial.COLUMNS)
        self._writer.writeheader()
        for trial in self.earlier:
            self._writer.writerow(trial.row())
        self._file.flush()

    def append(self, trial: Trial) -> None:
        self._writer.writerow(trial.row())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
