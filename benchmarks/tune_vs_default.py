"""`tritonize tune` vs the default config at the same p99 budget, on the embedded server.

    .venv/bin/python benchmarks/tune_vs_default.py [--arch resnet18] [--p99-ms 100] [--budget-minutes 8] [--duration 3]

Builds onnx_model (configs/cpu.pbtxt: the default `repo build` writes) from random-init artifacts, runs
`tritonize tune` on it with the default search space, and reports what tune measured: every config's
best throughput within the budget, and the default and the winner measured again back to back at
their best concurrency. The trials, search.png and report.json stay in results/tune_<arch>/.
Re-running continues an interrupted search (tune is resumable); --fresh starts over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save

from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.tune.report import to_dict, to_text, write_report
from tritonize.tune.run import tune
from tritonize.tune.search import TuneOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--p99-ms", type=float, default=100.0)
    parser.add_argument("--budget-minutes", type=float, default=8.0)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    repo = RESULTS / f"work-{args.arch}" / "tune"
    build_repository(artifacts(args.arch), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
    report_dir = RESULTS / f"tune_{args.arch}"
    load = {"before": os.getloadavg()}
    options = TuneOptions(model="onnx_model", p99_ms=args.p99_ms, budget_minutes=args.budget_minutes,
                          duration=args.duration, report_dir=report_dir, force=args.fresh)
    result, trials = tune(repo, options)
    load["after"] = os.getloadavg()
    write_report(result, trials, report_dir / "onnx_model")
    summary = to_dict(result)
    rows = [[key, *(f"{v:.1f}" if isinstance(v, float) else v for v in
                    (result.scores[key][0], result.scores[key][1]))] for key in result.scores]
    save(f"tune_{args.arch}", {**summary, "load_average": load, "scores": {k: list(v) for k, v in result.scores.items()}})
    print(f"\n{to_text(result)}\nload average {load['before'][0]:.2f} before, {load['after'][0]:.2f} after\n")
    print(markdown_table(["config", "best infer/s within p99", "at concurrency"], rows))
    print(json.dumps({k: summary[k] for k in ("default", "winner")}, indent=1))


if __name__ == "__main__":
    main()
