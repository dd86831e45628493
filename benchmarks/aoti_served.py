"""aoti_model vs torch_model and onnx_model from the same export, served by the embedded Triton, measured by perf_analyzer.

    .venv/bin/python benchmarks/aoti_served.py [--arch resnet18] [--levels 1,4,8] [--requests 16] [--rounds 3]

The artifacts (TorchScript, ONNX, the ExportedProgram and its AOTInductor package for this CPU: `convert aoti`, cached
by the program's hash and torch's version) are made once under results/. One embedded Triton serves the three models
(configs/cpu.pbtxt: 1 CPU instance each, dynamic batching, the same intra-op threads). For every concurrency level and
round, `client perf --load-generator perf_analyzer` measures each model in turn (the order rotates every round),
batch 1, the same photo in every request, --requests x concurrency measured requests (perf_analyzer's
--request-count: on a loaded machine a time window may see no request complete). The machine is shared: throughputs are only
compared within a round (aoti / torch, aoti / onnx), then the median over rounds.
Writes results/aoti_served_<arch>.json (every run) and .png, and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save

from tritonize.client.connection import Connection
from tritonize.client.perf import PerfOptions, run_perf
from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.serve.embedded import embedded_server
from tritonize.tools.perf_analyzer import require

MODELS = ("aoti_model", "torch_model", "onnx_model")


def compiled(arch: str) -> Path:
    """`artifacts(arch)` with the ExportedProgram and the CPU package (each stage skips what is up to date)."""
    path = artifacts(arch)
    cli = [sys.executable, "-m", "tritonize.cli"]
    subprocess.run([*cli, "export", "--arch", arch, "--weights", "none", "--format", "torchscript,onnx,exported_program",
                    "--artifacts", str(path)], check=True)
    subprocess.run([*cli, "convert", "aoti", "--artifacts", str(path)], check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--requests", type=int, default=16, help="measured requests per run, times the concurrency")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tool = require()
    levels = [int(v) for v in args.levels.split(",")]
    repo = RESULTS / f"work-{args.arch}" / "aoti_served"
    build_repository(compiled(args.arch), repo, RepoOptions(kind="cpu", models=MODELS, ensembles=False, force=True))
    runs, load_before = [], os.getloadavg()
    with embedded_server(repo) as server, Connection(server.grpc_url, timeout=300) as connection:
        for round_ in range(args.rounds):
            order = MODELS[round_ % len(MODELS):] + MODELS[:round_ % len(MODELS)]
            for level in levels:
                for model in order:
                    options = PerfOptions(concurrency=(level,), requests=args.requests * level, duration=None, warmup=4,
                                          engine="perf_analyzer", preprocess="client", level_time_limit=1800.0)
                    (result,) = run_perf(connection, [model], options).levels
                    run = {"round": round_, "concurrency": level, "model": model, "infer_s": round(result.throughput, 2),
                           "p50_ms": round(result.latency["p50_ms"], 2), "p99_ms": round(result.latency["p99_ms"], 2),
                           "compute_infer_ms": round((result.server_us or {}).get("compute_infer", float("nan")) / 1e3, 2),
                           "server_batch": result.server_batches, "failures": result.failures,
                           "load_average_1m": os.getloadavg()[0]}
                    runs.append(run)
                    print(run, flush=True)
    load_after = os.getloadavg()

    def of(model, level, round_):
        return next(r["infer_s"] for r in runs if (r["model"], r["concurrency"], r["round"]) == (model, level, round_))

    table, summary = [], {}
    for level in levels:
        rates = {m: [of(m, level, r) for r in range(args.rounds)] for m in MODELS}
        ratios = {other: [a / b for a, b in zip(rates["aoti_model"], rates[other]) if b > 0]
                  for other in ("torch_model", "onnx_model")}
        p50 = {m: statistics.median(r["p50_ms"] for r in runs if (r["model"], r["concurrency"]) == (m, level))
               for m in MODELS}
        summary[level] = {"infer_s": {m: statistics.median(v) for m, v in rates.items()},
                          "aoti_over": {o: statistics.median(v) for o, v in ratios.items()},
                          "ratios": {o: [round(x, 3) for x in v] for o, v in ratios.items()}, "p50_ms": p50}
        table.append([level, *(round(summary[level]["infer_s"][m], 1) for m in MODELS),
                      round(summary[level]["aoti_over"]["torch_model"], 2),
                      " ".join(f"{x:.2f}" for x in ratios["torch_model"]),
                      round(summary[level]["aoti_over"]["onnx_model"], 2),
                      " ".join(f"{x:.2f}" for x in ratios["onnx_model"]),
                      " / ".join(f"{p50[m]:.1f}" for m in MODELS)])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for model in MODELS:
        left.plot(levels, [summary[lv]["infer_s"][model] for lv in levels], marker="o", label=model)
    left.set(xlabel="concurrency", ylabel="infer/s (median of rounds)", title=f"{args.arch}, batch 1, embedded Triton, CPU")
    left.legend()
    for other in ("torch_model", "onnx_model"):
        right.plot(levels, [summary[lv]["aoti_over"][other] for lv in levels], marker="o", label=f"aoti / {other.split('_')[0]}")
    right.axhline(1.0, color="gray", linewidth=0.8)
    right.set(xlabel="concurrency", ylabel="throughput ratio (median of rounds)", title="aoti_model vs the others, same run")
    right.legend()
    save(f"aoti_served_{args.arch}", {"args": vars(args), "tool": str(tool.path), "runs": runs,
                                      "summary": {str(k): v for k, v in summary.items()},
                                      "load_average": {"before": load_before, "after": load_after}}, figure)
    print(markdown_table(["concurrency", *(f"{m} infer/s" for m in MODELS), "aoti / torch (median)", "per round",
                          "aoti / onnx (median)", "per round", "p50 ms aoti / torch / onnx"], table))
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")


if __name__ == "__main__":
    main()
