"""Preprocessing on the client vs on the server: same server, same images, one run.

    .venv/bin/python benchmarks/preprocessing.py [--arch resnet18] [--requests 48] [--rounds 2]

One embedded Triton serves onnx_model and its ensembles. Each request carries one image and is
timed end to end from the client's point of view: reading the file, the client's share of the
preprocessing, the gRPC call, the logits back. Paths (`tritonize client --preprocess`):
  client  the client decodes and preprocesses, sends the FP32 tensor to onnx_model;
  server  the client sends the encoded file to onnx_classifier (decoding and preprocessing on the server);
  uint8   the client decodes, resizes and crops, sends UINT8 pixels to onnx_classifier_uint8.
Figures per path: bytes on the wire per image (request tensor + logits back), client CPU time per image
(process time of this client, gRPC threads included), the server's CPU time per image (tritonserver and
its stubs: the process group's user + system time), throughput and p50 at concurrency 1 and 8 (one
gRPC client per thread), and the server's compute (wall) time per image in the preprocessing model and
in onnx_model (statistics API). Cells run in rounds, paths interleaved, so drift hits every path alike.
The images: matplotlib's sample pictures and photos of other sizes made from its sample photo.
Writes results/preprocessing_<arch>.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save

from tritonize.client.connection import PATHS, Connection
from tritonize.client.stats import latency_summary
from tritonize.images import load_images
from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.serve.embedded import embedded_server

CONCURRENCY = (1, 8)
LOGITS_BYTES = 1000 * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--requests", type=int, default=48, help="measured requests per path, concurrency and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = RESULTS / f"work-{args.arch}"
    repo = work / "preprocessing"
    build_repository(artifacts(args.arch), repo, RepoOptions(kind="cpu", models=("onnx_model",), force=True))
    images = _images(work / "images")
    load = {"before": os.getloadavg()}
    cells: dict[tuple[str, int], list[dict]] = {}
    with embedded_server(repo) as server:
        connection = Connection(server.grpc_url, timeout=120)
        infos = {path: connection.model_for("onnx_model", path) for path in PATHS}
        per_image = {path: _bytes_per_image(infos[path], images) for path in PATHS}
        for _ in range(args.rounds):
            for concurrency, path in itertools.product(CONCURRENCY, PATHS):
                cells.setdefault((path, concurrency), []).append(
                    _measure(connection, infos[path], images, concurrency, args.requests, server.pid))
        connection.close()
    load["after"] = os.getloadavg()

    rows, results = [], {"arch": args.arch, "requests": args.requests, "rounds": args.rounds, "load_average": load,
                         "images": {p.name: _describe(p) for p in images}, "bytes_per_image": per_image, "cells": {}}
    for (path, concurrency), runs in cells.items():
        results["cells"][f"{path}@{concurrency}"] = runs
        rows.append([path, concurrency, f"{np.mean([r['throughput'] for r in runs]):.1f}",
                     f"{np.mean([r['p50_ms'] for r in runs]):.1f}",
                     f"{np.mean([r['client_cpu_ms'] for r in runs]):.2f}",
                     f"{np.mean([r['server_cpu_ms'] for r in runs]):.1f}",
                     f"{np.mean([r['server_preprocess_ms'] for r in runs]):.2f}",
                     f"{np.mean([r['server_model_ms'] for r in runs]):.2f}",
                     " / ".join(f"{r['throughput']:.1f}" for r in runs)])
    path_out = save(f"preprocessing_{args.arch}", results)
    print(f"machine load average (1, 5, 15 min): before {_load(load['before'])}, after {_load(load['after'])}; "
          f"{os.cpu_count()} cores\n")
    fp32, uint8 = per_image["client"][0], per_image["uint8"][0]
    print(markdown_table(["image", "format", "size", "server: request bytes", "client (FP32) / server", "client / uint8"],
                         [[n, d["format"], d["size"], f"{b:,}", f"{fp32 / b:.1f}x", f"{fp32 / uint8:.1f}x"]
                          for (n, d), b in zip(results["images"].items(), per_image["server"])]))
    print(f"\nrequest bytes per image: client {fp32:,} (FP32), uint8 {uint8:,}, server the file + 4; "
          f"the logits back are {LOGITS_BYTES:,} on every path")
    print()
    print(markdown_table(["path", "concurrency", "img/s", "p50 ms", "client CPU ms/img", "server CPU ms/img",
                          "preprocess model ms/img", "onnx_model ms/img", "img/s per round"], rows))
    print(f"\nwrote {path_out}")


def _images(folder: Path) -> list[Path]:
    """matplotlib's sample pictures, and its photo at other sizes and formats (noise keeps the bigger ones
    as hard to compress as real photos)."""
    from matplotlib import cbook
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    samples = [Path(cbook.get_sample_data(name, asfileobj=False))
               for name in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png", "logo2.png")]
    photo = Image.open(samples[0]).convert("RGB")
    rng = np.random.default_rng(0)
    made = []
    for name, size, options in (("photo_4032x3024.jpg", (4032, 3024), {"quality": 92}),
                                ("photo_1920x1080.jpg", (1920, 1080), {"quality": 90}),
                                ("photo_1024x768.png", (1024, 768), {}),
                                ("photo_800x600.webp", (800, 600), {"quality": 85})):
        path = folder / name
        if not path.is_file():
            pixels = np.asarray(photo.resize(size, Image.BICUBIC), np.int16)
            pixels = np.clip(pixels + rng.integers(-6, 7, pixels.shape), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(path, **options)
        made.append(path)
    return samples + made


def _describe(path: Path) -> dict:
    from PIL import Image

    with Image.open(path) as image:
        return {"format": image.format, "size": f"{image.width}x{image.height} {image.mode}", "bytes": path.stat().st_size}


def _bytes_per_image(info, images: list[Path]) -> list[int]:
    """The input tensor as gRPC carries it: FP32 or UINT8 values, or BYTES (4-byte length + the file)."""
    loaded = load_images(images, info.preprocess, form=info.form)
    return [len(a.item()) + 4 if a.dtype == np.object_ else a.nbytes for a in loaded.arrays]


def _measure(connection: Connection, info, images: list[Path], concurrency: int, requests: int, server_pid: int) -> dict:
    """`requests` one-image requests, `concurrency` threads each with its own gRPC client, cycling over the
    images; the client's work (reading, its share of preprocessing) is inside each request's time."""
    order = [images[i % len(images)] for i in range(requests)]
    latencies: list[float] = []
    lock = threading.Lock()
    local = threading.local()

    def one(path: Path) -> None:
        if not hasattr(local, "connection"):
            local.connection = Connection(connection.url, timeout=120)
        start = time.perf_counter()
        loaded = load_images([path], info.preprocess, form=info.form)
        local.connection.infer(info, np.stack(loaded.arrays))
        with lock:
            latencies.append(time.perf_counter() - start)

    with ThreadPoolExecutor(concurrency) as pool:  # warm-up: connections and the server's first requests
        list(pool.map(one, order[:concurrency]))
    latencies.clear()
    models = [m for m in (_preprocessor(connection, info), "onnx_model") if m]
    before = {m: _compute(connection, m) for m in models}
    server_cpu, cpu, wall = _group_cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, order))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server_cpu = _group_cpu_seconds(server_pid) - server_cpu
    server = {}
    for m in models:
        (ns, inferences), (ns0, inferences0) = _compute(connection, m), before[m]
        server[m] = (ns - ns0) / (inferences - inferences0) / 1e6 if inferences > inferences0 else 0.0
    return {"throughput": requests / wall, "p50_ms": latency_summary(latencies)["p50_ms"],
            "client_cpu_ms": cpu / requests * 1e3, "server_cpu_ms": server_cpu / requests * 1e3, "server_preprocess_ms": next(
                (v for m, v in server.items() if m != "onnx_model"), 0.0),
            "server_model_ms": server["onnx_model"], "seconds": wall}


def _preprocessor(connection: Connection, info) -> str | None:
    """The ensemble's first step: the model that preprocesses on the server (None on the client path)."""
    if info.path == "client":
        return None
    config = connection.client.get_model_config(info.name, as_json=True)["config"]
    return config["ensemble_scheduling"]["step"][0]["model_name"]


def _compute(connection: Connection, model: str) -> tuple[int, int]:
    """Cumulative server compute (input + infer + output) of a model's executions, and the images they held.
    From the per-batch-size statistics: a request's own figures count a shared execution once per request."""
    stats = connection.client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    ns = inferences = 0
    for entry in stats.get("batch_stats", []):
        executions = int(entry["compute_infer"]["count"])
        inferences += executions * int(entry["batch_size"])
        ns += sum(int(entry[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
    return ns, inferences


def _group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every process in a process group (the server and its stubs)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == pgid:  # after "(comm)": state, ppid, pgrp, ... utime is the 12th, stime the 13th
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _load(values) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
