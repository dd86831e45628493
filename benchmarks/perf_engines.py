"""perf_analyzer vs the built-in load generator, side by side: same server, same model, same image, one run.

    .venv/bin/python benchmarks/perf_engines.py [--arch resnet18] [--levels 1-16] [--duration 6] [--rounds 3]

One embedded Triton serves onnx_model (configs/cpu.pbtxt: 1 instance, dynamic batching). For every
concurrency level and round, `tritonize client perf --load-generator perf_analyzer` and `--load-generator builtin` run
back to back (which goes first alternates), batch 1, the same photo in every request, `--duration`
measured seconds each. Before each pair the script waits (at most --quiet-timeout s) until other
people's work on this shared machine uses at most --quiet cores; during each run it records the CPU
used by the server, by the measuring client and by everything else ("foreign"), and the load average.
The ratio built-in / perf_analyzer is taken within each pair, then the median over rounds.
Writes results/perf_engines_<arch>.json (every run) and .png, and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, CpuShares, artifacts, markdown_table, save, wait_until_quiet

from tritonize.client.connection import Connection
from tritonize.client.perf import PerfOptions, run_perf
from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.serve.embedded import embedded_server
from tritonize.tools.perf_analyzer import require

LOAD_GENERATORS = ("perf_analyzer", "builtin")


def levels(text: str) -> list[int]:
    if "-" in text:
        low, high = map(int, text.split("-"))
        return list(range(low, high + 1))
    return [int(v) for v in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--levels", default="1-16", help="concurrency levels: 1-16 or 1,2,4")
    parser.add_argument("--duration", type=float, default=6.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quiet", type=float, default=0.3, help="foreign cores to wait for before each pair")
    parser.add_argument("--quiet-timeout", type=float, default=60.0)
    args = parser.parse_args()
    tool = require()
    repo = RESULTS / f"work-{args.arch}" / "perf_engines"
    build_repository(artifacts(args.arch), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False, force=True))
    runs = []
    load_before = os.getloadavg()
    with embedded_server(repo) as server, Connection(server.grpc_url, timeout=120) as connection:
        for round_ in range(args.rounds):
            for i, level in enumerate(levels(args.levels)):
                quiet = wait_until_quiet(server.pid, args.quiet, args.quiet_timeout)
                for engine in (LOAD_GENERATORS if (round_ + i) % 2 == 0 else LOAD_GENERATORS[::-1]):
                    load = os.getloadavg()[0]
                    shares = CpuShares(server.pid)
                    options = PerfOptions(concurrency=(level,), duration=args.duration, warmup=4, engine=engine,
                                          preprocess="client")
                    (result,) = run_perf(connection, ["onnx_model"], options).levels
                    cpu = shares.stop()
                    run = {"round": round_, "concurrency": level, "engine": engine, "infer_s": round(result.throughput, 2),
                           "p50_ms": round(result.latency["p50_ms"], 2), "p99_ms": round(result.latency["p99_ms"], 2),
                           "compute_infer_ms": round(result.server_us["compute_infer"] / 1e3, 2),
                           "transport_us": round(result.network_us), "server_batch": round(result.server_batches, 2),
                           "requests": result.requests, "quiet_before": quiet, "load_average_1m": load,
                           "server_cores": cpu["tree_cores"], "client_cores": cpu["own_cores"],
                           # the client's CPU per measured request (warm-up, start and the window included)
                           "client_cpu_ms_per_request": round(cpu["own_cores"] * cpu["seconds"] * 1e3 / max(1, result.requests), 3),
                           "foreign_cores": cpu["foreign_cores"]}
                    runs.append(run)
                    print(run, flush=True)
    load_after = os.getloadavg()

    table, summary = [], {}
    clean_ratios, all_ratios = [], []
    for level in levels(args.levels):
        pairs = [(next(r for r in runs if r["round"] == k and r["concurrency"] == level and r["engine"] == "perf_analyzer"),
                  next(r for r in runs if r["round"] == k and r["concurrency"] == level and r["engine"] == "builtin"))
                 for k in range(args.rounds)]
        ratios = [b["infer_s"] / p["infer_s"] for p, b in pairs]
        clean = [b["infer_s"] / p["infer_s"] for p, b in pairs if max(p["foreign_cores"], b["foreign_cores"]) <= args.quiet]
        all_ratios += ratios
        clean_ratios += clean
        def med(key, engine, pairs=pairs):
            return statistics.median(r[key] for pair in pairs for r in pair if r["engine"] == engine)

        summary[level] = {"ratio_median": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios],
                          "clean_ratios": [round(r, 3) for r in clean]}
        table.append([level, f"{med('infer_s', 'perf_analyzer'):.1f}", f"{med('infer_s', 'builtin'):.1f}",
                      f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}",
                      " ".join(f"{r:.2f}" for r in clean) or "-",
                      f"{med('transport_us', 'perf_analyzer'):.0f} / {med('transport_us', 'builtin'):.0f}",
                      f"{med('client_cpu_ms_per_request', 'perf_analyzer'):.2f} / {med('client_cpu_ms_per_request', 'builtin'):.2f}",
                      f"{med('foreign_cores', 'perf_analyzer'):.2f} / {med('foreign_cores', 'builtin'):.2f}"])
    summary["all"] = {"ratio_median": round(statistics.median(all_ratios), 3), "pairs": len(all_ratios),
                      "clean_ratio_median": round(statistics.median(clean_ratios), 3) if clean_ratios else None,
                      "clean_pairs": len(clean_ratios)}
    path = save(f"perf_engines_{args.arch}", {"arch": args.arch, "duration": args.duration, "rounds": args.rounds,
                                               "perf_analyzer": str(tool), "load_average": {"before": load_before, "after": load_after},
                                               "summary": summary, "runs": runs}, _figure(runs, levels(args.levels)))
    print(f"\nperf_analyzer vs built-in, {args.arch} onnx_model batch 1, {args.duration:g} s per run, {args.rounds} rounds; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after\n")
    print(markdown_table(["concurrency", "perf_analyzer infer/s (median)", "built-in infer/s (median)",
                          "built-in / PA (median of pairs)", "range", f"pairs with <= {args.quiet:g} foreign cores",
                          "transport us PA / built-in", "client CPU ms/request PA / built-in", "foreign cores PA / built-in"], table))
    print(f"\nall {len(all_ratios)} pairs: median ratio {statistics.median(all_ratios):.3f}; "
          f"{len(clean_ratios)} pairs with both runs at <= {args.quiet:g} foreign cores: "
          + (f"median {statistics.median(clean_ratios):.3f}" if clean_ratios else "none"))
    print(f"\n{path}")


def _figure(runs: list[dict], levels_: list[int]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for engine, marker in zip(LOAD_GENERATORS, "ox"):
        for level in levels_:
            values = [r["infer_s"] for r in runs if r["engine"] == engine and r["concurrency"] == level]
            ax.scatter([level + (-0.12 if engine == LOAD_GENERATORS[0] else 0.12)] * len(values), values, marker=marker,
                       color="C0" if engine == LOAD_GENERATORS[0] else "C1", label=engine if level == levels_[0] else None)
    ax.set(xlabel="concurrency", ylabel="infer/s", title="perf_analyzer vs built-in, every run")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


if __name__ == "__main__":
    main()
