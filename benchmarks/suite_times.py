"""`make test`'s time per test file, two runs side by side, from the JUnit XML files pytest writes.

    .venv/bin/python benchmarks/suite_times.py BEFORE.xml AFTER.xml [--labels before,after] [--top 30]

Prints a markdown table (seconds per file: the sum of its tests' times, setup and teardown included, so with
two workers it is worker time, not wall clock) and writes benchmarks/results/suite_times.png.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def per_file(xml: Path) -> tuple[Counter, int]:
    """Test file (tests/x/test_y.py) -> seconds, and the number of tests."""
    times: Counter = Counter()
    count = 0
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = (case.get("classname") or "?").split(".")
        times["/".join(module) + ".py"] += float(case.get("time") or 0)
        count += 1
    return times, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--labels", default="before,after")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    labels = args.labels.split(",")
    (before, n_before), (after, n_after) = per_file(args.before), per_file(args.after)
    files = sorted(set(before) | set(after), key=lambda f: -max(before[f], after[f]))
    shown, rest = files[:args.top], files[args.top:]
    print(f"| test file | {labels[0]} s | {labels[1]} s |\n|---|---|---|")
    for name in shown:
        print(f"| {name} | {before[name]:.1f} | {after[name]:.1f} |")
    print(f"| the other {len(rest)} files | {sum(before[f] for f in rest):.1f} | {sum(after[f] for f in rest):.1f} |")
    print(f"| **all ({n_before} / {n_after} tests)** | **{sum(before.values()):.0f}** | **{sum(after.values()):.0f}** |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(exist_ok=True)
    figure, axes = plt.subplots(figsize=(9, 0.28 * len(shown) + 1.2))
    positions = range(len(shown))
    axes.barh([p + 0.2 for p in positions], [before[f] for f in shown], height=0.4, label=labels[0])
    axes.barh([p - 0.2 for p in positions], [after[f] for f in shown], height=0.4, label=labels[1])
    axes.set_yticks(list(positions), [f.removeprefix("tests/") for f in shown], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("seconds (sum of the file's tests)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "suite_times.png", dpi=110)
    print(f"\nplot: {RESULTS / 'suite_times.png'}")


if __name__ == "__main__":
    main()
