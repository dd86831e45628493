"""`client perf` measured by the real perf_analyzer: one run per level, read back from its own CSV.

The options map onto its flags: `-b` batch, `--concurrency-range C`, `--shared-memory system` (with
`--output-shared-memory-size`), `--duration S` -> three time windows of S/3 (`-p`), `--requests N` ->
`--request-count N` (exactly N requests, one window), `--stability` -> `-s`. Every request
carries the same image as the built-in load generator sends, in perf_analyzer's `--input-data` JSON (base64 of
the tensor's bytes; a BYTES element with its 4-byte length first, as its docs require). The CSV row
(`-f` with `--verbose-csv`) is kept as perf_analyzer wrote it; what the CSV lacks (request count, the
batch the server executed) comes from its stdout.

Exit codes seen with 2.51: 0 done; 2 no stable measurement within `-r` windows (no CSV written);
99 anything else (unknown model, server unreachable, a refused request), with the reason on stdout.

A failed request ends perf_analyzer 2.51's run: it has no `--continue-on-error` (later releases do; 2.51
answers "unrecognized option"), each worker thread stops at its first error ("Thread [i] had error: ...")
and the run exits 99 after the window in progress, writing no CSV. `-v` makes it print every window it
completed ("Pass [n] throughput: ... Avg latency: ..."): what the level measured before the failure
(`RequestsFailed`).
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.tools.perf_analyzer import PerfAnalyzer

SERVER_COLUMNS = {"queue": "Server Queue", "compute_input": "Server Compute Input",
                  "compute_infer": "Server Compute Infer", "compute_output": "Server Compute Output"}
MAX_TRIALS = 10  # perf_analyzer's -r default: windows tried before it gives up on stability
GONE = ("failed to connect", "Connection refused", "Socket closed", "UNAVAILABLE", "Couldn't connect")
# One composing model of an ensemble in perf_analyzer 2.51's summary (without a response cache): its name, counts and
# "Avg request latency: N usec (overhead N usec + queue N usec + compute input N usec + compute infer N usec + compute
# output N usec)".
COMPOSING = re.compile(r"^\s*(\S+), version: \S+\s*\n\s*Inference count: (\d+)\s*\n\s*Execution count: (\d+)\s*\n"
                       r"(?:.*\n)*?.*?Avg request latency: \d+ usec \(overhead \d+ usec \+ queue (\d+) usec \+ "
                       r"compute input (\d+) usec \+ compute infer (\d+) usec \+ compute output (\d+) usec\)", re.M)


class PerfAnalyzerFailed(TritonizeError):
    """perf_analyzer stopped with an error; `gone` when it lost the server."""

    def __init__(self, message: str, gone: bool):
        super().__init__(message)
        self.gone = gone


class RequestsFailed(PerfAnalyzerFailed):
    """Requests failed during the level: `passes` the windows perf_analyzer completed before, as (inferences/s,
    average latency us); `failures` the worker threads that stopped on an error; `first_error` the first one's."""

    def __init__(self, message: str, gone: bool, passes: list[tuple[float, float]], failures: int, first_error: str):
        super().__init__(message, gone)
        self.passes, self.failures, self.first_error = passes, failures, first_error


def input_data(name: str, sample: np.ndarray) -> dict:
    """perf_analyzer's --input-data JSON for one input: `sample` is one image in the form the model takes
    (perf_analyzer repeats it for every image of a batch)."""
    if sample.dtype == np.object_:
        from tritonclient.utils import serialize_byte_tensor

        raw = serialize_byte_tensor(sample).item()  # 4-byte length + bytes, per element
    else:
        raw = np.ascontiguousarray(sample).tobytes()
    return {"data": [{name: {"content": {"b64": base64.b64encode(raw).decode()}, "shape": list(sample.shape)}}]}


def time_window_ms(seconds: float | None) -> int:
    """A level of `seconds` is three of perf_analyzer's time windows (`-p`, at least 100 ms)."""
    return max(100, int(round((seconds or 5.0) * 1000 / 3)))


def argv(tool: PerfAnalyzer, model: str, url: str, data_file: Path, csv_file: Path, *, concurrency: int, batch: int,
         batching: bool, seconds: float | None, requests: int | None, stability: float, shared_memory: str,
         output_bytes: int, headers: dict[str, str] | None = None, root_certificates: str | None = None) -> list[str]:
    """The command line for one level. `headers`: gRPC metadata for every call (the control key for the
    statistics it reads; 2.51's --help says -H is HTTP only, but its gRPC calls send it too, tested here);
    `root_certificates`: the CA of a server serving gRPC over TLS."""
    args = [str(tool.path), "-m", model, "-i", "grpc", "-u", url, "--input-data", str(data_file),
            "--concurrency-range", str(concurrency), "-s", f"{stability:g}", "-r", str(MAX_TRIALS),
            "-f", str(csv_file), "--verbose-csv", "-v"]
    if batching:
        args += ["-b", str(batch)]
    if requests is not None:
        args += ["--request-count", str(requests)]  # exactly that many (count windows sent more: 6 became 26 to 74)
    else:
        args += ["-p", str(time_window_ms(seconds))]
    for name, value in (headers or {}).items():
        args += ["-H", f"{name}:{value}"]
    if root_certificates:
        args += ["--ssl-grpc-use-ssl", "true", "--ssl-grpc-root-certifications-file", root_certificates]
    if shared_memory == "system":
        args += ["--shared-memory", "system", "--output-shared-memory-size", str(output_bytes)]
    return args


def run_level(command: list[str], csv_file: Path, during: str, timeout: float) -> tuple[dict, dict]:
    """Run perf_analyzer for one level: its CSV row (as written) and the figures parsed from stdout."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PerfAnalyzerFailed(f"perf_analyzer did not finish {during} within {timeout:.0f} s", gone=False) from None
    output = result.stdout + result.stderr
    if result.returncode == 2:
        raise PerfAnalyzerFailed(
            f"perf_analyzer found no stable measurement {during} within {MAX_TRIALS} windows (the machine is busy?); "
            "raise --stability or --duration", gone=False)
    if result.returncode != 0 or not csv_file.is_file():
        errors = [line.strip() for line in output.splitlines() if "error" in line.lower()] or output.strip().splitlines()[-1:]
        reason = errors[0] if errors else f"exit code {result.returncode}"
        failed = re.findall(r"Thread \[\d+\] had error: (.+)", output)
        if failed:
            passes = [(float(t), float(us)) for t, us in re.findall(
                r"Pass \[\d+\] throughput: ([\d.]+) infer/sec\. Avg latency: (\d+) usec", output)]
            raise RequestsFailed(f"requests failed {during}: {failed[0].strip()}", any(g in failed[0] for g in GONE),
                                 passes, len(failed), failed[0].strip())
        raise PerfAnalyzerFailed(f"perf_analyzer failed {during}: {reason}", gone=any(g in reason for g in GONE))
    with open(csv_file, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise PerfAnalyzerFailed(f"perf_analyzer wrote {len(rows)} CSV rows {during}, expected one", gone=False)
    return rows[0], stdout_figures(result.stdout)


def stdout_figures(text: str) -> dict:
    """From the last level of perf_analyzer's summary: client request count, server inference and execution
    counts, and for an ensemble each composing model's (its counts, and its times per request in `server_us`)."""
    summary = text[max(0, text.rfind("Request count:")):]
    top, _, composing = summary.partition("Composing models:")
    found = {}
    for key, label, where in (("requests", "Request count", summary), ("inferences", "Inference count", top),
                              ("executions", "Execution count", top)):
        value = re.search(rf"{label}: (\d+)", where)
        if value:
            found[key] = int(value[1])
    steps = {}
    for name, inferences, executions, *times in COMPOSING.findall(composing):
        steps[name] = {"inferences": int(inferences), "executions": int(executions),
                       "server_us": dict(zip(SERVER_COLUMNS, (float(t) for t in times)))}
    if steps:
        found["steps"] = steps
    return found


def count_window_seconds(requests: int, concurrency: int, latency_us: float, window_s: float) -> float:
    """How long a --request-count window's requests took. perf_analyzer 2.51 looks whether the count is reached once
    a second, and its window, and the throughput it reports, end at that look: 320 images gave 320/6, 320/7 and 320/8
    img/s. Each of its `concurrency` workers keeps one request in flight, back to back, so the requests took the
    busiest worker's share at their mean latency: that, within the second before the window's end."""
    took = math.ceil(requests / max(1, concurrency)) * latency_us / 1e6
    return min(window_s, max(window_s - 1.0, took))


def level_figures(row: dict, figures: dict, batch: int, classifier: str | None = None, counted: bool = False) -> dict:
    """LevelResult fields from perf_analyzer's CSV row (microseconds) and stdout figures. Through an ensemble (its
    composing models in `figures`), the server's side is its steps': their times summed, as perf_analyzer's summary
    sums them (its CSV row has the ensemble's own statistics: no queue, one execution of batch 1 per request), and
    the batch of `classifier`. `counted`: a --request-count run, whose time is `count_window_seconds`."""
    us = lambda column: float(row[column])  # noqa: E731
    throughput = float(row["Inferences/Second"])
    requests = figures.get("requests", 0)
    if counted and throughput and requests:
        seconds = count_window_seconds(requests, int(row["Concurrency"]), us("Avg latency"), requests * batch / throughput)
        throughput = requests * batch / seconds
    batches = lambda f: f["inferences"] / f["executions"] if f.get("executions") else 0.0  # noqa: E731
    steps = {name: {"server_us": f["server_us"], "server_batches": batches(f)} for name, f in figures.get("steps", {}).items()}
    if steps:
        server_us = {part: sum(s["server_us"][part] for s in steps.values()) for part in SERVER_COLUMNS}
        server_batches = steps[classifier]["server_batches"] if classifier in steps else None
    else:
        server_us, server_batches = {part: us(column) for part, column in SERVER_COLUMNS.items()}, batches(figures)
    return {
        "requests": requests,
        "seconds": round(requests * batch / throughput, 4) if throughput else 0.0,
        "throughput": throughput,  # perf_analyzer's, but for a --request-count run
        "latency": {"count": requests, "avg_ms": us("Avg latency") / 1e3,
                    **{f"p{p}_ms": us(f"p{p} latency") / 1e3 for p in (50, 90, 95, 99)}},
        "client_send_us": us("Client Send"),
        "client_recv_us": us("Client Recv"),
        "response_wait_us": us("response wait"),
        "server_us": server_us,
        "server_batches": server_batches,
        "steps": steps,
    }


def passes_figures(passes: list[tuple[float, float]], batch: int, window_s: float | None, per_window: int | None,
                   concurrency: int = 1) -> dict:
    """LevelResult fields from the windows perf_analyzer completed before requests failed: requests counted per
    window (time windows: inferences/s x the window / batch; a request count: that count, whose time is
    `count_window_seconds`), throughput and average latency over them. Its percentiles come only with a finished
    run: not known here."""
    counts = [per_window if per_window else round(throughput * (window_s or 0) / batch) for throughput, _ in passes]
    requests = sum(counts)
    took = lambda n, throughput, us: (count_window_seconds(n, concurrency, us, n * batch / throughput)  # noqa: E731
                                      if per_window else n * batch / throughput)
    seconds = sum(took(n, throughput, us) for n, (throughput, us) in zip(counts, passes) if throughput)
    avg_us = sum(n * us for n, (_, us) in zip(counts, passes)) / requests if requests else 0.0
    return {"requests": requests, "seconds": round(seconds, 4), "throughput": requests * batch / seconds if seconds else 0.0,
            "latency": {"count": requests, "avg_ms": avg_us / 1e3}, "client_send_us": 0.0, "client_recv_us": 0.0,
            "response_wait_us": avg_us, "server_us": None, "server_batches": None}  # reported for a finished run only


class PerfAnalyzerRuns:
    """The input data file and one perf_analyzer run per level, in a private temporary directory."""

    def __init__(self, tool: PerfAnalyzer, input_name: str, sample: np.ndarray):
        self.tool = tool
        self._dir = tempfile.TemporaryDirectory(prefix="tritonize-perf-analyzer-")
        self.data_file = Path(self._dir.name) / "input_data.json"
        self.data_file.write_text(json.dumps(input_data(input_name, sample)))
        self._runs = 0

    def next_csv(self) -> Path:
        self._runs += 1
        return Path(self._dir.name) / f"level_{self._runs}.csv"

    def close(self) -> None:
        self._dir.cleanup()
