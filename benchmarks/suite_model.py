"""What the suite's own classifier (tests/suite_model.py) saves against resnet18, the model the tests used before:
the CPU time of the steps every test session repeats, for each model in the same run.

    .venv/bin/python benchmarks/suite_model.py [--rounds 2]

Per model: `tritonize export --format all` (verified at batches 1, 7 and 32, what `small_artifacts` does),
`tritonize repo build` (CPU instances, ensembles) and an embedded Triton's start (every model warmed up at batch 1
and 32) to its stop. CPU seconds are user + system of the child processes (getrusage), so a loaded machine slows the
wall clock more than them; rounds alternate which model goes first. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"resnet18": ("--arch", "resnet18", "--weights", "none"),
          "suite classifier": ("--arch", f"{ROOT / 'tests' / 'suite_model.py'}:suite_classifier", "--weights", "none",
                               "--labels", str(ROOT / "tests" / "data" / "suite_labels.txt"))}
TRITONIZE = [sys.executable, "-m", "tritonize"]
SERVE = ("from tritonize.serve.embedded import embedded_server; import sys, pathlib\n"
         "with embedded_server(pathlib.Path(sys.argv[1])): pass")


def cpu_seconds(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds of the children, wall seconds) of one command, which must succeed."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.perf_counter() - start


def measure(model: str, work: Path) -> dict[str, tuple[float, float]]:
    artifacts, repo = work / "build", work / "models"
    return {
        "export --format all": cpu_seconds([*TRITONIZE, "export", *MODELS[model], "--format", "all", "--artifacts",
                                            str(artifacts)]),
        "repo build": cpu_seconds([*TRITONIZE, "repo", "build", "--artifacts", str(artifacts), str(repo), "--kind", "cpu"]),
        "server start (warmup 1, 32) and stop": cpu_seconds([sys.executable, "-c", SERVE, str(repo)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {m: [] for m in MODELS}
    for r in range(args.rounds):
        for model in (list(MODELS) if r % 2 == 0 else list(reversed(MODELS))):
            with tempfile.TemporaryDirectory(prefix="suite-model-") as work:
                results[model].append(measure(model, Path(work)))
                print(f"round {r + 1}: {model} {results[model][-1]}", file=sys.stderr)
    steps = list(results["resnet18"][0])
    print("| step | resnet18 CPU s | suite classifier CPU s | ratio |")
    print("|---|---|---|---|")
    for step in steps:
        a = min(m[step][0] for m in results["resnet18"])
        b = min(m[step][0] for m in results["suite classifier"])
        print(f"| {step} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")


if __name__ == "__main__":
    main()
