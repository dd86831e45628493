"""The two load generators a level is measured with: the built-in one and the real perf_analyzer."""

from __future__ import annotations

import time

from tritonize.client.connection import Connection, short_reason
from tritonize.client.load import EXITED, LoadError, LoadProcess
from tritonize.client.perf import perf_analyzer_runs as pa
from tritonize.client.perf.results import SERVER_PARTS, LevelResult, PerfOptions
from tritonize.client.perf.workload import SharedMemoryRegions, Workload
from tritonize.client.stats import latency_summary
from tritonize.errors import TritonizeError
from tritonize.progress import say
from tritonize.tools.perf_analyzer import PerfAnalyzer


def failed_level(workload: Workload, concurrency: int, engine: str, failures: int, error: str,
                 measured: dict | None = None) -> LevelResult:
    """A level whose requests failed, with what it measured before (`measured`: LevelResult fields; none when
    it failed before its window)."""
    figures = measured or {"requests": 0, "seconds": 0.0, "throughput": 0.0, "latency": {"count": 0},
                           "client_send_us": 0.0, "client_recv_us": 0.0, "response_wait_us": 0.0,
                           "server_us": None, "server_batches": None}
    return LevelResult(model=workload.model, preprocess=workload.info.path, served=workload.info.name,
                       concurrency=concurrency, batch=len(workload.batch), transport=workload.transport,
                       tensor_bytes_on_wire=workload.tensor_bytes_on_wire, engine=engine,
                       failures=max(1, failures), error=error, **figures)


def server_delta(before: dict, after: dict) -> tuple[dict, float, int]:
    """Per-request server times (us) between two statistics snapshots, the mean executed batch, and the request count."""
    zero = (0, 0)  # (count, summed ns) of a part the statistics do not list yet
    delta = {k: (count - before.get(k, zero)[0], ns - before.get(k, zero)[1]) for k, (count, ns) in after.items()}
    part = lambda k: delta.get(k, zero)  # noqa: E731
    per_request = {p: (part(p)[1] / part(p)[0] / 1e3 if part(p)[0] else 0.0) for p in SERVER_PARTS}
    executions, inferences = part("executions")
    return per_request, (inferences / executions if executions else 0.0), part("success")[0]


def server_split(before: dict[str, dict], after: dict[str, dict], answered: int, info) -> dict:
    """LevelResult's server fields from the statistics of the served model and of its steps (`info.steps`, an
    ensemble's), read before and after a window that `answered` requests: per request and the classifier's batch;
    through an ensemble the steps' times summed, and each step's. Unknown when a model's statistics started again
    (reloaded: a stub crashed and the supervisor loaded it again) or count fewer requests than were answered: its
    counters are then no difference of one window, and the times they would give mean nothing (even negative)."""
    unknown = {"server_us": None, "server_batches": None, "steps": {}}
    for model in (info.name, *info.steps):
        if model not in before or model not in after:
            return {**unknown, "server_note": f"the statistics of {model} could not be read around the level: the "
                                              "server's split of the time is unknown"}
        was, now = before[model], after[model]
        if any(now.get(key, (0, 0))[i] < value[i] for key, value in was.items() for i in (0, 1)):
            return {**unknown, "server_note": f"the statistics of {model} started again during the level (it was "
                                              "reloaded): the server's split of the time is unknown"}
        counted = now.get("success", (0, 0))[0] - was.get("success", (0, 0))[0]
        if counted < answered:
            return {**unknown, "server_note": f"the statistics of {model} count {counted} of the {answered} requests "
                                              "answered (it was reloaded during the level, or recorded them late): the "
                                              "server's split of the time is unknown"}
    if not info.steps:
        per_request, batches, _ = server_delta(before[info.name], after[info.name])
        return {"server_us": per_request, "server_batches": batches, "steps": {}}
    steps = {}
    for step in info.steps:
        per_request, batches, _ = server_delta(before[step], after[step])
        steps[step] = {"server_us": per_request, "server_batches": batches}
    return {"server_us": {part: sum(s["server_us"][part] for s in steps.values()) for part in SERVER_PARTS},
            "server_batches": steps[info.classifier]["server_batches"], "steps": steps}


RECORD_WAIT_S = 2.0  # how long the built-in load generator waits for the server to record the requests it answered


class BuiltinGenerator:
    """The built-in load generator (tritonize.client.load): requests serialized once here, the load loop in
    a process of its own; the server-side split from the statistics API, read around the window."""

    name = "builtin"

    def __init__(self, connection: Connection, workload: Workload, slots: int, timeout: float):
        self.connection, self.workload, self.load = connection, workload, None
        # It reads the statistics API around each window: a server that restricts it says so now, in one line.
        connection.statistics(workload.info.name)
        self.regions = SharedMemoryRegions(connection, workload, slots) if workload.shared_memory else None
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
            return failed_level(self.workload, concurrency, self.name, 1, f"{e.code}: {e.details}")  # in the warm-up
        before = stats["before"]
        after = self._recorded(before, window.answered)
        server = server_split(before or {}, after or {}, window.answered, info)
        latencies = [done - sent for sent, done in window.requests]
        wait = sum(latencies) / len(latencies) * 1e6 if latencies else 0.0
        batch = len(self.workload.batch)
        return LevelResult(
            model=self.workload.model, preprocess=info.path, served=info.name, concurrency=concurrency, batch=batch, transport=self.workload.transport,
            requests=len(latencies), seconds=round(window.seconds, 4),
            throughput=len(latencies) * batch / window.seconds if window.seconds > 0 else 0.0,
            latency=latency_summary(latencies), client_send_us=0.0, client_recv_us=0.0, response_wait_us=wait,
            tensor_bytes_on_wire=self.workload.tensor_bytes_on_wire, engine=self.name, failures=window.failures,
            error=window.error, **server,
        )

    def _recorded(self, since: dict | None, answered: int) -> dict | None:
        """The statistics once they count the `answered` successes since `since`, for every model read. Triton
        records a request when it releases it, just after the client has its response (here 11 reads in 100 right
        after a response missed it), so a plain read would move a window's last requests, and the warm-up's, into
        the next window."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            stats = self._statistics()
            if stats is None or since is None or time.monotonic() >= deadline:
                return stats
            done = {m: (stats[m].get("success", (0, 0))[0], since.get(m, {}).get("success", (0, 0))[0]) for m in stats}
            if all(now >= base + answered or now < base for now, base in done.values()):  # recorded, or reloaded
                return stats
            time.sleep(0.005)

    def _statistics(self) -> dict[str, dict] | None:
        """The statistics of the served model and of its steps (an ensemble's), or None while the server cannot give
        them (a model reloading after a crash, the server gone): a level's requests say what happened, the split
        of its time is then unknown."""
        info = self.workload.info
        try:
            return {model: self.connection.statistics(model) for model in (info.name, *info.steps)}
        except TritonizeError:
            return None

    def close(self) -> None:
        if self.load is not None:
            self.load.close()
        if self.regions is not None:
            self.regions.close()


class PerfAnalyzerGenerator:
    """Each level one run of the real perf_analyzer (tritonize.client.perf.perf_analyzer_runs), read from its own CSV."""

    def __init__(self, connection: Connection, workload: Workload, tool: PerfAnalyzer):
        self.connection, self.workload, self.tool = connection, workload, tool
        self.name = f"perf_analyzer {tool.version}"
        # perf_analyzer reads the statistics API: a server that restricts it says so now, in one line.
        connection.statistics(workload.info.name)
        if connection.key is not None:
            say("perf_analyzer takes the control key on its command line (-H): other users of this machine can see "
                "it in the process list; --load-generator builtin keeps it off")
        self.runs = pa.PerfAnalyzerRuns(tool, workload.info.input_name, workload.batch[0])

    def measure(self, concurrency: int, options: PerfOptions) -> LevelResult:
        info, batch = self.workload.info, len(self.workload.batch)
        during = f"during {info.name} at concurrency {concurrency}"
        failed = self._warm_up(options.warmup)
        if failed:
            return failed_level(self.workload, concurrency, self.name, 1, failed)
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
            per_window = options.requests  # --request-count: one window of that many
            return failed_level(self.workload, concurrency, self.name, e.failures, e.first_error,
                                pa.passes_figures(e.passes, batch, window_s, per_window, concurrency))
        except pa.PerfAnalyzerFailed as e:
            if e.gone:
                raise TritonizeError(f"lost the Triton server at {self.connection.url} {during} ({e}); "
                                     "is it still running? (`tritonize serve`)") from None
            raise
        measured = pa.level_figures(row, figures, batch, info.classifier, counted=options.requests is not None)
        measured["steps"] = {step: measured["steps"][step] for step in info.steps if step in measured["steps"]}
        if info.steps and len(measured["steps"]) < len(info.steps):  # its CSV row is the ensemble's own: not that
            measured.update(server_us=None, server_batches=None, steps={}, server_note=(
                f"perf_analyzer's summary does not give every step of {info.name}: the server's side is unknown"))
        return LevelResult(model=self.workload.model, preprocess=info.path, served=info.name, concurrency=concurrency,
                           batch=batch, transport=self.workload.transport,
                           tensor_bytes_on_wire=self.workload.tensor_bytes_on_wire, engine=self.name, csv=row,
                           **measured)

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


def choose_tool(load_generator: str) -> PerfAnalyzer | None:
    """The perf_analyzer that measures (`auto` finds one when it can), or None for the built-in load generator."""
    from tritonize.tools import perf_analyzer as tool

    if load_generator == "builtin":
        return None
    if load_generator == "perf_analyzer":
        return tool.require()
    found = tool.find()
    if found is None:
        say(f"perf_analyzer not found (on PATH or in {tool.fetched_path().parent.parent}; `{tool.GET_COMMAND}` "
            "gets it): measuring with the built-in load generator")
    return found


def open_generator(connection: Connection, workload: Workload, slots: int, tool: PerfAnalyzer | None, timeout: float):
    return PerfAnalyzerGenerator(connection, workload, tool) if tool else BuiltinGenerator(connection, workload, slots, timeout)
