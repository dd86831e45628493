"""What serve's front (tritonize/serve/front.py, http_front.py, grpc_front.py) costs a client: the same requests sent
straight to tritonserver's own Unix sockets, through the front, and (HTTP) through the hand-written front it replaced
(issue 35's, read from git at deb75ca and pointed at the same socket), in turn, on one keep-alive connection (one gRPC
channel) each. resnet18 (random init) as onnx_model on the embedded server, in one run: the machine may be shared,
so compare the columns of one row, not runs.

HTTP: GET /v2/health/ready (nothing to copy), a batch-1 JSON inference (0.6 MB body) and a batch-8 one (4.8 MB).
gRPC: a batch-8 ModelInfer with the tensor in the message (4.8 MB), as tritonclient sends it, straight, through the
front, and through the relay as it was before its framing moved onto hyperframe (read from git at 25ecb73, in an
asyncio server of its own); then the CPU time each relay takes to read that request's frames (in this process, the
writers discarding what they get).

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
import threading
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
OLD_RELAY = "25ecb73"  # main before the relay read frames with hyperframe (struct unpacking by hand)


def from_git(commit: str, path: str, work: Path, name: str):
    """The module at `path` as it was at `commit`."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True,
                            check=True).stdout
    (work / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, work / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Open:
    """What a relay asks of the front and of its connection: every call allowed, nothing busy."""

    busy = False

    def __init__(self, upstream=None):
        self.upstream = upstream

    def authorized(self, _value) -> bool:
        return True


def old_relay(upstream, work: Path):
    """OLD_RELAY's relay on a port of its own, in a thread: (its port, a function that stops it)."""
    module = from_git(OLD_RELAY, "tritonize/serve/grpc_front.py", work, "old_relay")
    loop = asyncio.new_event_loop()

    async def connection(reader, writer):
        try:
            await module.relay(_Open(upstream), reader, writer, _Open())
        finally:
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(connection, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop():
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        server.close()
        loop.close()
    return server.sockets[0].getsockname()[1], stop


class _Discard:
    def write(self, data) -> None:
        pass

    async def drain(self) -> None:
        pass


def relay_cpu(work: Path, repeat: int) -> dict:
    """CPU ms each relay takes to read a batch-8 ModelInfer's client frames (as tritonclient's channel sends them,
    recorded here once), in 64 KiB reads."""
    import tritonclient.grpc as grpcclient
    from hyperframe.frame import SettingsFrame, WindowUpdateFrame

    recorded = bytearray()

    async def record(reader, writer):  # a server that lets the client send its whole message, and never answers
        writer.write(SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 2**31 - 1}).serialize() +
                     WindowUpdateFrame(0, window_increment=2**31 - 1 - 65535).serialize())
        while data := await reader.read(2**20):
            recorded.extend(data)
            if len(recorded) > 4_900_000:
                writer.close()
                return

    async def capture():
        server = await asyncio.start_server(record, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        x = grpcclient.InferInput("input", [8, 3, 224, 224], "FP32")
        x.set_data_from_numpy(np.full((8, 3, 224, 224), 0.5, np.float32))
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            await asyncio.get_running_loop().run_in_executor(None, lambda: client.infer("onnx_model", [x],
                                                                                      client_timeout=5))
        except Exception:  # noqa: BLE001 - nothing answers: only the request's bytes are wanted
            pass
        client.close()
        server.close()

    asyncio.run(capture())
    frames = bytes(recorded[len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"):])
    reads = [frames[i:i + 65536] for i in range(0, len(frames), 65536)]
    old = from_git(OLD_RELAY, "tritonize/serve/grpc_front.py", work, "old_relay_cpu")
    from tritonize.serve import grpc_front

    class Reader:
        def __init__(self):
            self.left = list(reads)

        async def read(self, _n):
            return self.left.pop(0) if self.left else b""

    timings = {}
    for name, module in (("before", old), ("now", grpc_front)):
        spent = []
        for _ in range(repeat):
            relay = module.Relay(_Open(), _Discard(), _Discard(), _Open())
            started = time.process_time()
            asyncio.run(relay.from_client(Reader()))
            spent.append((time.process_time() - started) * 1000)
        timings[name] = statistics.median(spent)
    return {"request_bytes": len(frames), "reads": len(reads), "cpu_ms_median": timings}


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def old_front(socket_path: Path, work: Path):
    """The front of OLD_FRONT, its upstream connections opened on `socket_path` instead of 127.0.0.1:PORT."""
    module = from_git(OLD_FRONT, "tritonize/serve/front.py", work, "old_front")
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
             " / ".join(f"{8000 / m:.1f}" for m in medians.values())]], {"requests": requests, "median_ms": medians}


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
            relay_port, stop_relay = old_relay(server.upstream, Path(work))
            try:
                grpc, grpc_results = grpc_rows({"tritonserver": f"unix:{server.upstream.grpc}",
                                                "front": f"127.0.0.1:{server.ports.grpc}",
                                                "relay before": f"127.0.0.1:{relay_port}"}, max(20, args.requests // 4))
            finally:
                stop_relay()
        cpu = relay_cpu(Path(work), 20)
    save("http_front", {"http": results, "grpc": grpc_results, "relay_cpu": cpu, "load_average_before": load,
                        "load_average_after": os.getloadavg()})
    print(markdown_table(["request", "n (each)", "tritonserver's socket, median ms", "through the front",
                          "through the old front"], rows))
    print()
    print(markdown_table(["request", "n (each)", "tritonserver's socket, median ms", "through the front",
                          "through the relay before", "img/s: socket / front / relay before"], grpc))
    print()
    print(markdown_table(["relay", "CPU ms to read a batch-8 ModelInfer's frames (median of 20)"],
                         [[name, f"{ms:.2f}"] for name, ms in cpu["cpu_ms_median"].items()]))
    print(f"load average before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
