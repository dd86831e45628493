"""`tritonize client perf`: load sweeps at bounded concurrency, measured by perf_analyzer or the built-in engine.

Every request carries the same image (`--image`, default matplotlib's sample photo), in the form the
model of the chosen preprocessing path takes (`--preprocess`: the FP32 tensor, the encoded file, or
UINT8 pixels). `--engine auto` measures with the real perf_analyzer when it is found (PATH, or where
`tritonize tools get-perf-analyzer` put it), else with the built-in load generator
(tritonize.client.load: perf_analyzer's synchronous concurrency mode in a process of its own); the
report says which. Either way the results are written as perf_analyzer's `-f` CSV (with its
`--verbose-csv` columns; microseconds; perf_analyzer's own rows when it measured), one file per model,
perf.json, and a latency-vs-throughput plot with all models in one figure. The built-in engine reads
the server-side split from the statistics API around its window, divided per request, as
perf_analyzer does.

A level whose requests fail (a stub dies, the server goes) is kept: its successes, its failures and the
first error, in the table and perf.json (not in the CSV and the plot, whose figures it would distort).
The sweep then goes on to the next level unless `stop_on_error` (`--stop-on-error`), and stops when the
server is gone.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from tritonize.client import perf_analyzer as pa
from tritonize.client.connection import ModelInfo, Connection, refused, server_gone, short_reason
from tritonize.client.load import EXITED, LoadError, LoadProcess
from tritonize.client.stats import latency_summary
from tritonize.console import table
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, ensure_writable_dir
from tritonize.images import load_images
from tritonize.progress import say
from tritonize.tools.perf_analyzer import PerfAnalyzer

# perf_analyzer's `-f` header, then the three columns `--verbose-csv` adds. All times in microseconds.
CSV_COLUMNS = (
    "Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
    "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
    "p50 latency", "p90 latency", "p95 latency", "p99 latency", "Avg latency", "request/response", "response wait",
)
SERVER_PARTS = ("queue", "compute_input", "compute_infer", "compute_output")
ENGINES = ("auto", "perf_analyzer", "builtin")
UNJUDGED = 1000.0  # a perf_analyzer stability percentage that any three windows meet


@dataclass(frozen=True)
class PerfOptions:
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    batch: int = 1
    requests: int | None = None  # measured requests per level; or
    duration: float | None = 5.0  # measured seconds per level
    warmup: int = 4  # unmeasured requests before each level: per worker (builtin), in sequence (perf_analyzer)
    level_time_limit: float = 120.0  # hard stop of one level, whatever the mode
    timeout: float = 60.0  # per request
    shared_memory: str = "none"  # "none" | "system"
    preprocess: str | None = None  # client | server | uint8; None: server when the ensembles are there
    image: str | None = None  # the image every request carries; None: matplotlib's sample photo
    engine: str = "auto"  # auto | perf_analyzer | builtin
    # perf_analyzer's -s: how far its last three windows may differ. Its default (10 %) is rarely met on a
    # machine shared with other work, and then it reports nothing. UNJUDGED takes three windows as they come,
    # for callers that judge the noise themselves (tune's back-to-back checks, the speed gate's rounds).
    stability: float = 100.0
    # End the sweep at the first level with failed requests. The CLI goes on by default (`--stop-on-error` stops);
    # callers that judge a measurement (tune, the CPU speed gate) must not take a level that saw failures.
    stop_on_error: bool = True

    def __post_init__(self):
        if not self.concurrency or min(self.concurrency) < 1 or max(self.concurrency) > 1024:
            raise TritonizeError(f"--concurrency levels must be between 1 and 1024, got {list(self.concurrency)}")
        if self.batch < 1:
            raise TritonizeError(f"--batch must be at least 1, got {self.batch}")
        if self.requests is None and self.duration is None:
            raise TritonizeError("give --requests or --duration for each concurrency level")
        if self.requests is not None and self.requests < 1:
            raise TritonizeError(f"--requests must be at least 1, got {self.requests}")
        if self.duration is not None and not 0 < self.duration <= 600:
            raise TritonizeError(f"--duration must be between 0 and 600 seconds, got {self.duration}")
        if self.shared_memory not in ("none", "system"):
            raise TritonizeError(f"--shared-memory must be none or system, got {self.shared_memory!r}")
        if self.engine not in ENGINES:
            raise TritonizeError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if not 0 < self.stability <= UNJUDGED:
            raise TritonizeError(f"--stability must be a percentage between 0 and 1000, got {self.stability}")


@dataclass
class LevelResult:
    model: str
    concurrency: int
    batch: int
    transport: str  # "grpc" | "system shared memory"
    requests: int
    seconds: float
    throughput: float  # inferences (images) per second
    latency: dict  # client side, per request: avg_ms, p50_ms, ...
    client_send_us: float  # building and serializing the request
    client_recv_us: float  # reading the outputs back
    response_wait_us: float  # from the request leaving the client until its response arrived
    server_us: dict  # per request: queue, compute_input, compute_infer, compute_output
    server_batches: float  # average batch the server executed (inferences / executions)
    tensor_bytes_on_wire: int  # input + output tensor bytes carried by gRPC per request
    engine: str = "builtin"  # what measured: "builtin" or "perf_analyzer <version>"
    csv: dict | None = None  # perf_analyzer's CSV row, as it wrote it
    failures: int = 0  # requests that failed in the level (requests, throughput and latency are the successes')
    error: str | None = None  # the first failure's error

    @classmethod
    def failed(cls, workload: "Workload", concurrency: int, engine: str, failures: int, error: str,
               measured: dict | None = None) -> "LevelResult":
        """A level whose requests failed, with what it measured before (`measured`: LevelResult fields; none when
        it failed before its window)."""
        figures = measured or {"requests": 0, "seconds": 0.0, "throughput": 0.0, "latency": {"count": 0},
                               "client_send_us": 0.0, "client_recv_us": 0.0, "response_wait_us": 0.0,
                               "server_us": dict.fromkeys(SERVER_PARTS, 0.0), "server_batches": 0.0}
        return cls(model=workload.info.name, concurrency=concurrency, batch=len(workload.batch),
                   transport=workload.transport, tensor_bytes_on_wire=workload.tensor_bytes_on_wire, engine=engine,
                   failures=max(1, failures), error=error, **figures)

    @property
    def network_us(self) -> float:
        """perf_analyzer's 'Network+Server Send/Recv': the wait not accounted for by the server."""
        return max(0.0, self.response_wait_us - sum(self.server_us.values()))

    def csv_row(self) -> dict:
        if self.csv is not None:
            return dict(self.csv)
        us = lambda v: int(v)  # perf_analyzer writes whole microseconds, truncated
        lat = self.latency
        return {
            "Concurrency": self.concurrency,
            "Inferences/Second": round(self.throughput, 3),
            "Client Send": us(self.client_send_us),
            "Network+Server Send/Recv": us(self.network_us),
            "Server Queue": us(self.server_us["queue"]),
            "Server Compute Input": us(self.server_us["compute_input"]),
            "Server Compute Infer": us(self.server_us["compute_infer"]),
            "Server Compute Output": us(self.server_us["compute_output"]),
            "Client Recv": us(self.client_recv_us),
            "p50 latency": us(lat["p50_ms"] * 1e3),
            "p90 latency": us(lat["p90_ms"] * 1e3),
            "p95 latency": us(lat["p95_ms"] * 1e3),
            "p99 latency": us(lat["p99_ms"] * 1e3),
            "Avg latency": us(lat["avg_ms"] * 1e3),
            "request/response": us(self.client_send_us + self.client_recv_us),
            "response wait": us(self.response_wait_us),
        }

    def to_dict(self) -> dict:
        data = {**asdict(self), "network_us": self.network_us}
        del data["csv"]  # written to <model>.csv
        return data


@dataclass
class PerfReport:
    url: str
    options: PerfOptions
    engine: str = "builtin"  # what measured, e.g. "perf_analyzer 2.51.0 (/path/perf_analyzer)"
    levels: list[LevelResult] = field(default_factory=list)
    shared_memory_savings: dict = field(default_factory=dict)  # model -> A/B figures
    error: str | None = None  # the run stopped early; levels hold what was measured before

    def to_dict(self) -> dict:
        return {"url": self.url, "engine": self.engine, "options": asdict(self.options), "levels": [r.to_dict() for r in self.levels],
                "shared_memory_savings": self.shared_memory_savings, "error": self.error}

    @property
    def failed_levels(self) -> list[LevelResult]:
        return [r for r in self.levels if r.failures]

    def to_text(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        rows = [(r.model, r.concurrency, r.batch, r.requests, r.failures or "", f"{r.throughput:.1f}",
                 *(ms(r.latency.get(k)) for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms")),
                 # the server's split is not read across a failure (a reloaded model's statistics start again)
                 *(ms(None if r.failures else r.server_us[k] / 1e3) for k in SERVER_PARTS),
                 "-" if r.failures else f"{r.server_batches:.2f}")
                for r in self.levels]
        out = [f"measured by {self.engine}", table(("model", "conc", "batch", "requests", "failed", "infer/s", "p50 ms",
                                                    "p90 ms", "p95 ms", "p99 ms", "queue ms", "in ms", "infer ms",
                                                    "out ms", "srv batch"), rows)]
        out += [f"  {r.model} at concurrency {r.concurrency}: {r.failures} request(s) failed, {r.requests} succeeded; "
                f"first error: {r.error}" for r in self.failed_levels]
        for model, s in self.shared_memory_savings.items():
            g, m = s["grpc"], s["system_shared_memory"]
            # The built-in engine sends requests serialized once: its client work is inside the gRPC call.
            client = f"client send+recv {g['client_us']:.0f} -> {m['client_us']:.0f} us, " if g["client_us"] else ""
            out.append(
                f"  {model}: system shared memory keeps {s['bytes_saved_per_request']:,} tensor bytes per request off gRPC; "
                f"{client}p50 {g['p50_ms']:.2f} -> {m['p50_ms']:.2f} ms, avg {g['avg_ms']:.2f} -> {m['avg_ms']:.2f} ms "
                f"(concurrency 1, {s['requests']} requests each)"
            )
        return "\n".join(out)


class PerfInterrupted(TritonizeError):
    """The sweep stopped (server gone, request failed); `report` keeps the finished levels."""

    def __init__(self, message: str, report: PerfReport):
        super().__init__(message)
        self.report = report


# --- the load generator ---------------------------------------------------------------------------

_REGION_IDS = itertools.count()


class Workload:
    """What every request of one model carries: `batch` in the form the model takes, in the gRPC message or
    in system shared memory."""

    def __init__(self, info: ModelInfo, batch: np.ndarray, shared_memory: bool):
        from tritonclient.utils import serialize_byte_tensor

        self.info, self.batch, self.shared_memory = info, batch, shared_memory
        # BYTES travel as a 4-byte length and the bytes of each element.
        self.raw = serialize_byte_tensor(batch).item() if batch.dtype == np.object_ else batch.tobytes()
        self.in_bytes = len(self.raw)
        self.out_shape = (len(batch), info.num_classes)
        self.out_bytes = int(np.prod(self.out_shape)) * 4

    @property
    def transport(self) -> str:
        return "system shared memory" if self.shared_memory else "grpc"

    @property
    def tensor_bytes_on_wire(self) -> int:
        return 0 if self.shared_memory else self.in_bytes + self.out_bytes

    def serialized(self, regions: "_Regions | None" = None, slot: int = 0) -> bytes:
        """The ModelInferRequest as gRPC sends it, built once: data inline, or the shared memory regions of `slot`."""
        from tritonclient.grpc import service_pb2

        info = self.info
        request = service_pb2.ModelInferRequest(model_name=info.name)
        tensor = request.inputs.add(name=info.input_name, datatype=info.input_dtype)
        tensor.shape.extend(self.batch.shape if info.max_batch_size else self.batch.shape[1:])
        output = request.outputs.add(name=info.output_name)
        if regions is None:
            request.raw_input_contents.append(self.raw)
        else:
            for target, (region, size) in ((tensor, regions.input), (output, regions.output(slot))):
                target.parameters["shared_memory_region"].string_param = region
                target.parameters["shared_memory_byte_size"].int64_param = size
        return request.SerializeToString()


class _Regions:
    """System shared memory for the built-in engine: one read-only input region, one output region per worker."""

    def __init__(self, connection: Connection, workload: Workload, slots: int):
        import tritonclient.utils.shared_memory as shm

        self.connection, self.handles = connection, []
        # Unique per run: a region the server still holds from an earlier run never collides.
        tag = f"tritonize_{os.getpid()}_{next(_REGION_IDS)}_{workload.info.name}"
        self.specs = [(f"{tag}_in", workload.in_bytes)] + [(f"{tag}_out{i}", workload.out_bytes) for i in range(slots)]
        try:
            for name, size in self.specs:
                self.handles.append((name, shm.create_shared_memory_region(name, f"/{name}", size)))
                connection.client.register_system_shared_memory(name, f"/{name}", size, headers=connection.control_headers)
            shm.set_shared_memory_region(self.handles[0][1], [np.frombuffer(workload.raw, np.uint8)])
        except Exception as e:
            self.close()
            problem = refused(connection.url, e, "shared-memory registration", connection.key is not None)
            raise problem or TritonizeError(
                f"cannot set up system shared memory with the server at {connection.url} ({short_reason(e)}); "
                "it needs a server on this machine sharing /dev/shm, or run without --shared-memory") from None

    @property
    def input(self) -> tuple[str, int]:
        return self.specs[0]

    def output(self, slot: int) -> tuple[str, int]:
        return self.specs[1 + slot]

    def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        for name, handle in self.handles:
            self._unregister(name)
            shm.destroy_shared_memory_region(handle)
        self.handles.clear()

    def _unregister(self, name: str, patience: float = 5.0) -> None:
        """Unregister a region, waiting while the server still holds it for a just-finished response."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self.connection.client.unregister_system_shared_memory(name, client_timeout=self.connection.timeout,
                                                                       headers=self.connection.control_headers)
                return
            except Exception as e:
                gone = "UNAVAILABLE" in str(getattr(e, "status", lambda: "")())
                if gone or time.monotonic() > deadline:
                    if not gone:
                        say(f"warning: could not unregister shared memory region {name} ({short_reason(e)})")
                    return
                time.sleep(0.05)


def _server_delta(before: dict, after: dict) -> tuple[dict, float, int]:
    """Per-request server times (us) between two statistics snapshots, the mean executed batch, and the request count."""
    delta = {k: (after.get(k, (0, 0))[0] - before.get(k, (0, 0))[0], after.get(k, (0, 0))[1] - before.get(k, (0, 0))[1]) for k in after}
    per_request = {part: (delta[part][1] / delta[part][0] / 1e3 if delta.get(part, (0, 0))[0] else 0.0) for part in SERVER_PARTS}
    executions, inferences = delta.get("executions", (0, 0))
    return per_request, (inferences / executions if executions else 0.0), delta.get("success", (0, 0))[0]


RECORD_WAIT_S = 2.0  # how long the built-in engine waits for the server to record the requests it has answered


class BuiltinEngine:
    """The built-in load generator (tritonize.client.load): requests serialized once here, the load loop in
    a process of its own; the server-side split from the statistics API, read around the window."""

    name = "builtin"

    def __init__(self, connection: Connection, workload: Workload, slots: int, timeout: float):
        self.connection, self.workload, self.load = connection, workload, None
        # It reads the statistics API around each window: a server that restricts it says so now, in one line.
        connection.statistics(workload.info.name)
        self.regions = _Regions(connection, workload, slots) if workload.shared_memory else None
        try:
            requests = [workload.serialized(self.regions, slot) for slot in range(slots)]
            self.load = LoadProcess(connection.url, requests, timeout, connection.channel.get("root_certificates"))
        except BaseException:
            self.close()
            raise

    def measure(self, concurrency: int, options: PerfOptions) -> LevelResult:
        info, stats = self.workload.info, {}
        start = self._statistics()
        try:
            window = self.load.run(concurrency, options.warmup, options.duration if options.requests is None else None,
                                   options.requests, options.level_time_limit,
                                   between=lambda: stats.update(before=self._recorded(start, concurrency * options.warmup)))
        except LoadError as e:
            if e.code == EXITED:
                raise TritonizeError(f"{info.name} at concurrency {concurrency}: the load process stopped ({e.details})") from None
            return LevelResult.failed(self.workload, concurrency, self.name, 1, f"{e.code}: {e.details}")  # in the warm-up
        before = stats["before"]
        after = self._recorded(before, window.answered)
        if before is None or after is None or after.get("success", (0, 0))[0] < before.get("success", (0, 0))[0]:
            before = after = {}  # not both read, or the model was reloaded between them: its statistics started again
        per_request, server_batches, _ = _server_delta(before, after)
        latencies = [done - sent for sent, done in window.requests]
        wait = sum(latencies) / len(latencies) * 1e6 if latencies else 0.0
        batch = len(self.workload.batch)
        return LevelResult(
            model=info.name, concurrency=concurrency, batch=batch, transport=self.workload.transport,
            requests=len(latencies), seconds=round(window.seconds, 4),
            throughput=len(latencies) * batch / window.seconds if window.seconds > 0 else 0.0,
            latency=latency_summary(latencies), client_send_us=0.0, client_recv_us=0.0, response_wait_us=wait,
            server_us=per_request, server_batches=server_batches, tensor_bytes_on_wire=self.workload.tensor_bytes_on_wire,
            engine=self.name, failures=window.failures, error=window.error,
        )

    def _recorded(self, since: dict | None, answered: int) -> dict | None:
        """The statistics once they count the `answered` successes since `since`. Triton records a request when
        it releases it, just after the client has its response (here 11 reads in 100 right after a response
        missed it), so a plain read would move a window's last requests, and the warm-up's, into the next window."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            stats = self._statistics()
            if stats is None or since is None or time.monotonic() >= deadline:
                return stats
            done, base = stats.get("success", (0, 0))[0], since.get("success", (0, 0))[0]
            if done >= base + answered or done < base:  # all recorded, or the model reloaded (counts restarted)
                return stats
            time.sleep(0.005)

    def _statistics(self) -> dict | None:
        """The model's statistics, or None while the server cannot give them (the model reloading after a crash, the
        server gone): a level's requests say what happened, the split of its time is then unknown."""
        try:
            return self.connection.statistics(self.workload.info.name)
        except TritonizeError:
            return None

    def close(self) -> None:
        if self.load is not None:
            self.load.close()
        if self.regions is not None:
            self.regions.close()


class PerfAnalyzerEngine:
    """Each level one run of the real perf_analyzer (tritonize.client.perf_analyzer), read from its own CSV."""

    def __init__(self, connection: Connection, workload: Workload, tool: PerfAnalyzer):
        self.connection, self.workload, self.tool = connection, workload, tool
        self.name = f"perf_analyzer {tool.version}"
        # perf_analyzer reads the statistics API: a server that restricts it says so now, in one line.
        connection.statistics(workload.info.name)
        if connection.key is not None:
            say("perf_analyzer takes the control key on its command line (-H): other users of this machine can see "
                "it in the process list; --engine builtin keeps it off")
        self.runs = pa.PerfAnalyzerRuns(tool, workload.info.input_name, workload.batch[0])

    def measure(self, concurrency: int, options: PerfOptions) -> LevelResult:
        info, batch = self.workload.info, len(self.workload.batch)
        during = f"during {info.name} at concurrency {concurrency}"
        failed = self._warm_up(options.warmup)
        if failed:
            return LevelResult.failed(self.workload, concurrency, self.name, 1, failed)
        csv_file = self.runs.next_csv()
        command = pa.argv(self.tool, info.name, self.connection.url, self.runs.data_file, csv_file,
                          concurrency=concurrency, batch=batch, batching=info.max_batch_size > 0,
                          seconds=options.duration, requests=options.requests, stability=options.stability,
                          shared_memory=options.shared_memory if self.workload.shared_memory else "none",
                          output_bytes=self.workload.out_bytes, headers=self.connection.control_headers,
                          root_certificates=self.connection.channel.get("root_certificates"))
        limit = options.level_time_limit + pa.MAX_TRIALS * (options.duration or 5.0) / 3 + 30
        try:
            row, figures = pa.run_level(command, csv_file, during, limit)
        except pa.RequestsFailed as e:
            window_s = None if options.requests else pa.time_window_ms(options.duration) / 1e3
            per_window = pa.count_window(options.requests) if options.requests else None
            return LevelResult.failed(self.workload, concurrency, self.name, e.failures, e.first_error,
                                      pa.passes_figures(e.passes, batch, window_s, per_window))
        except pa.PerfAnalyzerFailed as e:
            if e.gone:
                raise TritonizeError(f"lost the Triton server at {self.connection.url} {during} ({e}); "
                                     "is it still running? (`tritonize serve`)") from None
            raise
        return LevelResult(model=info.name, concurrency=concurrency, batch=batch, transport=self.workload.transport,
                           tensor_bytes_on_wire=self.workload.tensor_bytes_on_wire, engine=self.name, csv=row,
                           **pa.level_figures(row, figures, batch))

    def _warm_up(self, requests: int) -> str | None:
        """perf_analyzer 2.51 has no warm-up of its own: send a few requests first. The error of one that failed."""
        from tritonclient.utils import InferenceServerException

        inputs, outputs = self.connection.request(self.workload.info, self.workload.batch)
        try:
            for _ in range(requests):
                self.connection.client.infer(self.workload.info.name, inputs, outputs=outputs, client_timeout=self.connection.timeout)
        except InferenceServerException as e:
            return f"{str(e.status()).removeprefix('StatusCode.')}: {short_reason(e)}"
        return None

    def close(self) -> None:
        self.runs.close()


def choose_engine(engine: str) -> PerfAnalyzer | None:
    """The perf_analyzer that measures (`auto` finds one when it can), or None for the built-in engine."""
    from tritonize.tools import perf_analyzer as tool

    if engine == "builtin":
        return None
    if engine == "perf_analyzer":
        return tool.require()
    found = tool.find()
    if found is None:
        say(f"perf_analyzer not found (on PATH or in {tool.fetched_path().parent.parent}; `{tool.GET_COMMAND}` "
            "gets it): measuring with the built-in load generator")
    return found


def open_engine(connection: Connection, workload: Workload, slots: int, tool: PerfAnalyzer | None, timeout: float):
    return PerfAnalyzerEngine(connection, workload, tool) if tool else BuiltinEngine(connection, workload, slots, timeout)


def run_perf(connection: Connection, models: Sequence[str], options: PerfOptions,
             on_level: Callable[[LevelResult], None] | None = None) -> PerfReport:
    """Sweep every model over every concurrency level. PerfInterrupted keeps the finished levels."""
    infos = [connection.model_for(name, options.preprocess) for name in models]  # unknown models fail before any load
    for info in infos:
        if info.max_batch_size and options.batch > info.max_batch_size:
            raise TritonizeError(f"--batch {options.batch} is above {info.name}'s max_batch_size {info.max_batch_size}")
        if not info.max_batch_size and options.batch != 1:
            raise TritonizeError(f"{info.name} does not batch (max_batch_size 0); use --batch 1")
    if options.shared_memory == "system" and not connection.is_local:
        raise TritonizeError(f"--shared-memory system needs a server on this machine; {connection.url} is not local")
    tool = choose_engine(options.engine)
    report = PerfReport(connection.url, options, engine=str(tool) if tool else BuiltinEngine.name)
    for info in infos:
        batch = _request_batch(info, options)
        try:
            if options.shared_memory == "system":
                report.shared_memory_savings[info.name] = _shared_memory_ab(connection, info, batch, options, tool)
            workload = Workload(info, batch, options.shared_memory == "system")
            with closing(open_engine(connection, workload, max(options.concurrency), tool, options.timeout)) as engine:
                for level in options.concurrency:
                    result = engine.measure(level, options)
                    report.levels.append(result)
                    if on_level:
                        on_level(result)
                    if result.failures:
                        during = f"{info.name} at concurrency {level}"
                        if not connection.live():
                            raise server_gone(connection.url, result.error or "", during)
                        if options.stop_on_error:
                            raise TritonizeError(f"{result.failures} request(s) failed during {during} ({result.error}); "
                                                 "stopped there (--stop-on-error)")
        except TritonizeError as e:
            report.error = str(e)
            raise PerfInterrupted(str(e), report) from None
    return report


def _request_batch(info: ModelInfo, options: PerfOptions) -> np.ndarray:
    """`options.batch` copies of the image, in the form the model takes."""
    if options.image is None:
        from matplotlib import cbook

        image = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    else:
        image = Path(options.image)
    loaded = load_images([image], info.preprocess, form=info.form)
    if loaded.failures:
        raise TritonizeError(f"--image {loaded.failures[0]}")
    return np.stack(loaded.arrays * options.batch)


def _shared_memory_ab(connection: Connection, info: ModelInfo, batch: np.ndarray, options: PerfOptions,
                      tool: PerfAnalyzer | None) -> dict:
    """The same short run (concurrency 1) over plain gRPC and over system shared memory."""
    requests = options.requests or 50
    ab = PerfOptions(concurrency=(1,), batch=options.batch, requests=requests, duration=None, warmup=options.warmup,
                     level_time_limit=options.level_time_limit, timeout=options.timeout, shared_memory=options.shared_memory,
                     engine=options.engine, stability=options.stability)
    figures = {}
    for shared in (False, True):
        with closing(open_engine(connection, Workload(info, batch, shared), 1, tool, options.timeout)) as engine:
            r = engine.measure(1, ab)
        figures["system_shared_memory" if shared else "grpc"] = {
            "p50_ms": r.latency["p50_ms"], "avg_ms": r.latency["avg_ms"], "client_us": r.client_send_us + r.client_recv_us,
            "client_send_us": r.client_send_us, "client_recv_us": r.client_recv_us, "tensor_bytes_on_wire": r.tensor_bytes_on_wire,
        }
    g, m = figures["grpc"], figures["system_shared_memory"]
    return {**figures, "requests": requests, "batch": options.batch,
            "bytes_saved_per_request": g["tensor_bytes_on_wire"] - m["tensor_bytes_on_wire"],
            "client_us_saved_per_request": g["client_us"] - m["client_us"],
            "avg_ms_saved_per_request": g["avg_ms"] - m["avg_ms"]}


# --- outputs -------------------------------------------------------------------------------------

def write_csv(levels: Sequence[LevelResult], path: Path) -> Path:
    """perf_analyzer's CSV for one model: its columns, rows in increasing throughput, microseconds."""
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for level in sorted(levels, key=lambda r: r.throughput):
                writer.writerow(level.csv_row())
    return Path(path)


def plot(levels: Sequence[LevelResult], path: Path, title: str = "Triton latency vs throughput") -> Path:
    """p50 (solid) and p99 (dashed) latency against throughput, one colour per model, points labelled by concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    models = list(dict.fromkeys(r.model for r in levels))
    for i, model in enumerate(models):
        rows = sorted((r for r in levels if r.model == model), key=lambda r: r.concurrency)
        x = [r.throughput for r in rows]
        color = f"C{i}"
        ax.plot(x, [r.latency["p50_ms"] for r in rows], "o-", color=color, label=f"{model} p50")
        ax.plot(x, [r.latency["p99_ms"] for r in rows], "x--", color=color, alpha=0.7, label=f"{model} p99")
        for r in rows:
            ax.annotate(f"c{r.concurrency}", (r.throughput, r.latency["p50_ms"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    batch = levels[0].batch if levels else 1
    ax.set(xlabel="throughput (inferences/s)", ylabel="latency per request (ms)", title=f"{title} (batch {batch})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return Path(path)


def write_outputs(report: PerfReport, out_dir: Path) -> list[Path]:
    """<out>/<model>.csv per model, <out>/latency_vs_throughput.png and <out>/perf.json (levels that saw failures
    only in perf.json: perf_analyzer's CSV has no column for them)."""
    out_dir = ensure_writable_dir(Path(out_dir), "--out")
    written = []
    complete = [r for r in report.levels if not r.failures]
    for model in dict.fromkeys(r.model for r in complete):
        written.append(write_csv([r for r in complete if r.model == model], out_dir / f"{model}.csv"))
    if complete:
        written.append(plot(complete, out_dir / "latency_vs_throughput.png"))
    with atomic_path(out_dir / "perf.json") as tmp:
        Path(tmp).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    written.append(out_dir / "perf.json")
    return written
