"""Make docs/dashboard.png: the dashboard's panels drawn with matplotlib from Prometheus range queries of
a real run (no Grafana can be installed here).

    .venv/bin/python docs/dashboard_screenshot.py [--repository models] [--out docs/dashboard.png]

Serves the repository with the embedded server, runs Prometheus on a `tritonize monitor` bundle
scraping it, drives `tritonize client perf` over onnx_model then torch_model at rising concurrency,
kills torch_model's backend stub (as the OOM killer would) and sends a few requests that fail, heals
it with `tritonize models reload`, and draws the whole run. Needs prometheus on PATH; ~4 minutes.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tritonize.client.connection import Connection
from tritonize.monitor.bundle import PROMETHEUS_CONFIG, BundleOptions, write_bundle
from tritonize.monitor.prometheus import Prometheus
from tritonize.monitor.render import render_dashboard
from tritonize.serve.embedded import embedded_server
from tritonize.serve.process import choose_ports

TRITONIZE = str(Path(sys.executable).parent / "tritonize")


def stub_of(server_pid: int, model: str) -> int:
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if (args[0].endswith(b"triton_python_backend_stub") and f"{model}_0_0".encode() in args
                    and os.getpgid(int(entry.name)) == server_pid):
                return int(entry.name)
        except (OSError, ValueError):
            continue
    raise SystemExit(f"no backend stub for {model}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=Path("models"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "dashboard.png")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per perf level")
    args = parser.parse_args()
    with embedded_server(args.repository) as server, tempfile.TemporaryDirectory() as tmp:
        target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
        write_bundle(args.repository, Path(tmp) / "monitoring", BundleOptions(targets=(target,)))
        port = choose_ports("127.0.0.1", None, None, None).http
        with Prometheus(Path(tmp) / "monitoring" / PROMETHEUS_CONFIG, port=port) as prometheus:
            start = time.time()
            time.sleep(30)  # idle first
            subprocess.run([TRITONIZE, "client", "perf", "--model", "onnx_model,torch_model", "--concurrency", "1,4,16",
                            "--batch", "2", "--duration", str(args.duration), "--url", server.grpc_url,
                            "--out", str(Path(tmp) / "perf")], check=True)
            os.kill(stub_of(server.pid, "torch_model"), signal.SIGKILL)
            with Connection(server.grpc_url) as connection:
                model = connection.model("torch_model")
                for _ in range(20):  # each fails: "Stub process 'torch_model_0_0' is not healthy."
                    try:
                        connection.infer(model, np.zeros((1, 3, 224, 224), np.float32))
                    except Exception:  # noqa: BLE001 - a request to the crashed stub fails, whatever its error
                        time.sleep(0.5)
            subprocess.run([TRITONIZE, "models", "reload", "torch_model", "--url", server.grpc_url], check=True)
            time.sleep(40)  # the rates drain back to 0 over their one-minute window
            drawn = render_dashboard(prometheus.api, start, time.time(), args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB): {drawn}")


if __name__ == "__main__":
    main()
