"""`tritonize client perf`: load sweeps at bounded concurrency, measured by perf_analyzer or the built-in load generator.

Every request carries the same image (`--image`, default matplotlib's sample photo), in the form the
model of the chosen preprocessing path takes (`--preprocess`: the FP32 tensor, the encoded file, or
UINT8 pixels). `--load-generator auto` measures with the real perf_analyzer when it is found (PATH, or where
`tritonize tools get-perf-analyzer` put it), else with the built-in load generator
(tritonize.client.load: perf_analyzer's synchronous concurrency mode in a process of its own); the
report says which. Either way the results are written as perf_analyzer's `-f` CSV (with its
`--verbose-csv` columns; microseconds; perf_analyzer's own rows when it measured), one file per model,
perf.json, and a latency-vs-throughput plot with all models in one figure. The built-in load generator reads
the server-side split from the statistics API around its window, divided per request, as
perf_analyzer does.

A level whose requests fail (a stub dies, the server goes) is kept: its successes, its failures and the
first error, in the table and perf.json (not in the CSV and the plot, whose figures it would distort).
The sweep then goes on to the next level unless `stop_on_error` (`--stop-on-error`), and stops when the
server is gone.
"""

from __future__ import annotations

from contextlib import closing
from typing import Callable, Sequence

import numpy as np

from tritonize.client.connection import Connection, ModelInfo, server_gone
from tritonize.client.perf.load_generators import BuiltinGenerator, choose_tool, open_generator
from tritonize.client.perf.report import csv_name, plot, write_csv, write_outputs
from tritonize.client.perf.results import (
    CSV_COLUMNS,
    LOAD_GENERATORS,
    SERVER_PARTS,
    UNJUDGED,
    LevelResult,
    PerfInterrupted,
    PerfOptions,
    PerfReport,
)
from tritonize.client.perf.workload import Workload, request_batch
from tritonize.errors import TritonizeError
from tritonize.tools.perf_analyzer import PerfAnalyzer

__all__ = ["CSV_COLUMNS", "LOAD_GENERATORS", "SERVER_PARTS", "UNJUDGED", "LevelResult", "PerfInterrupted", "PerfOptions",
           "PerfReport", "Workload", "csv_name", "plot", "request_batch", "run_perf", "write_csv", "write_outputs"]


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
    tool = choose_tool(options.engine)
    report = PerfReport(connection.url, options, engine=str(tool) if tool else BuiltinGenerator.name)
    for name, info in zip(models, infos):
        batch = request_batch(info, options)
        try:
            if options.shared_memory == "system":
                report.shared_memory_savings[name] = _shared_memory_ab(connection, info, batch, options, tool)
            workload = Workload(info, batch, options.shared_memory == "system", model=name)
            with closing(open_generator(connection, workload, max(options.concurrency), tool, options.timeout)) as generator:
                for level in options.concurrency:
                    result = generator.measure(level, options)
                    report.levels.append(result)
                    if on_level:
                        on_level(result)
                    if result.failures:
                        during = f"{name} at concurrency {level}"
                        if not connection.live():
                            raise server_gone(connection.url, result.error or "", during)
                        if options.stop_on_error:
                            raise TritonizeError(f"{result.failures} request(s) failed during {during} ({result.error}); "
                                                 "stopped there (--stop-on-error)")
        except TritonizeError as e:
            report.error = str(e)
            raise PerfInterrupted(str(e), report) from None
    return report


def _shared_memory_ab(connection: Connection, info: ModelInfo, batch: np.ndarray, options: PerfOptions,
                      tool: PerfAnalyzer | None) -> dict:
    """The same short run (concurrency 1) over plain gRPC and over system shared memory."""
    requests = options.requests or 50
    ab = PerfOptions(concurrency=(1,), batch=options.batch, requests=requests, duration=None, warmup=options.warmup,
                     level_time_limit=options.level_time_limit, timeout=options.timeout, shared_memory=options.shared_memory,
                     engine=options.engine, stability=options.stability)
    figures = {}
    for shared in (False, True):
        with closing(open_generator(connection, Workload(info, batch, shared), 1, tool, options.timeout)) as generator:
            r = generator.measure(1, ab)
        figures["system_shared_memory" if shared else "grpc"] = {
            "p50_ms": r.latency["p50_ms"], "avg_ms": r.latency["avg_ms"], "client_us": r.client_send_us + r.client_recv_us,
            "client_send_us": r.client_send_us, "client_recv_us": r.client_recv_us, "tensor_bytes_on_wire": r.tensor_bytes_on_wire,
        }
    g, m = figures["grpc"], figures["system_shared_memory"]
    return {**figures, "requests": requests, "batch": options.batch,
            "bytes_saved_per_request": g["tensor_bytes_on_wire"] - m["tensor_bytes_on_wire"],
            "client_us_saved_per_request": g["client_us"] - m["client_us"],
            "avg_ms_saved_per_request": g["avg_ms"] - m["avg_ms"]}
