"""Serving benchmarks, each a ratio of two figures measured in the same run:

1. serving overhead: a model served by the embedded Triton vs the same artifact in an in-process
   session (onnxruntime for onnx_model, TorchScript for torch_model), same batch, same threads;
2. dynamic batching: throughput at concurrency 8 with batch-1 requests, batching on vs off;
3. client transfer: bytes and client time per image, FP32 tensors over gRPC vs system shared memory.

    .venv/bin/python benchmarks/serving.py [--arch resnet18] [--batch 8] [--requests 40]

trt_model joins the sweeps where a plan exists (a GPU box with TensorRT); it is reported as not
measured otherwise. Writes results/serving_<arch>.json and .png and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import warnings
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts as _artifacts, markdown_table, save  # noqa: E402

from tritonize.client.perf import PerfOptions, run_perf  # noqa: E402
from tritonize.client.connection import Connection  # noqa: E402
from tritonize.manifest import Manifest, Status  # noqa: E402
from tritonize.model_repository import parse_config  # noqa: E402
from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.serve.embedded import embedded_server  # noqa: E402
from tritonize.verify import verification_inputs  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # torch.jit.* deprecation notices
BATCHING_QUEUE_DELAY_US = 2000  # at 100 us batches never form on a CPU (platform facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--requests", type=int, default=40, help="measured requests per figure")
    args = parser.parse_args()
    artifacts = _artifacts(args.arch)
    manifest = Manifest.load(artifacts)
    models = ["onnx_model", "torch_model"] + (["trt_model"] if manifest.plan and manifest.plan.status is Status.built else [])
    threads = len(os.sched_getaffinity(0))  # what the backends give a model with one instance
    work = RESULTS / f"work-{args.arch}"

    on, off = work / "batching_on", work / "batching_off"
    build_repository(artifacts, on, RepoOptions(
        kind="cpu", queue_delay_us=BATCHING_QUEUE_DELAY_US, max_batch=max(32, args.batch), force=True))
    build_repository(artifacts, off, RepoOptions(kind="cpu", max_batch=max(32, args.batch), force=True))
    for model in models:
        _without_dynamic_batching(off / model / "configs" / "cpu.pbtxt")

    results = {"arch": args.arch, "batch": args.batch, "requests": args.requests, "threads": threads, "models": {}}
    inputs = verification_inputs(*_shape_and_norm(manifest), seed=1)
    for model in models:
        print(f"\n## {model}", flush=True)
        # In-process before and after the served run: the mean cancels slow drift of the machine.
        before = _in_process_throughput(model, artifacts, manifest, inputs[: args.batch], args.requests, threads)
        with embedded_server(on) as server, Connection(server.grpc_url, 120) as client:
            served = run_perf(client, [model], PerfOptions(concurrency=(1, 2), batch=args.batch, requests=args.requests,
                                                           duration=None, warmup=3, shared_memory="system"))
        after = _in_process_throughput(model, artifacts, manifest, inputs[: args.batch], args.requests, threads)
        inproc = (before + after) / 2
        with embedded_server(on) as server, Connection(server.grpc_url, 120) as client:
            batched = run_perf(client, [model], PerfOptions(concurrency=(8,), batch=1, requests=args.requests * 2,
                                                            duration=None, warmup=2))
        with embedded_server(off) as server, Connection(server.grpc_url, 120) as client:
            unbatched = run_perf(client, [model], PerfOptions(concurrency=(8,), batch=1, requests=args.requests * 2,
                                                              duration=None, warmup=2))
        grpc_levels = [r for r in served.levels]
        best = max(grpc_levels, key=lambda r: r.throughput)
        shm = served.shared_memory_savings[model]
        results["models"][model] = {
            "in_process_img_s": inproc,
            "in_process_before_after_img_s": [before, after],
            "served_img_s": {f"c{r.concurrency}": r.throughput for r in grpc_levels},
            "serving_ratio": best.throughput / inproc,
            "serving_ratio_c1": grpc_levels[0].throughput / inproc,
            "batching_on_img_s": batched.levels[0].throughput,
            "batching_off_img_s": unbatched.levels[0].throughput,
            "batching_ratio": batched.levels[0].throughput / unbatched.levels[0].throughput,
            "server_avg_batch_on": batched.levels[0].server_batches,
            "server_avg_batch_off": unbatched.levels[0].server_batches,
            "transfer": {
                "grpc_bytes_per_image": shm["grpc"]["tensor_bytes_on_wire"] / args.batch,
                "shm_bytes_per_image": shm["system_shared_memory"]["tensor_bytes_on_wire"] / args.batch,
                "grpc_client_us_per_image": shm["grpc"]["client_us"] / args.batch,
                "shm_client_us_per_image": shm["system_shared_memory"]["client_us"] / args.batch,
                "grpc_avg_ms": shm["grpc"]["avg_ms"],
                "shm_avg_ms": shm["system_shared_memory"]["avg_ms"],
            },
        }
        print(f"{model}: in-process {inproc:.1f} img/s, served {best.throughput:.1f} img/s", flush=True)
    if "trt_model" not in models:
        results["not_measured"] = {"trt_model": "no TensorRT plan (needs a GPU box with TensorRT)"}
    _report(results)


def _shape_and_norm(manifest: Manifest):
    spec = manifest.spec
    return spec.input_shape, 64, spec.preprocessing.mean, spec.preprocessing.std


def _without_dynamic_batching(config_path: Path) -> None:
    from google.protobuf import text_format

    config = parse_config(config_path)
    config.ClearField("dynamic_batching")
    config_path.write_text(text_format.MessageToString(config))


def _in_process_throughput(model: str, artifacts: Path, manifest: Manifest, batch: np.ndarray, requests: int, threads: int) -> float:
    """Images per second of the same artifact run in this process, as the backend runs it."""
    if model == "onnx_model":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(str(manifest.path(manifest.onnx)), options, providers=["CPUExecutionProvider"])
        run = lambda: session.run(None, {manifest.onnx.input_name: batch})
    elif model == "torch_model":
        import torch

        torch.set_num_threads(threads)
        module = torch.jit.load(str(manifest.path(manifest.torchscript))).eval()
        tensor = torch.from_numpy(batch)

        def run():
            with torch.inference_mode():
                return module(tensor)
    else:
        raise SystemExit(f"no in-process baseline for {model} on this machine")
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(requests):
        run()
    return requests * len(batch) / (time.perf_counter() - start)


def _report(results: dict) -> None:
    models = results["models"]
    rows = [[m, round(r["in_process_img_s"], 1), *(round(v, 1) for v in r["served_img_s"].values()),
             f"{r['serving_ratio']:.2f}"] for m, r in models.items()]
    print(f"\n### Serving overhead ({results['arch']}, batch {results['batch']}, {results['threads']} threads)\n")
    print(markdown_table(["model", "in-process img/s", "served c1 img/s", "served c2 img/s", "served / in-process (best)"], rows))
    rows = [[m, round(r["batching_off_img_s"], 1), round(r["batching_on_img_s"], 1), f"{r['batching_ratio']:.2f}",
             f"{r['server_avg_batch_off']:.2f} -> {r['server_avg_batch_on']:.2f}"] for m, r in models.items()]
    print(f"\n### Dynamic batching (concurrency 8, batch-1 requests, queue delay {BATCHING_QUEUE_DELAY_US} us)\n")
    print(markdown_table(["model", "off img/s", "on img/s", "on / off", "avg server batch off -> on"], rows))
    rows = [[m, int(t["grpc_bytes_per_image"]), int(t["shm_bytes_per_image"]), round(t["grpc_client_us_per_image"]),
             round(t["shm_client_us_per_image"]), f"{t['shm_client_us_per_image'] / max(t['grpc_client_us_per_image'], 1e-9):.2f}"]
            for m, t in ((m, r["transfer"]) for m, r in models.items())]
    print("\n### Client transfer per image (FP32, concurrency 1)\n")
    print(markdown_table(["model", "gRPC tensor bytes", "shm tensor bytes", "gRPC client us", "shm client us", "shm / gRPC time"], rows))
    for model, why in results.get("not_measured", {}).items():
        print(f"\n{model}: not measured — {why}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    names = list(models)
    x = np.arange(len(names))
    axes[0].bar(x - 0.2, [models[m]["in_process_img_s"] for m in names], 0.4, label="in-process")
    axes[0].bar(x + 0.2, [max(models[m]["served_img_s"].values()) for m in names], 0.4, label="served (Triton)")
    axes[0].set(title="serving overhead", ylabel="images/s")
    axes[1].bar(x - 0.2, [models[m]["batching_off_img_s"] for m in names], 0.4, label="batching off")
    axes[1].bar(x + 0.2, [models[m]["batching_on_img_s"] for m in names], 0.4, label="batching on")
    axes[1].set(title="dynamic batching, concurrency 8", ylabel="images/s")
    axes[2].bar(x - 0.2, [models[m]["transfer"]["grpc_client_us_per_image"] for m in names], 0.4, label="gRPC")
    axes[2].bar(x + 0.2, [models[m]["transfer"]["shm_client_us_per_image"] for m in names], 0.4, label="system shm")
    axes[2].set(title="client time per image", ylabel="µs")
    for ax in axes:
        ax.set_xticks(x, names)
        ax.legend(fontsize=8)
    fig.suptitle(f"tritonize serving benchmarks: {results['arch']}")
    path = save(f"serving_{results['arch']}", results, fig)
    print(f"\nwrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
