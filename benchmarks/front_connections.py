"""10,000 slow connections against `tritonize serve` (embedded engine, resnet18 as onnx_model) while another client
goes on: each slow connection sends the start of a request head, then a byte every few seconds, and is opened again
whenever the front closes it (they all arrive at once, and time out together); meanwhile a client sends GET
/v2/health/ready and a batch-1 gRPC inference, each on a new connection, every 0.2 s, first alone (--quiet-seconds),
then beside them. Counts the client's answers and failures and their latencies, serve's CPU time meanwhile (the front
runs in serve's process; tritonserver in another), and serve's log (its stderr).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/front_connections.py [--connections 10000] [--seconds 60]

Writes results/front_connections.json and .png (each request's latency over time) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import errno
import multiprocessing
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from common import artifacts, markdown_table, save  # noqa: E402

from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.serve.process import choose_ports  # noqa: E402


def slow_clients(port: int, count: int, seconds: float, opened) -> None:
    """`count` connections kept open for `seconds`, each sending a head a byte at a time, every 3 s (in a process of
    its own: the measuring client must not wait on it). `opened`: a shared counter of the connections opened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    selector, conns = selectors.DefaultSelector(), {}

    def connect():
        s = socket.socket()
        s.setblocking(False)
        code = s.connect_ex(("127.0.0.1", port))
        if code not in (0, errno.EINPROGRESS):
            s.close()
            return
        conns[s] = [b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ", 0.0]
        selector.register(s, selectors.EVENT_READ)
        opened.value += 1

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while len(conns) < count:
            connect()
        for key, _ in selector.select(timeout=0.2):  # readable: an answer (408/503) or the close
            s = key.fileobj
            try:
                s.recv(4096)
            except OSError:
                pass
            selector.unregister(s)
            s.close()
            del conns[s]
        now = time.monotonic()
        for s, state in list(conns.items()):
            if now - state[1] >= 3:
                try:
                    s.send(state[0][:1] or b"a")
                    state[0], state[1] = state[0][1:], now
                except OSError:
                    pass
    for s in conns:
        s.close()


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> int:
    return int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("VmRSS:")).split()[1]) // 1024


def rounds(ports, until, samples: list, phase: str, t0: float, opened=None) -> None:
    """A health check and a batch-1 gRPC inference, each on a new connection, every 0.2 s while `until()`: each
    appended to `samples` as (phase, kind, seconds since the start, ms or None when it failed, error, connections opened)."""
    import tritonclient.grpc as grpcclient

    x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))

    def health():
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=10) as r:
            assert r.status == 200

    def infer():
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}") as client:
            client.infer("onnx_model", [x], client_timeout=10)

    while until():
        for kind, call in (("health", health), ("grpc", infer)):
            started = time.perf_counter()
            try:
                call()
                ms, error = (time.perf_counter() - started) * 1000, None
            except Exception as e:  # noqa: BLE001 - each failure is the finding
                ms, error = None, repr(e)[:120]
            samples.append((phase, kind, time.monotonic() - t0, ms, error, opened.value if opened else 0))
        time.sleep(0.2)


def figure(samples):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for kind, colour in (("health", "tab:blue"), ("grpc", "tab:orange")):
        ok = [(t, ms) for _, k, t, ms, _, _ in samples if k == kind and ms is not None]
        ax.scatter([t for t, _ in ok], [ms for _, ms in ok], s=6, color=colour,
                   label={"health": "GET /v2/health/ready", "grpc": "gRPC infer, batch 1"}[kind])
        failed = [t for _, k, t, ms, _, _ in samples if k == kind and ms is None]
        ax.scatter(failed, [10_000] * len(failed), marker="x", color=colour)
    start = next((t for phase, _, t, _, _, _ in samples if phase == "attack"), None)
    if start is not None:
        ax.axvline(start, color="grey", linestyle="--", label="slow connections start")
    ax.set_yscale("log")
    ax.set_xlabel("seconds")
    ax.set_ylabel("ms (x: failed)")
    ax.set_title("Another client's requests while slow connections arrive")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--quiet-seconds", type=float, default=10, help="the client alone first, in the same run")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with tempfile.TemporaryDirectory(prefix="front-connections-") as work:
        repo = Path(work) / "models"
        build_repository(artifacts("resnet18"), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
        ports = choose_ports("127.0.0.1", None, None, None)
        log = Path(work) / "serve.log"
        with open(log, "wb") as err:
            serve = subprocess.Popen([str(Path(sys.executable).parent / "tritonize"), "serve", str(repo), "--engine",
                                      "embedded", "--http-port", str(ports.http), "--grpc-port", str(ports.grpc),
                                      "--metrics-port", str(ports.metrics), "--open-control-apis"],
                                     stdout=subprocess.DEVNULL, stderr=err)
        try:
            while b"serving; Ctrl-C" not in log.read_bytes():
                assert serve.poll() is None, log.read_text()
                time.sleep(0.5)
            samples, t0 = [], time.monotonic()
            rounds(ports, lambda: time.monotonic() < t0 + args.quiet_seconds, samples, "quiet", t0)
            start_size, rss_before, cpu_before = log.stat().st_size, rss_mb(serve.pid), cpu_seconds(serve.pid)
            spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: gRPC's threads do not survive a fork
            opened = spawn.Value("l", 0)
            attack = spawn.Process(target=slow_clients, args=(ports.http, args.connections, args.seconds, opened))
            attack.start()
            rss = [rss_before]

            def attacking() -> bool:
                rss.append(rss_mb(serve.pid))
                return attack.is_alive()

            rounds(ports, attacking, samples, "attack", t0, opened)
            attack.join()
            cpu = cpu_seconds(serve.pid) - cpu_before
            text = log.read_bytes()[start_size:]
        finally:
            serve.terminate()
            serve.wait(60)
    opened = opened.value
    summary = {}
    for phase in ("quiet", "attack"):
        for kind in ("health", "grpc"):
            ms = [m for p, k, _, m, _, _ in samples if p == phase and k == kind and m is not None]
            errors = [e for p, k, _, m, e, _ in samples if p == phase and k == kind and m is None]
            summary[f"{phase} {kind}"] = {"served": len(ms), "failed": len(errors), "first_failures": errors[:3],
                                          "median_ms": statistics.median(ms) if ms else None,
                                          "p90_ms": percentile(ms, 0.9) if ms else None, "max_ms": max(ms, default=None)}
    result = {"connections": args.connections, "seconds": args.seconds, "slow_connections_opened": opened,
              "clients": summary, "serve_cpu_s_during": cpu,
              "serve_cpu_us_per_slow_connection": cpu / max(opened, 1) * 1e6,
              "serve_rss_mb": {"before": rss_before, "max": max(rss)},
              "log_bytes_during": len(text), "log_lines_during": text.decode(errors="replace").splitlines(),
              "samples": samples, "load_average_after": os.getloadavg()}
    save("front_connections", result, figure(samples))
    rows = []
    for name, s in summary.items():
        phase, kind = name.split()
        rows.append([{"quiet": "alone", "attack": f"beside {args.connections:,} slow"}[phase],
                     {"health": "GET /v2/health/ready", "grpc": "gRPC infer batch 1"}[kind], f"{s['served']} / {s['failed']}",
                     *(f"{s[k]:.0f}" if s[k] is not None else "-" for k in ("median_ms", "p90_ms", "max_ms"))])
    print(markdown_table(["the other client", "request", "served / failed", "median ms", "p90 ms", "max ms"], rows))
    print()
    print(markdown_table(["slow connections", "opened in all", "seconds", "serve's CPU s (us a connection)",
                          "serve's RSS MB", "serve's log during"],
                         [[args.connections, opened, args.seconds, f"{cpu:.1f} ({cpu / max(opened, 1) * 1e6:.0f})",
                           f"{rss_before} -> {max(rss)}", f"{len(text)} bytes, {len(result['log_lines_during'])} lines"]]))
    print("\n".join(result["log_lines_during"]))


if __name__ == "__main__":
    main()
