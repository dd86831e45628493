"""What serve's front (tritonize/serve/front.py, grpc_front.py) costs a client: the same requests sent straight to
tritonserver's own Unix sockets, through the front, and (HTTP) through the hand-written front it replaced (issue 35's,
read from git at deb75ca and pointed at the same socket), in turn, on one keep-alive connection (one gRPC channel)
each. resnet18 (random init) as onnx_model on the embedded server, in one run: the machine may be shared, so compare
the columns of one row, not runs.

HTTP: GET /v2/health/ready (nothing to copy), a batch-1 JSON inference (0.6 MB body) and a batch-8 one (4.8 MB).
gRPC: a batch-8 ModelInfer with the tensor in the message (4.8 MB), as tritonclient sends it.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/http_front.py [--requests 200]

Writes results/http_front.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from common import artifacts, markdown_table, save  # noqa: E402

from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.serve.embedded import EmbeddedServer  # noqa: E402
from tritonize.serve.process import choose_ports  # noqa: E402

OLD_FRONT = "deb75ca"  # main before issue 43: the hand-written front


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def old_front(socket_path: Path, work: Path):
    """The front of OLD_FRONT, its upstream connections opened on `socket_path` instead of 127.0.0.1:PORT."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_FRONT}:tritonize/serve/front.py"],
                            capture_output=True, text=True, check=True).stdout
    (work / "old_front.py").write_text(source)
    spec = importlib.util.spec_from_file_location("old_front", work / "old_front.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shim = types.SimpleNamespace(**{name: getattr(asyncio, name) for name in dir(asyncio) if not name.startswith("__")})
    shim.open_connection = lambda host, port, **kw: asyncio.open_unix_connection(str(socket_path), **kw)
    module.asyncio = shim
    ports = choose_ports("127.0.0.1", None, None, None)
    front = module.Front("127.0.0.1", ports.http, ports.metrics, (0, 0))
    front.start()
    return front, ports.http


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


def http_rows(routes: dict, requests: int) -> tuple[list, dict]:
    cases = {"GET /v2/health/ready": ("GET", "/v2/health/ready", None),
             "infer batch 1 (0.6 MB JSON)": ("POST", "/v2/models/onnx_model/infer", _infer_body(1)),
             "infer batch 8 (4.8 MB JSON)": ("POST", "/v2/models/onnx_model/infer", _infer_body(8))}
    rows, results = [], {}
    for name, (method, path, body) in cases.items():
        count = requests if body is None or len(body) < 10**6 else max(20, requests // 8)
        times = {route: [] for route in routes}
        for _ in range(count):
            for route, connection in routes.items():
                times[route].append(_time(connection, method, path, body))
        medians = {route: statistics.median(t) for route, t in times.items()}
        results[name] = {"requests": count, "median_ms": medians}
        rows.append([name, count, *(f"{m:.2f}" for m in medians.values())])
    return rows, results


def grpc_rows(urls: dict, requests: int) -> tuple[list, dict]:
    import tritonclient.grpc as grpcclient

    x = grpcclient.InferInput("input", [8, 3, 224, 224], "FP32")
    x.set_data_from_numpy(np.full((8, 3, 224, 224), 0.5, np.float32))
    clients = {route: grpcclient.InferenceServerClient(url) for route, url in urls.items()}
    times = {route: [] for route in urls}
    for client in clients.values():
        client.infer("onnx_model", [x])  # warm
    for _ in range(requests):
        for route, client in clients.items():
            started = time.perf_counter()
            client.infer("onnx_model", [x])
            times[route].append((time.perf_counter() - started) * 1000)
    medians = {route: statistics.median(t) for route, t in times.items()}
    return [["ModelInfer batch 8 (4.8 MB)", requests, *(f"{m:.2f}" for m in medians.values()),
             f"{8000 / medians['tritonserver'] :.1f} / {8000 / medians['front']:.1f}"]], \
        {"requests": requests, "median_ms": medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="http-front-") as work:
        repo = Path(work) / "models"
        build_repository(artifacts("resnet18"), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
        load = os.getloadavg()
        server = EmbeddedServer(repo, supervise=False)
        with server:
            old, old_port = old_front(server.upstream.http, Path(work))
            try:
                routes = {"tritonserver": UnixHTTPConnection(server.upstream.http, 300),
                          "front": http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=300),
                          "old front": http.client.HTTPConnection("127.0.0.1", old_port, timeout=300)}
                rows, results = http_rows(routes, args.requests)
            finally:
                old.stop()
            grpc, grpc_results = grpc_rows({"tritonserver": f"unix:{server.upstream.grpc}",
                                            "front": f"127.0.0.1:{server.ports.grpc}"}, max(20, args.requests // 4))
    save("http_front", {"http": results, "grpc": grpc_results, "load_average_before": load,
                        "load_average_after": os.getloadavg()})
    print(markdown_table(["request", "n (each)", "tritonserver's socket, median ms", "through the front",
                          "through the old front"], rows))
    print()
    print(markdown_table(["request", "n (each)", "tritonserver's socket, median ms", "through the front",
                          "img/s: socket / front"], grpc))
    print(f"load average before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
