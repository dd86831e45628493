"""What a sweep is asked for and what it measured: options, one level's result, the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tritonize.console import table
from tritonize.errors import TritonizeError
from tritonize.options import EXIT_USAGE

# perf_analyzer's `-f` header, then the three columns `--verbose-csv` adds. All times in microseconds.
CSV_COLUMNS = (
    "Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
    "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
    "p50 latency", "p90 latency", "p95 latency", "p99 latency", "Avg latency", "request/response", "response wait",
)
SERVER_PARTS = ("queue", "compute_input", "compute_infer", "compute_output")
LOAD_GENERATORS = ("auto", "perf_analyzer", "builtin")
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
            raise TritonizeError(f"--concurrency levels must be between 1 and 1024, got {list(self.concurrency)}",
                                 EXIT_USAGE)
        if self.batch < 1:
            raise TritonizeError(f"--batch must be at least 1, got {self.batch}", EXIT_USAGE)
        if self.requests is None and self.duration is None:
            raise TritonizeError("give --requests or --duration for each concurrency level", EXIT_USAGE)
        if self.requests is not None and self.requests < 1:
            raise TritonizeError(f"--requests must be at least 1, got {self.requests}", EXIT_USAGE)
        if self.duration is not None and not 0 < self.duration <= 600:
            raise TritonizeError(f"--duration must be between 0 and 600 seconds, got {self.duration}", EXIT_USAGE)
        if self.shared_memory not in ("none", "system"):
            raise TritonizeError(f"--shared-memory must be none or system, got {self.shared_memory!r}", EXIT_USAGE)
        if self.engine not in LOAD_GENERATORS:
            raise TritonizeError(f"--load-generator must be one of {', '.join(LOAD_GENERATORS)}, got {self.engine!r}",
                                 EXIT_USAGE)
        if not 0 < self.stability <= UNJUDGED:
            raise TritonizeError(f"--stability must be a percentage between 0 and 1000, got {self.stability}",
                                 EXIT_USAGE)


@dataclass
class LevelResult:
    model: str  # the model asked for (--models)
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
    # The server's side, per request: queue, compute_input, compute_infer, compute_output, and the average batch
    # the classifier executed (inferences / executions). Through an ensemble, the times are its steps' summed (as
    # perf_analyzer sums them: the ensemble's own statistics show one execution of batch 1 per request and none of
    # the steps' queues), each step's in `steps`. None where unknown (`server_note` says why).
    server_us: dict | None
    server_batches: float | None
    tensor_bytes_on_wire: int  # input + output tensor bytes carried by gRPC per request
    engine: str = "builtin"  # what measured: "builtin" or "perf_analyzer <version>"
    csv: dict | None = None  # perf_analyzer's CSV row, as it wrote it
    failures: int = 0  # requests that failed in the level (requests, throughput and latency are the successes')
    error: str | None = None  # the first failure's error
    preprocess: str = "client"  # the preprocessing path: client, server or uint8
    served: str = ""  # the Triton model the requests went to: `model`, or the ensemble that preprocesses for it
    steps: dict = field(default_factory=dict)  # an ensemble's step -> {"server_us": {...}, "server_batches": b}
    server_note: str | None = None  # why the server's side is unknown (a model reloaded during the level)

    @property
    def path(self) -> str:
        """The preprocessing path and, when it is an ensemble, the model it sends to: "server (onnx_classifier)"."""
        return self.preprocess if self.served in ("", self.model) else f"{self.preprocess} ({self.served})"

    @property
    def network_us(self) -> float | None:
        """perf_analyzer's 'Network+Server Send/Recv': the wait not accounted for by the server."""
        return None if self.server_us is None else max(0.0, self.response_wait_us - sum(self.server_us.values()))

    def csv_row(self) -> dict:
        if self.csv is not None:
            return dict(self.csv)
        def us(v):  # perf_analyzer writes whole microseconds, truncated
            return "" if v is None else int(v)

        lat, server = self.latency, self.server_us or {}
        return {
            "Concurrency": self.concurrency,
            "Inferences/Second": round(self.throughput, 3),
            "Client Send": us(self.client_send_us),
            "Network+Server Send/Recv": us(self.network_us),
            "Server Queue": us(server.get("queue")),
            "Server Compute Input": us(server.get("compute_input")),
            "Server Compute Infer": us(server.get("compute_infer")),
            "Server Compute Output": us(server.get("compute_output")),
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

        rows = [(r.model, r.path, r.concurrency, r.batch, r.requests, r.failures or "", f"{r.throughput:.1f}",
                 *(ms(r.latency.get(k)) for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms")),
                 # the server's split is not shown across a failure (its requests are not in it)
                 *(ms(None if r.failures or r.server_us is None else r.server_us[k] / 1e3) for k in SERVER_PARTS),
                 "-" if r.failures or r.server_batches is None else f"{r.server_batches:.2f}")
                for r in self.levels]
        out = [f"measured by {self.engine}", table(("model", "preprocess", "conc", "batch", "requests", "failed", "infer/s", "p50 ms",
                                                    "p90 ms", "p95 ms", "p99 ms", "queue ms", "in ms", "infer ms",
                                                    "out ms", "srv batch"), rows)]
        out += [f"  {r.model} at concurrency {r.concurrency}: {r.failures} request(s) failed, {r.requests} succeeded; "
                f"first error: {r.error}" for r in self.failed_levels]
        out += [f"  {r.model} at concurrency {r.concurrency}: {r.server_note}" for r in self.levels if r.server_note]
        out += [f"  {r.model} at concurrency {r.concurrency} through {r.served}: " + "; ".join(
                    f"{step} batch {s['server_batches']:.2f} (queue {ms(s['server_us']['queue'] / 1e3)} ms, "
                    f"infer {ms(s['server_us']['compute_infer'] / 1e3)} ms)" for step, s in r.steps.items())
                for r in self.levels if r.steps and not r.failures]
        for model, s in self.shared_memory_savings.items():
            g, m = s["grpc"], s["system_shared_memory"]
            # The built-in load generator sends requests serialized once: its client work is inside the gRPC call.
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
