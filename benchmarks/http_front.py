"""What the embedded engine's HTTP front (tritonize/serve/front.py) costs a client: the same HTTP requests sent to
tritonserver's own port (behind the front, on loopback) and through the front, alternating, on one keep-alive
connection each. resnet18 (random init) as onnx_model on the embedded server.

Requests: GET /v2/health/ready (nothing to copy), a batch-1 JSON inference (0.6 MB body), and a batch-8 one
(4.8 MB, above the size that killed tritonserver when sent as a form).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/http_front.py [--requests 200]

Writes results/http_front.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from common import artifacts, markdown_table, save  # noqa: E402

from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.serve.embedded import EmbeddedServer  # noqa: E402


def _infer_body(batch: int) -> bytes:
    return json.dumps({"inputs": [{"name": "input", "shape": [batch, 3, 224, 224], "datatype": "FP32",
                                   "data": [0.5] * (batch * 3 * 224 * 224)}]}).encode()


def _time(connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None) -> float:
    started = time.perf_counter()
    connection.request(method, path, body, {"Content-Type": "application/json"} if body else {})
    response = connection.getresponse()
    response.read()
    assert response.status == 200, response.status
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    cases = {"GET /v2/health/ready": ("GET", "/v2/health/ready", None),
             "infer batch 1 (0.6 MB)": ("POST", "/v2/models/onnx_model/infer", _infer_body(1)),
             "infer batch 8 (4.8 MB)": ("POST", "/v2/models/onnx_model/infer", _infer_body(8))}
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="http-front-") as work:
        repo = Path(work) / "models"
        build_repository(artifacts("resnet18"), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
        load = os.getloadavg()
        server = EmbeddedServer(repo, supervise=False)
        with server:
            routes = {"tritonserver": server.inner.http, "front": server.ports.http}
            connections = {route: http.client.HTTPConnection("127.0.0.1", port, timeout=300) for route, port in routes.items()}
            for name, (method, path, body) in cases.items():
                count = args.requests if body is None or len(body) < 10**6 else max(20, args.requests // 8)
                times = {route: [] for route in routes}
                for _ in range(count):
                    for route, connection in connections.items():
                        times[route].append(_time(connection, method, path, body))
                medians = {route: statistics.median(t) for route, t in times.items()}
                results[name] = {"requests": count, "median_ms": medians}
                rows.append([name, count, f"{medians['tritonserver']:.2f}", f"{medians['front']:.2f}",
                             f"{medians['front'] - medians['tritonserver']:+.2f}"])
    save("http_front", {"cases": results, "load_average_before": load, "load_average_after": os.getloadavg()})
    print(markdown_table(["request", "n (each)", "tritonserver's port, median ms", "through the front", "difference"], rows))
    print(f"load average before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
