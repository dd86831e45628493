"""Serving benchmarks, each a ratio of figures measured in the same run (one command: tables on stdout, a plot):

1. serving overhead: a model served by the embedded Triton vs the same artifact in an in-process session
   (onnxruntime for onnx_model, TorchScript for torch_model), same batch, same intra-op threads, the client on the
   same machine. Served two ways, at concurrency 1 and 2: through system shared memory, measured by `client perf`
   (perf_analyzer where it is found), and through plain gRPC, a tritonclient loop as users' clients and `client
   classify` send (one InferInput made from the array per request). Rounds alternate the in-process and served
   figures; each round's ratio is to the mean of the in-process figures before and after it. With the ratios comes
   where the time went: the CPU each process used per batch (the client, tritonserver, the model's stub) and the
   server's split of a request (its statistics);
2. dynamic batching: throughput at concurrency 8 with batch-1 requests, batching on vs off;
3. client transfer: bytes and client time per image, FP32 tensors over gRPC vs system shared memory.

    .venv/bin/python benchmarks/serving.py [--arch resnet18] [--batch 8] [--requests 24] [--rounds 3]

trt_model joins the sweeps where a plan exists (a GPU box with TensorRT); it is reported as not measured
otherwise. Writes results/serving_<arch>.json and .png and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import warnings
from contextlib import closing
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts as _artifacts, markdown_table, save

from tritonize.client.connection import Connection
from tritonize.client.perf import PerfOptions, Workload, request_batch, run_perf
from tritonize.client.perf.load_generators import choose_tool, open_generator
from tritonize.manifest import Manifest, Status
from tritonize.model_repository import parse_config
from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.serve.embedded import embedded_server
from tritonize.serve.supervisor import stub_processes
from tritonize.verify import verification_inputs

warnings.filterwarnings("ignore", category=FutureWarning)  # torch.jit.* deprecation notices
BATCHING_QUEUE_DELAY_US = 2000  # at 100 us batches never form on a CPU (platform facts)
GOALS = {"shm": 0.95, "grpc": 0.85}  # served / in-process, issue 43
TICK = os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--requests", type=int, default=24, help="measured requests per figure")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of in-process and served figures per model")
    args = parser.parse_args()
    artifacts = _artifacts(args.arch)
    manifest = Manifest.load(artifacts)
    models = ["onnx_model", "torch_model"] + (["trt_model"] if manifest.plan and manifest.plan.status is Status.built else [])
    threads = len(os.sched_getaffinity(0))  # what the backends give a model with one instance
    work = RESULTS / f"work-{args.arch}"

    on, off = work / "batching_on", work / "batching_off"
    served = dict(models=tuple(models), ensembles=False, max_batch=max(32, args.batch), force=True)
    build_repository(artifacts, on, RepoOptions(kind="cpu", queue_delay_us=BATCHING_QUEUE_DELAY_US, **served))
    build_repository(artifacts, off, RepoOptions(kind="cpu", **served))
    for model in models:
        _without_dynamic_batching(off / model / "configs" / "cpu.pbtxt")

    results = {"arch": args.arch, "batch": args.batch, "requests": args.requests, "rounds": args.rounds,
               "threads": threads, "load_average_before": os.getloadavg(), "models": {}}
    inputs = verification_inputs(*_shape_and_norm(manifest), seed=1)[: args.batch]
    for model in models:
        print(f"\n## {model}", flush=True)
        with embedded_server(on) as server, Connection(server.grpc_url, 300) as client:
            results["models"][model] = entry = _overhead(model, artifacts, manifest, inputs, args, threads, server, client)
            shm = run_perf(client, [model], PerfOptions(concurrency=(1,), batch=args.batch, requests=args.requests,
                                                        duration=None, warmup=2, shared_memory="system", preprocess="client"))
            entry["transfer"] = _transfer(shm.shared_memory_savings[model], args.batch)
            batched = run_perf(client, [model], PerfOptions(concurrency=(8,), batch=1, requests=args.requests * 4,
                                                            duration=None, warmup=2, preprocess="client"))
        with embedded_server(off) as server, Connection(server.grpc_url, 300) as client:
            unbatched = run_perf(client, [model], PerfOptions(concurrency=(8,), batch=1, requests=args.requests * 4,
                                                              duration=None, warmup=2, preprocess="client"))
        entry.update(batching_on_img_s=batched.levels[0].throughput, batching_off_img_s=unbatched.levels[0].throughput,
                     batching_ratio=batched.levels[0].throughput / unbatched.levels[0].throughput,
                     server_avg_batch_on=batched.levels[0].server_batches,
                     server_avg_batch_off=unbatched.levels[0].server_batches)
    if "trt_model" not in models:
        results["not_measured"] = {"trt_model": "no TensorRT plan (needs a GPU box with TensorRT)"}
    results["load_average_after"] = os.getloadavg()
    _report(results)


def _overhead(model: str, artifacts: Path, manifest: Manifest, inputs: np.ndarray, args, threads: int, server,
              client: Connection) -> dict:
    """Rounds of in-process, served through shared memory and through plain gRPC at concurrency 1 and 2, and
    in-process again: each served figure over the round's in-process mean."""
    run = _in_process(model, artifacts, manifest, inputs, threads)
    sleeping = _in_process(model, artifacts, manifest, inputs, threads, spin=False) if model == "onnx_model" else None
    info = client.model_for(model, "client")
    batch = request_batch(info, PerfOptions(batch=args.batch))
    tool = choose_tool("auto")
    stub = stub_processes(server.pid)[f"{model}_0_0"]
    rounds = []
    for number in range(args.rounds):
        before = _throughput(run, args.requests, len(inputs))
        figures = {}
        for level in (1, 2):
            figures[f"shm_c{level}"] = _shared_memory(client, info, batch, tool, level, args)
            figures[f"grpc_c{level}"] = _plain_grpc(server.grpc_url, info, batch, level, args.requests, server.pid, stub,
                                                    client)
        after = _throughput(run, args.requests, len(inputs))
        as_served = _throughput(sleeping, args.requests, len(inputs)) if sleeping else None
        in_process = (before["img_s"] + after["img_s"]) / 2
        rounds.append({"in_process": [before, after], "in_process_threads_sleeping": as_served, **figures,
                       "ratios": {name: f["img_s"] / in_process for name, f in figures.items()}})
        print(f"round {number + 1}: in-process {in_process:.1f} img/s; " + ", ".join(
            f"{name} {f['img_s']:.1f} ({f['img_s'] / in_process:.2f})" for name, f in figures.items()), flush=True)
    median = lambda name: statistics.median(r["ratios"][name] for r in rounds)  # noqa: E731
    return {"rounds": rounds, "in_process_img_s": statistics.median(
                (r["in_process"][0]["img_s"] + r["in_process"][1]["img_s"]) / 2 for r in rounds),
            "median_ratios": {name: median(name) for name in rounds[0]["ratios"]},
            "in_process_cpu_ms_per_batch": statistics.median(f["cpu_ms"] for r in rounds for f in r["in_process"]),
            "in_process_threads_sleeping": {key: statistics.median(r["in_process_threads_sleeping"][key] for r in rounds)
                                            for key in ("img_s", "cpu_ms")} if sleeping else None}


def _in_process(model: str, artifacts: Path, manifest: Manifest, batch: np.ndarray, threads: int, spin: bool = True):
    """One batch through the same artifact in this process with the backend's threads, warmed up: as a user's
    session runs it (`spin`: idle threads spin-wait, the default), or with idle threads sleeping, as the backend
    runs it (onnxruntime only: OpenMP reads its wait policy once, when torch loads it, so torch's is not measured
    here)."""
    if model == "onnx_model":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        session = ort.InferenceSession(str(manifest.path(manifest.onnx)), options, providers=["CPUExecutionProvider"])
        run = lambda: session.run(None, {manifest.onnx.input_name: batch})  # noqa: E731
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
    return run


def _throughput(run, requests: int, batch: int) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(requests):
        run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"img_s": requests * batch / wall, "cpu_ms": cpu / requests * 1e3}


def _shared_memory(client: Connection, info, batch: np.ndarray, tool, level: int, args) -> dict:
    """`client perf`'s measurement through system shared memory (perf_analyzer where found)."""
    options = PerfOptions(concurrency=(level,), batch=args.batch, requests=args.requests, duration=None, warmup=2,
                          shared_memory="system")
    with closing(open_generator(client, Workload(info, batch, True), level, tool, 300)) as generator:
        result = generator.measure(level, options)
    return {"img_s": result.throughput, "engine": result.engine, "server_ms": _ms(result.server_us),
            "latency_ms": result.latency["avg_ms"]}


def _plain_grpc(url: str, info, batch: np.ndarray, level: int, requests: int, server_pid: int, stub: int,
                client: Connection) -> dict:
    """`level` threads, each with its own tritonclient gRPC client, each request an InferInput made from the
    array, as users' clients send: throughput, CPU per batch of this process (the client), tritonserver and the
    stub, and the server's split of a request."""
    import tritonclient.grpc as grpcclient

    def send(count: int) -> None:
        with grpcclient.InferenceServerClient(url) as connection:
            for _ in range(count):
                tensor = grpcclient.InferInput(info.input_name, list(batch.shape), info.input_dtype)
                tensor.set_data_from_numpy(batch)
                connection.infer(info.name, [tensor]).as_numpy(info.output_name)

    send(1)
    before = client.statistics(info.name)
    workers = [threading.Thread(target=send, args=(requests // level,)) for _ in range(level)]
    cpu = (time.process_time(), _cpu(server_pid), _cpu(stub))
    wall = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - wall
    cpu = [(now - then) / (requests // level * level) * 1e3
           for now, then in zip((time.process_time(), _cpu(server_pid), _cpu(stub)), cpu)]
    after = client.statistics(info.name)
    sent = requests // level * level
    split = {part: (after[part][1] - before[part][1]) / max(1, after[part][0] - before[part][0]) / 1e6
             for part in ("queue", "compute_input", "compute_infer", "compute_output") if part in after}
    return {"img_s": sent * len(batch) / wall, "cpu_ms": dict(zip(("client", "tritonserver", "stub"), cpu)),
            "server_ms": split}


def _cpu(pid: int) -> float:
    """CPU seconds a process used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _ms(server_us: dict | None) -> dict | None:
    return None if server_us is None else {part: us / 1e3 for part, us in server_us.items()}


def _transfer(shm: dict, batch: int) -> dict:
    return {"grpc_bytes_per_image": shm["grpc"]["tensor_bytes_on_wire"] / batch,
            "shm_bytes_per_image": shm["system_shared_memory"]["tensor_bytes_on_wire"] / batch,
            "grpc_client_us_per_image": shm["grpc"]["client_us"] / batch,
            "shm_client_us_per_image": shm["system_shared_memory"]["client_us"] / batch,
            "grpc_avg_ms": shm["grpc"]["avg_ms"], "shm_avg_ms": shm["system_shared_memory"]["avg_ms"]}


def _shape_and_norm(manifest: Manifest):
    spec = manifest.spec
    return spec.input_shape, 64, spec.preprocessing.mean, spec.preprocessing.std


def _without_dynamic_batching(config_path: Path) -> None:
    from google.protobuf import text_format

    config = parse_config(config_path)
    config.ClearField("dynamic_batching")
    config_path.write_text(text_format.MessageToString(config))


def _report(results: dict) -> None:
    models = results["models"]
    names = {"shm_c1": "shm c1", "shm_c2": "shm c2", "grpc_c1": "gRPC c1", "grpc_c2": "gRPC c2"}
    print(f"\n### Served / in-process ({results['arch']}, batch {results['batch']}, {results['threads']} intra-op threads, "
          f"client on the same machine; median of {results['rounds']} rounds, each to its own in-process figure)\n")
    rows = []
    for m, r in models.items():
        ratios = r["median_ratios"]
        best = {kind: max(v for k, v in ratios.items() if k.startswith(kind)) for kind in GOALS}
        sleeping = r["in_process_threads_sleeping"]
        rows.append([m, round(r["in_process_img_s"], 1), round(sleeping["img_s"], 1) if sleeping else "-",
                     *(f"{ratios[k]:.2f}" for k in names),
                     *(f"**{best[kind]:.2f}** ({'met' if best[kind] >= goal else 'not met'}: >= {goal})"
                       for kind, goal in GOALS.items())])
    print(markdown_table(["model", "in-process img/s", "in-process, idle threads sleeping", *names.values(),
                          "shared memory, best", "plain gRPC, best"], rows))

    print("\n### Where the time went: CPU ms per batch (plain gRPC; in-process: the session alone, its idle threads "
          "spinning as by default / sleeping as served)\n")
    rows = []
    for m, r in models.items():
        sleeping = r["in_process_threads_sleeping"] or {"cpu_ms": float("nan")}
        for level in (1, 2):
            cpu = [statistics.median(rnd[f"grpc_c{level}"]["cpu_ms"][p] for rnd in r["rounds"])
                   for p in ("client", "tritonserver", "stub")]
            split = {part: statistics.median(rnd[f"grpc_c{level}"]["server_ms"].get(part, 0.0) for rnd in r["rounds"])
                     for part in ("queue", "compute_input", "compute_infer", "compute_output")}
            rows.append([m, f"c{level}", f"{r['in_process_cpu_ms_per_batch']:.0f} / {sleeping['cpu_ms']:.0f}",
                         *(round(c, 1) for c in cpu), round(sum(cpu)), " / ".join(f"{v:.1f}" for v in split.values())])
    print(markdown_table(["model", "gRPC", "in-process CPU ms", "client", "tritonserver", "stub", "served total",
                          "server ms: queue / input / infer / output"], rows))

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
    print(f"\nload average before {results['load_average_before']}, after {results['load_average_after']}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    labels = list(models)
    x = np.arange(len(labels))
    width = 0.8 / len(names)
    for i, (key, name) in enumerate(names.items()):
        axes[0].bar(x + (i - 1.5) * width, [models[m]["median_ratios"][key] for m in labels], width, label=name)
    for kind, goal in GOALS.items():
        axes[0].axhline(goal, ls="--", lw=1, color="k" if kind == "shm" else "grey")
        axes[0].text(len(labels) - 0.5, goal, f" goal {kind} {goal}", va="center", fontsize=7)
    axes[0].set(title="served / in-process (median of rounds)", ylabel="ratio", ylim=(0, 1.2))
    parts = ("client", "tritonserver", "stub")
    bottom = np.zeros(len(labels))
    axes[1].bar(x - 0.2, [models[m]["in_process_cpu_ms_per_batch"] for m in labels], 0.35, label="in-process")
    for part in parts:
        values = np.array([statistics.median(r["grpc_c1"]["cpu_ms"][part] for r in models[m]["rounds"]) for m in labels])
        axes[1].bar(x + 0.2, values, 0.35, bottom=bottom, label=f"served c1: {part}")
        bottom += values
    axes[1].set(title=f"CPU per batch of {results['batch']}", ylabel="ms")
    axes[2].bar(x - 0.2, [models[m]["batching_off_img_s"] for m in labels], 0.4, label="batching off")
    axes[2].bar(x + 0.2, [models[m]["batching_on_img_s"] for m in labels], 0.4, label="batching on")
    axes[2].set(title="dynamic batching, concurrency 8", ylabel="images/s")
    for ax in axes:
        ax.set_xticks(x, labels)
        ax.legend(fontsize=7)
    fig.suptitle(f"tritonize serving: {results['arch']}, batch {results['batch']}")
    path = save(f"serving_{results['arch']}", results, fig)
    print(f"\nwrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
