"""Time to serve again after a crash under `tritonize client perf` load: tritonserver killed, and a backend stub killed.

Each run: a fresh `tritonize serve` (embedded engine) of resnet18 (random init) as onnx_model (`repo build` defaults,
CPU), `tritonize client perf --load-generator builtin --concurrency C --duration D` against it, and KILL_AT seconds
into its window (once the server answered more than the warm-up) a kill -9 of tritonserver or of the model's stub.
Measured:
- answered: from the kill to the first inference answered, a probe sending one request every 50 ms, each on a new
  connection (a gRPC channel that lost its server waits out a back-off before it connects again);
- serve: what `tritonize serve` says it took (its `serves again, X s` or `reloaded in X s` line);
- the level's requests that succeeded and failed, as `client perf` recorded them (perf.json).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/healing.py [--runs 3] [--concurrency 16] [--duration 20]

Writes results/healing.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from common import artifacts, markdown_table, save  # noqa: E402

from tests.serve.helpers import Serve, children  # noqa: E402
from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.serve.supervisor import stub_processes  # noqa: E402

KILL_AT = 3.0  # seconds into the level's window


def _probe(url: str, since: float, limit: float = 120.0) -> float | None:
    """Seconds from `since` to the first answered inference, or None."""
    import tritonclient.grpc as grpcclient

    x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
    while time.monotonic() - since < limit:
        try:
            with grpcclient.InferenceServerClient(url) as client:
                client.infer("onnx_model", [x], client_timeout=10)
            return time.monotonic() - since
        except Exception:  # noqa: BLE001 - refused or failed while it heals
            time.sleep(0.05)
    return None


def run(repo: Path, fault: str, concurrency: int, duration: float, out: Path) -> dict:
    with Serve(repo) as serve:
        perf = subprocess.Popen(
            [str(Path(sys.executable).parent / "tritonize"), "client", "perf", "--url", serve.grpc_url, "--concurrency",
             str(concurrency), "--duration", str(duration), "--warmup-requests", "2", "--load-generator", "builtin",
             "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        serve.wait_answered("onnx_model", 3 * concurrency)  # past the warm-up (2 per worker): in the window
        time.sleep(KILL_AT)
        server = next(pid for pid, cmd in children(serve.process.pid).items() if "bin/tritonserver" in cmd)
        victim = server if fault == "tritonserver" else stub_processes(server)["onnx_model_0_0"]
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        answered = _probe(serve.grpc_url, killed)
        line = serve.expect("tritonserver serves again, " if fault == "tritonserver" else "onnx_model: stub", timeout=120)
        perf.communicate(timeout=600)
        level = json.loads((out / "perf.json").read_text())["levels"][0]
    said = float(line.split("serves again, ")[1].split(" s")[0] if fault == "tritonserver" else line.split("reloaded in ")[1].split(" s")[0])
    return {"fault": fault, "answered_s": answered, "serve_s": said, "serve_line": line, "succeeded": level["requests"],
            "failed": level["failures"], "error": level["error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="healing-") as work:
        repo = Path(work) / "models"
        build_repository(artifacts("resnet18"), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
        load = os.getloadavg()
        runs = [run(repo, fault, args.concurrency, args.duration, Path(work) / f"perf-{fault}-{i}")
                for i in range(args.runs) for fault in ("tritonserver", "stub")]
    save("healing", {"concurrency": args.concurrency, "duration": args.duration, "kill_at": KILL_AT,
                     "load_average_before": load, "load_average_after": os.getloadavg(), "runs": runs})
    rows = [[r["fault"], f"{r['answered_s']:.2f}" if r["answered_s"] is not None else "never", f"{r['serve_s']:.1f}",
             r["succeeded"], r["failed"], (r["error"] or "")[:60]] for r in runs]
    print(markdown_table(["killed", "answered again s", "serve's own s", "level: succeeded", "failed", "first error"], rows))
    print(f"load average before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
