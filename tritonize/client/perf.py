"""`tritonize client perf`: load sweeps at bounded concurrency, as perf_analyzer measures them.

Every request carries the same image (`--image`, default matplotlib's sample photo), in the form the
model of the chosen preprocessing path takes (`--preprocess`: the FP32 tensor, the encoded file, or
UINT8 pixels). For each concurrency level, `concurrency` asyncio workers each keep one request in flight
(tritonclient's asyncio gRPC client) until the level's request count or duration is reached,
after a warm-up that is not measured. The server-side split comes from the statistics API:
counters read before and after the measured window, divided per request, as perf_analyzer does.
Results are written as perf_analyzer's `-f` CSV (with its `--verbose-csv` columns; microseconds),
one file per model, and as a latency-vs-throughput plot with all models in one figure.
"""

from __future__ import annotations

import asyncio
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

from tritonize.client.connection import ModelInfo, Connection, refused, short_reason
from tritonize.client.stats import latency_summary
from tritonize.console import table
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, ensure_writable_dir
from tritonize.images import load_images
from tritonize.progress import say

# perf_analyzer's `-f` header, then the three columns `--verbose-csv` adds. All times in microseconds.
CSV_COLUMNS = (
    "Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
    "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
    "p50 latency", "p90 latency", "p95 latency", "p99 latency", "Avg latency", "request/response", "response wait",
)
SERVER_PARTS = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class PerfOptions:
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    batch: int = 1
    requests: int | None = None  # measured requests per level; or
    duration: float | None = 5.0  # measured seconds per level
    warmup: int = 4  # unmeasured requests per level, per worker at most
    level_time_limit: float = 120.0  # hard stop of one level, whatever the mode
    timeout: float = 60.0  # per request
    shared_memory: str = "none"  # "none" | "system"
    preprocess: str | None = None  # client | server | uint8; None: server when the ensembles are there
    image: str | None = None  # the image every request carries; None: matplotlib's sample photo

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

    @property
    def network_us(self) -> float:
        """perf_analyzer's 'Network+Server Send/Recv': the wait not accounted for by the server."""
        return max(0.0, self.response_wait_us - sum(self.server_us.values()))

    def csv_row(self) -> dict:
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
        return {**asdict(self), "network_us": self.network_us}


@dataclass
class PerfReport:
    url: str
    options: PerfOptions
    levels: list[LevelResult] = field(default_factory=list)
    shared_memory_savings: dict = field(default_factory=dict)  # model -> A/B figures
    error: str | None = None  # the run stopped early; levels hold what was measured before

    def to_dict(self) -> dict:
        return {"url": self.url, "options": asdict(self.options), "levels": [r.to_dict() for r in self.levels],
                "shared_memory_savings": self.shared_memory_savings, "error": self.error}

    def to_text(self) -> str:
        rows = [(r.model, r.concurrency, r.batch, r.requests, f"{r.throughput:.1f}",
                 *(f"{r.latency[k]:.2f}" for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms")),
                 *(f"{r.server_us[k] / 1e3:.2f}" for k in SERVER_PARTS), f"{r.server_batches:.2f}")
                for r in self.levels]
        out = [table(("model", "conc", "batch", "requests", "infer/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms",
                      "queue ms", "in ms", "infer ms", "out ms", "srv batch"), rows)]
        for model, s in self.shared_memory_savings.items():
            g, m = s["grpc"], s["system_shared_memory"]
            out.append(
                f"  {model}: system shared memory keeps {s['bytes_saved_per_request']:,} tensor bytes per request off gRPC; "
                f"client send+recv {g['client_us']:.0f} -> {m['client_us']:.0f} us, p50 {g['p50_ms']:.2f} -> {m['p50_ms']:.2f} ms "
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


class _Transport:
    """Builds requests for one model: tensors in the gRPC message, or in system shared memory."""

    def __init__(self, connection: Connection, info: ModelInfo, batch: np.ndarray, slots: int, shared_memory: bool):
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import serialize_byte_tensor

        self.grpc, self.info, self.batch, self.connection = grpcclient, info, batch, connection
        # BYTES travel as a 4-byte length and the bytes of each element.
        self.payload = serialize_byte_tensor(batch) if batch.dtype == np.object_ else batch
        self.in_bytes = len(self.payload.item()) if batch.dtype == np.object_ else batch.nbytes
        self.out_shape = (len(batch), info.num_classes)
        self.out_bytes = int(np.prod(self.out_shape)) * 4
        self.shared_memory = shared_memory
        self.regions: list[tuple[str, object]] = []
        if shared_memory:
            self._create_regions(slots)

    @property
    def name(self) -> str:
        return "system shared memory" if self.shared_memory else "grpc"

    @property
    def tensor_bytes_on_wire(self) -> int:
        return 0 if self.shared_memory else self.in_bytes + self.out_bytes

    def _create_regions(self, slots: int) -> None:
        import tritonclient.utils.shared_memory as shm

        # Unique per transport: a region the server still holds from an earlier run never collides.
        tag = f"tritonize_{os.getpid()}_{next(_REGION_IDS)}_{self.info.name}"
        # One read-only input region shared by all workers, one output region per worker.
        specs = [(f"{tag}_in", self.in_bytes)] + [(f"{tag}_out{i}", self.out_bytes) for i in range(slots)]
        try:
            for name, size in specs:
                handle = shm.create_shared_memory_region(name, f"/{name}", size)
                self.regions.append((name, handle))
                self.connection.client.register_system_shared_memory(name, f"/{name}", size,
                                                                     headers=self.connection.control_headers)
            shm.set_shared_memory_region(self.regions[0][1], [self.payload])
        except Exception as e:
            self.close()
            problem = refused(self.connection.url, e, "shared-memory registration", self.connection.key is not None)
            raise problem or TritonizeError(
                f"cannot set up system shared memory with the server at {self.connection.url} ({short_reason(e)}); "
                "it needs a server on this machine sharing /dev/shm, or run without --shared-memory") from None

    def request(self, slot: int):
        inp = self.grpc.InferInput(self.info.input_name, list(self.batch.shape), self.info.input_dtype)
        out = self.grpc.InferRequestedOutput(self.info.output_name)
        if self.shared_memory:
            inp.set_shared_memory(self.regions[0][0], self.in_bytes)
            out.set_shared_memory(self.regions[1 + slot][0], self.out_bytes)
        else:
            inp.set_data_from_numpy(self.batch)
        return [inp], [out]

    def read(self, result, slot: int) -> np.ndarray:
        if self.shared_memory:
            import tritonclient.utils.shared_memory as shm

            return shm.get_contents_as_numpy(self.regions[1 + slot][1], np.float32, self.out_shape)
        return result.as_numpy(self.info.output_name)

    def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        for name, handle in self.regions:
            self._unregister(name)
            shm.destroy_shared_memory_region(handle)
        self.regions.clear()

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


@dataclass
class _Samples:
    latency: list[float] = field(default_factory=list)
    send: list[float] = field(default_factory=list)
    recv: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)


async def _drive(connection: Connection, info: ModelInfo, transport: _Transport, concurrency: int, count: int | None,
                 seconds: float | None, limit: float, timeout: float) -> tuple[_Samples, float]:
    """Keep `concurrency` requests in flight until `count` requests or `seconds` (and never past `limit`)."""
    import tritonclient.grpc.aio as aiogrpc

    samples, issued = _Samples(), 0
    start = time.perf_counter()
    stop_at = start + min(seconds if seconds is not None else limit, limit)

    async def worker(slot: int) -> None:
        nonlocal issued
        while time.perf_counter() < stop_at and (count is None or issued < count):
            issued += 1
            t0 = time.perf_counter()
            inputs, outputs = transport.request(slot)
            t1 = time.perf_counter()
            result = await client.infer(info.name, inputs, outputs=outputs, client_timeout=timeout)
            t2 = time.perf_counter()
            transport.read(result, slot)
            t3 = time.perf_counter()
            samples.latency.append(t3 - t0)
            samples.send.append(t1 - t0)
            samples.wait.append(t2 - t1)
            samples.recv.append(t3 - t2)

    client = aiogrpc.InferenceServerClient(connection.url, **connection.channel)  # TLS as the connection
    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        await client.close()
    return samples, time.perf_counter() - start


def _server_delta(before: dict, after: dict) -> tuple[dict, float, int]:
    """Per-request server times (us) between two statistics snapshots, the mean executed batch, and the request count."""
    delta = {k: (after.get(k, (0, 0))[0] - before.get(k, (0, 0))[0], after.get(k, (0, 0))[1] - before.get(k, (0, 0))[1]) for k in after}
    per_request = {part: (delta[part][1] / delta[part][0] / 1e3 if delta.get(part, (0, 0))[0] else 0.0) for part in SERVER_PARTS}
    executions, inferences = delta.get("executions", (0, 0))
    return per_request, (inferences / executions if executions else 0.0), delta.get("success", (0, 0))[0]


def measure_level(connection: Connection, info: ModelInfo, transport: _Transport, concurrency: int, options: PerfOptions) -> LevelResult:
    from tritonclient.utils import InferenceServerException

    try:
        warmup = min(options.warmup * concurrency, max(options.warmup, concurrency))
        asyncio.run(_drive(connection, info, transport, concurrency, warmup, None, options.level_time_limit, options.timeout))
        before = connection.statistics(info.name)
        samples, seconds = asyncio.run(_drive(connection, info, transport, concurrency, options.requests,
                                              options.duration if options.requests is None else None,
                                              options.level_time_limit, options.timeout))
        after = connection.statistics(info.name)
    except InferenceServerException as e:
        raise connection.failure(e, info.name, f"{info.name} at concurrency {concurrency}") from None
    per_request, server_batches, _ = _server_delta(before, after)
    mean = lambda xs: sum(xs) / len(xs) * 1e6 if xs else 0.0
    return LevelResult(
        model=info.name, concurrency=concurrency, batch=len(transport.batch), transport=transport.name,
        requests=len(samples.latency), seconds=round(seconds, 4),
        throughput=len(samples.latency) * len(transport.batch) / seconds if seconds > 0 else 0.0,
        latency=latency_summary(samples.latency), client_send_us=mean(samples.send), client_recv_us=mean(samples.recv),
        response_wait_us=mean(samples.wait), server_us=per_request, server_batches=server_batches,
        tensor_bytes_on_wire=transport.tensor_bytes_on_wire,
    )


def run_perf(connection: Connection, models: Sequence[str], options: PerfOptions,
             on_level: Callable[[LevelResult], None] | None = None) -> PerfReport:
    """Sweep every model over every concurrency level. PerfInterrupted keeps the finished levels."""
    report = PerfReport(connection.url, options)
    infos = [connection.model_for(name, options.preprocess) for name in models]  # unknown models fail before any load
    for info in infos:
        if info.max_batch_size and options.batch > info.max_batch_size:
            raise TritonizeError(f"--batch {options.batch} is above {info.name}'s max_batch_size {info.max_batch_size}")
        if not info.max_batch_size and options.batch != 1:
            raise TritonizeError(f"{info.name} does not batch (max_batch_size 0); use --batch 1")
    if options.shared_memory == "system" and not connection.is_local:
        raise TritonizeError(f"--shared-memory system needs a server on this machine; {connection.url} is not local")
    for info in infos:
        batch = _request_batch(info, options)
        try:
            if options.shared_memory == "system":
                report.shared_memory_savings[info.name] = _shared_memory_ab(connection, info, batch, options)
            with closing(_Transport(connection, info, batch, max(options.concurrency), options.shared_memory == "system")) as transport:
                for level in options.concurrency:
                    result = measure_level(connection, info, transport, level, options)
                    report.levels.append(result)
                    if on_level:
                        on_level(result)
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


def _shared_memory_ab(connection: Connection, info: ModelInfo, batch: np.ndarray, options: PerfOptions) -> dict:
    """The same short run (concurrency 1) over plain gRPC and over system shared memory."""
    requests = options.requests or 50
    ab = PerfOptions(concurrency=(1,), batch=options.batch, requests=requests, duration=None, warmup=options.warmup,
                     level_time_limit=options.level_time_limit, timeout=options.timeout)
    figures = {}
    for shared in (False, True):
        with closing(_Transport(connection, info, batch, 1, shared)) as transport:
            r = measure_level(connection, info, transport, 1, ab)
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
    """<out>/<model>.csv per model, <out>/latency_vs_throughput.png and <out>/perf.json."""
    out_dir = ensure_writable_dir(Path(out_dir), "--out")
    written = []
    for model in dict.fromkeys(r.model for r in report.levels):
        written.append(write_csv([r for r in report.levels if r.model == model], out_dir / f"{model}.csv"))
    if report.levels:
        written.append(plot(report.levels, out_dir / "latency_vs_throughput.png"))
    with atomic_path(out_dir / "perf.json") as tmp:
        Path(tmp).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    written.append(out_dir / "perf.json")
    return written
