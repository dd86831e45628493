"""10,000 slow connections against `tritonize serve` (embedded engine, resnet18 as onnx_model) while another client
goes on: each slow connection sends the start of a request head, then a byte every few seconds, and is opened again
whenever the front closes it; meanwhile a client sends GET /v2/health/ready and a batch-1 gRPC inference, each on a
new connection, every 0.2 s. Counts the client's answers and failures, and measures serve's log (its stderr).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/front_connections.py [--connections 10000] [--seconds 60]

Writes results/front_connections.json and prints a markdown table.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import tritonclient.grpc as grpcclient

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
            start_size = log.stat().st_size
            spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: gRPC's threads do not survive a fork
            opened = spawn.Value("l", 0)
            attack = spawn.Process(target=slow_clients, args=(ports.http, args.connections, args.seconds, opened))
            attack.start()
            x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
            x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
            served, failed, latencies = {"http": 0, "grpc": 0}, {"http": [], "grpc": []}, []
            rss = []
            while attack.is_alive():
                rss.append(int(next(line for line in Path(f"/proc/{serve.pid}/status").read_text().splitlines()
                                    if line.startswith("VmRSS:")).split()[1]) // 1024)
                started = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=10) as r:
                        assert r.status == 200
                    served["http"] += 1
                except Exception as e:  # noqa: BLE001 - each failure is the finding
                    failed["http"].append(repr(e)[:120])
                try:
                    with grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}") as client:
                        client.infer("onnx_model", [x], client_timeout=10)
                    served["grpc"] += 1
                except Exception as e:  # noqa: BLE001
                    failed["grpc"].append(repr(e)[:120])
                latencies.append((time.perf_counter() - started) * 1000)
                time.sleep(0.2)
            attack.join()
            text = log.read_bytes()[start_size:]
        finally:
            serve.terminate()
            serve.wait(60)
    opened = opened.value
    result = {"connections": args.connections, "seconds": args.seconds, "slow_connections_opened": opened,
              "served": served, "failed": {k: len(v) for k, v in failed.items()},
              "first_failures": {k: v[:3] for k, v in failed.items()},
              "client_round_ms": {"median": statistics.median(latencies), "max": max(latencies)},
              "serve_rss_mb": {"first": rss[0], "max": max(rss)},
              "log_bytes_during": len(text), "log_lines_during": text.decode(errors="replace").splitlines(),
              "load_average_after": os.getloadavg()}
    save("front_connections", result)
    print(markdown_table(["slow connections", "opened in all", "seconds", "health served / failed",
                          "gRPC infer served / failed", "client round ms (median, max)", "serve's RSS MB",
                          "serve's log during"],
                         [[args.connections, opened, args.seconds, f"{served['http']} / {len(failed['http'])}",
                           f"{served['grpc']} / {len(failed['grpc'])}",
                           f"{statistics.median(latencies):.0f}, {max(latencies):.0f}", f"{rss[0]} -> {max(rss)}",
                           f"{len(text)} bytes, {len(result['log_lines_during'])} lines"]]))
    print("\n".join(result["log_lines_during"]))


if __name__ == "__main__":
    main()
