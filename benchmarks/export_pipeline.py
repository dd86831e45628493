"""Time and peak RSS of each export step for a model (default wide_resnet101_2, random init).

    .venv/bin/python benchmarks/export_pipeline.py [--arch wide_resnet101_2]

The export runs in a fresh process so its memory figures are its own; each step's figures are
the ones the export stage records in the manifest (tritonize.progress.step samples RSS while the
step runs). Ratios (share of the total time) are what compare across machines.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import markdown_table, save

from tritonize.manifest import Manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="wide_resnet101_2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "tritonize.cli", "export", "--arch", args.arch, "--weights", "none", "--artifacts", tmp],
            check=True,
        )
        wall = time.perf_counter() - start
        manifest = Manifest.load(Path(tmp))

    steps = []  # (artifact, step, seconds, peak MB); build/reference are shared, listed once
    for artifact in ("torchscript", "onnx"):
        for name, t in manifest.artifacts[artifact].details["timings"].items():
            if name in ("build", "reference") and artifact == "onnx":
                continue
            label = name if name in ("build", "reference") else f"{artifact} {name}"
            steps.append((label, t["seconds"], t["peak_rss_mb"]))
    total = sum(s for _, s, _ in steps)
    rows = [[label, round(s, 2), f"{s / total:.0%}", round(mb)] for label, s, mb in steps]
    rows.append(["total (steps)", round(total, 2), "100%", round(max(mb for _, _, mb in steps))])
    rows.append(["wall clock incl. imports", round(wall, 2), "", ""])
    table = markdown_table(["step", "seconds", "share", "peak RSS MB"], rows)
    print(f"\nExport pipeline, {args.arch} (random init)\n\n{table}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [label for label, _, _ in steps]
    ax1.barh(labels, [s for _, s, _ in steps], color="tab:blue")
    ax1.set_xlabel("seconds")
    ax1.invert_yaxis()
    ax2.barh(labels, [mb / 1024 for _, _, mb in steps], color="tab:orange")
    ax2.set_xlabel("peak RSS during the step (GiB)")
    ax2.invert_yaxis()
    ax2.set_yticklabels([])
    fig.suptitle(f"tritonize export: {args.arch}")
    path = save(f"export_{args.arch}", {"arch": args.arch, "wall_seconds": wall, "steps": [
        {"step": label, "seconds": s, "peak_rss_mb": mb} for label, s, mb in steps]}, fig)
    print(f"\nwrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
