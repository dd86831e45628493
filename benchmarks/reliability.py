"""Reliability of the embedded Triton server under load and under faults (resnet18, random init).

1. load: N batch-1 requests (default 10,000) at concurrency 64 to onnx_model: errors, wrong answers,
   throughput, latency p50/p99, and the RSS of tritonserver and of each backend stub, sampled every
   second, with its slope after warm-up (the first third of the run);
2. faults, each with what was lost (goal: only the requests in flight at the fault, each with an
   error, none with a wrong answer):
   a. a stub killed (kill -9, as the OOM killer does) under load: time until the model answers again;
   b. tritonserver killed under load: what `tritonize client classify` prints, how `tritonize serve` ends;
   c. `tritonize export` killed right after each publish step: are the manifest and the files consistent?

    PYTHONPATH=$PWD .venv/bin/python benchmarks/reliability.py [--requests 10000] [--concurrency 64]

`--stub-only [--repeat N] [--instances K] [--label NAME]` runs only 2a, N times on a fresh server each, with
K instances of onnx_model (the first one is killed), and writes results/reliability-stub-NAME.json. The
server is the `tritonize serve` on PATH's Python path: to compare two commits in one session, run it once
with PYTHONPATH=$PWD and once with PYTHONPATH pointing at a checkout of the other commit.

The server is the real `tritonize serve` (a child process); requests come from tritonclient's asyncio
gRPC client. Writes results/reliability.json and .png and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from common import RESULTS, markdown_table, save  # noqa: E402

from tests.client.conftest import PHOTO  # noqa: E402
from tests.interrupt import killed_after_rename  # noqa: E402
from tests.serve.helpers import Serve  # noqa: E402
from tritonize.client.stats import latency_summary  # noqa: E402
from tritonize.files import sha256_file  # noqa: E402
from tritonize.manifest import Manifest, Status  # noqa: E402
from tritonize.repository_builder import RepoOptions, build_repository, check_repository  # noqa: E402
from tritonize.serve.supervisor import stub_processes  # noqa: E402
from tritonize.verify import Tolerance, compare  # noqa: E402

SAME = Tolerance(max_rel_to_scale=1e-4, min_top1_agreement=1.0)  # batching may change the float sums a little
PUBLISH_STEPS = ("entry recorded as pending", "file renamed into place", "entry recorded as verified")


class Load:
    """Closed-loop batch-1 requests from `concurrency` asyncio workers in a thread, until `count`
    requests were sent or stop(). Each record: (start, end, error or None, wrong answer)."""

    def __init__(self, url: str, model: str, inputs: list[np.ndarray], expected: list[np.ndarray],
                 concurrency: int, count: int | None = None):
        self.url, self.model, self.inputs, self.expected = url, model, inputs, expected
        self.concurrency, self.count = concurrency, count
        self.records: list[tuple[float, float, str | None, bool]] = []
        self._stop = False
        self._thread = threading.Thread(target=lambda: asyncio.run(self._drive()), daemon=True)

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._thread.join()

    def join(self) -> None:
        self._thread.join()

    async def _drive(self) -> None:
        import tritonclient.grpc.aio as aiogrpc
        from tritonclient.utils import InferenceServerException

        client = aiogrpc.InferenceServerClient(self.url)
        sent = 0

        async def worker() -> None:
            nonlocal sent
            while not self._stop and (self.count is None or sent < self.count):
                k = sent % len(self.inputs)
                sent += 1
                tensor = aiogrpc.InferInput("input", [1, 3, 224, 224], "FP32")
                tensor.set_data_from_numpy(self.inputs[k])
                start = time.monotonic()
                try:
                    result = await client.infer(self.model, [tensor], client_timeout=120)
                    wrong = not compare(self.expected[k], result.as_numpy("output"), SAME).passed
                    self.records.append((start, time.monotonic(), None, wrong))
                except InferenceServerException as e:
                    self.records.append((start, time.monotonic(), e.message() or str(e), False))
                    await asyncio.sleep(0.1)  # errors come at once: a client that retries, not a spinning one

        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        finally:
            await client.close()


class MemorySampler:
    """RSS (MB) of tritonserver and of each stub, every `interval` seconds, in a thread."""

    def __init__(self, server_pid: int, interval: float = 1.0):
        self.server_pid, self.interval = server_pid, interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            pids = {"tritonserver": self.server_pid, **stub_processes(self.server_pid)}
            self.samples.append((time.monotonic(), {name: rss for name, pid in pids.items() if (rss := _rss_mb(pid))}))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stub-only", action="store_true", help="only the stub killed under load")
    parser.add_argument("--repeat", type=int, default=1, help="with --stub-only: runs, each on a fresh server")
    parser.add_argument("--instances", type=int, default=1, help="with --stub-only: instances of onnx_model")
    parser.add_argument("--label", default="", help="with --stub-only: names the results file")
    args = parser.parse_args()
    work = RESULTS / "work-reliability"
    artifacts, repo = work / "artifacts", work / "models"
    if not (artifacts / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "tritonize.cli", "export", "--arch", "resnet18", "--weights", "none",
                        "--artifacts", str(artifacts)], check=True)
    build_repository(artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False, force=True,
                                                  instances=args.instances))
    inputs, expected = _references(artifacts)
    if args.stub_only:
        stub_only(repo, inputs, expected, args)
        return
    results = {"uptime_before": uptime(), "requests": args.requests, "concurrency": args.concurrency}
    print(results["uptime_before"], flush=True)

    results["load"], samples = load_run(repo, inputs, expected, args)
    results["stub_killed"], timeline = stub_killed(repo, inputs, expected, args.concurrency)
    results["server_killed"] = server_killed(repo, inputs, expected, args.concurrency, work)
    results["export_killed"] = export_killed(artifacts, work)
    results["uptime_after"] = uptime()
    print(results["uptime_after"])
    save("reliability", results, _figure(samples, timeline))
    print_tables(results)


def _references(artifacts: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Eight inputs and their logits from local onnxruntime: every served answer is checked against them."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(artifacts / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = [np.random.default_rng(k).standard_normal((1, 3, 224, 224), dtype=np.float32) for k in range(8)]
    return inputs, [session.run(["output"], {"input": x})[0] for x in inputs]


def load_run(repo: Path, inputs, expected, args) -> tuple[dict, list]:
    print(f"\n## load: {args.requests} requests at concurrency {args.concurrency}", flush=True)
    with Serve(repo) as serve:
        sampler = MemorySampler(serve.server_pid)
        start = time.monotonic()
        load = Load(serve.grpc_url, "onnx_model", inputs, expected, args.concurrency, args.requests).start()
        load.join()
        seconds = time.monotonic() - start
        sampler.stop()
    errors = [r for r in load.records if r[2]]
    slopes = {}
    for name in sorted({n for _, rss in sampler.samples for n in rss}):
        points = [(t - start, rss[name]) for t, rss in sampler.samples if name in rss]
        after = [(t, m) for t, m in points if t >= seconds / 3]  # warm-up: the first third of the run
        if len(after) >= 6:
            slopes[name] = {"first_mb": round(points[0][1], 1), "after_warmup_mb": round(after[0][1], 1),
                            "last_mb": round(points[-1][1], 1), "slope_mb_per_min": _slope(after),
                            "slope_last_third_mb_per_min": _slope([(t, m) for t, m in after if t >= seconds * 2 / 3])}
    figures = {
        "requests": len(load.records), "errors": len(errors), "wrong_answers": sum(r[3] for r in load.records),
        "error_messages": sorted({r[2] for r in errors}), "seconds": round(seconds, 1),
        "throughput_per_s": round(len(load.records) / seconds, 1),
        "latency": latency_summary([r[1] - r[0] for r in load.records if not r[2]], (50, 99)),
        "warmup_s": round(seconds / 3, 1), "rss": slopes,
    }
    print(figures, flush=True)
    return figures, [(t - start, rss) for t, rss in sampler.samples]


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    return round(float(np.polyfit([t for t, _ in points], [m for _, m in points], 1)[0] * 60), 2)


def _lost(records, fault: float) -> dict:
    """What a fault at `fault` cost: failed requests in flight at that moment, failed ones sent after."""
    failed = [r for r in records if r[2]]
    return {
        "failed_in_flight": sum(1 for r in failed if r[0] < fault),
        "failed_sent_after": sum(1 for r in failed if r[0] >= fault),
        "wrong_answers": sum(r[3] for r in records),
        "error_messages": sorted({r[2] for r in failed}),
    }


def stub_killed(repo: Path, inputs, expected, concurrency: int) -> tuple[dict, list]:
    print("\n## fault: the stub killed under load", flush=True)
    with Serve(repo) as serve:
        load = Load(serve.grpc_url, "onnx_model", inputs, expected, concurrency).start()
        time.sleep(10)  # under load before the fault
        pid = stub_processes(serve.server_pid)["onnx_model_0_0"]
        os.kill(pid, signal.SIGKILL)
        fault = time.monotonic()
        try:
            line = serve.expect("onnx_model: ", timeout=30)
        except AssertionError:
            line = "(no reload within 30 s)"
        time.sleep(10)  # and after it
        load.stop()
    healed = min((r[0] for r in load.records if not r[2] and r[0] > fault), default=None)
    failed = [r[1] for r in load.records if r[2] and r[1] > fault]
    figures = {
        "requests": len(load.records), "supervisor_log": line,
        "time_to_heal_s": round(healed - fault, 2) if healed else None,
        "last_failure_s": round(max(failed) - fault, 2) if failed else None, **_lost(load.records, fault),
    }
    print(figures, flush=True)
    begin = min(r[0] for r in load.records)
    return figures, [(r[0] - begin, r[2] is None) for r in load.records] + [(fault - begin, None)]


def stub_only(repo: Path, inputs, expected, args) -> None:
    runs = [stub_killed(repo, inputs, expected, args.concurrency)[0] for _ in range(args.repeat)]
    save(f"reliability-stub{'-' + args.label if args.label else ''}",
         {"instances": args.instances, "concurrency": args.concurrency, "label": args.label, "runs": runs})
    print("\n" + markdown_table(
        ["run", "failed in flight", "failed sent after", "wrong answers", "heal s", "last failure s", "supervisor"],
        [[k + 1, r["failed_in_flight"], r["failed_sent_after"], r["wrong_answers"], r["time_to_heal_s"],
          r["last_failure_s"], r["supervisor_log"]] for k, r in enumerate(runs)]))


def server_killed(repo: Path, inputs, expected, concurrency: int, work: Path) -> dict:
    print("\n## fault: tritonserver killed under load", flush=True)
    images = work / "images"
    images.mkdir(exist_ok=True)
    for k in range(200):  # enough that classify is mid-way (32 images a request) when the server dies
        shutil.copy2(PHOTO, images / f"photo_{k:03}.jpg")
    with Serve(repo) as serve:
        load = Load(serve.grpc_url, "onnx_model", inputs, expected, concurrency).start()
        time.sleep(5)
        classify = subprocess.Popen([str(Path(sys.executable).parent / "tritonize"), "client", "classify",
                                     *sorted(map(str, images.iterdir())), "--url", serve.grpc_url],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        os.kill(serve.server_pid, signal.SIGKILL)
        fault = time.monotonic()
        serve_code = serve.process.wait(60)
        serve_error = serve.expect("error: ")
        out, err = classify.communicate(timeout=120)
        time.sleep(1)
        load.stop()
    client_errors = [line for line in err.splitlines() if line.startswith("error:")]
    figures = {
        "classify_exit_code": classify.returncode, "classify_error_lines": client_errors,
        "classify_results_before_the_fault": out.count("(onnx_model)"),
        "serve_exit_code": serve_code, "serve_error": serve_error, **_lost(load.records, fault),
    }
    print(figures, flush=True)
    return figures


def export_killed(artifacts: Path, work: Path) -> list[dict]:
    """`tritonize export --force` (TorchScript then ONNX) killed right after each publish step."""
    print("\n## fault: export killed after each publish step", flush=True)
    rows = []
    for renames in range(1, 2 * len(PUBLISH_STEPS) + 1):
        copy = work / "export-killed"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(artifacts, copy)
        repo = work / "export-killed-models"
        build_repository(copy, repo, RepoOptions(kind="cpu", warmup=False, ensembles=False, force=True))
        start = time.monotonic()
        killed = killed_after_rename(copy, renames, "export", "--arch", "resnet18", "--weights", "none",
                                     "--artifacts", copy, "--force")
        manifest = Manifest.load(copy)
        entries = {}
        for key in ("torchscript", "onnx"):
            entry = manifest.artifacts[key]
            entries[key] = {
                "status": entry.status.value,
                "file_is_the_entry": sha256_file(manifest.path(entry)) == entry.sha256,
                "consistent": entry.status is Status.pending or sha256_file(manifest.path(entry)) == entry.sha256,
                "next_export": "redoes it" if manifest.file_problem(entry) else "up to date",
            }
        flagged = [f.message for f in check_repository(repo, copy) if f.model == "artifacts"]
        fmt = "torchscript" if renames <= len(PUBLISH_STEPS) else "onnx"
        rows.append({"killed_after": f"{fmt}: {PUBLISH_STEPS[(renames - 1) % len(PUBLISH_STEPS)]}", "killed": killed,
                     "seconds": round(time.monotonic() - start, 1), "entries": entries, "repo_check_artifact_errors": flagged})
        print(rows[-1], flush=True)
    return rows


def _figure(samples, timeline):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, heal) = plt.subplots(1, 2, figsize=(13, 4.5))
    for name in sorted({n for _, rss in samples for n in rss}):
        points = [(t, rss[name]) for t, rss in samples if name in rss]
        mem.plot([t for t, _ in points], [m for _, m in points], label=name)
    mem.set(xlabel="seconds", ylabel="RSS (MB)", title="load: RSS of tritonserver and its stub")
    mem.legend()
    fault = next(t for t, ok in timeline if ok is None)
    seconds = np.arange(0, max(t for t, _ in timeline) + 1, 0.5)
    for ok, label in ((True, "answered"), (False, "failed")):
        counts, _ = np.histogram([t for t, o in timeline if o is ok], bins=seconds)
        heal.plot(seconds[:-1] - fault, counts * 2, label=label)
    heal.axvline(0, color="k", linestyle=":", label="stub killed")
    heal.set(xlabel="seconds from the kill", ylabel="requests/s (by send time)", title="stub killed under load")
    heal.legend()
    return fig


def print_tables(results: dict) -> None:
    load = results["load"]
    print("\n" + markdown_table(
        ["requests", "errors", "wrong answers", "seconds", "infer/s", "p50 ms", "p99 ms"],
        [[load["requests"], load["errors"], load["wrong_answers"], load["seconds"], load["throughput_per_s"],
          round(load["latency"]["p50_ms"], 1), round(load["latency"]["p99_ms"], 1)]]))
    print("\n" + markdown_table(
        ["process", "first MB", "after warm-up MB", "last MB", "slope after warm-up MB/min", "slope, last third"],
        [[name, r["first_mb"], r["after_warmup_mb"], r["last_mb"], r["slope_mb_per_min"], r["slope_last_third_mb_per_min"]]
         for name, r in load["rss"].items()]))
    stub, server = results["stub_killed"], results["server_killed"]
    print("\n" + markdown_table(
        ["fault", "failed in flight", "failed sent after", "wrong answers", "heal s"],
        [["stub killed", stub["failed_in_flight"], stub["failed_sent_after"], stub["wrong_answers"], stub["time_to_heal_s"]],
         ["server killed", server["failed_in_flight"], server["failed_sent_after"], server["wrong_answers"], "-"]]))
    print("\n" + markdown_table(
        ["export killed after", "torchscript", "onnx", "repo check"],
        [[row["killed_after"], *(f"{e['status']}, file {'=' if e['file_is_the_entry'] else '!='} entry, next: {e['next_export']}"
                                 for e in row["entries"].values()), len(row["repo_check_artifact_errors"])]
         for row in results["export_killed"]]))


if __name__ == "__main__":
    main()
