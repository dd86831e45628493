"""Time to serve again after a crash under `tritonize client perf` load: tritonserver killed, killed twice, and a
backend stub killed.

Each run: a fresh `tritonize serve` (embedded engine) of resnet18 (random init) as onnx_model (`repo build` defaults,
CPU), `tritonize client perf --load-generator builtin --concurrency C --duration D` against it, and KILL_AT seconds
into its window (once the server answered more than the warm-up) a kill -9 of tritonserver, of the model's stub, or
of tritonserver and then, AGAIN_AFTER seconds after the first, of the tritonserver running then (the new one, while
it starts or loads the models back: issue 43's 299 s without service).
Measured:
- answered: from the (last) kill to the first inference answered, a probe sending one request every 50 ms, each on a
  new connection (a gRPC channel that lost its server waits out a back-off before it connects again); for two kills
  also from the first;
- serve: what `tritonize serve` says it took (its last `serves again, X s` or `reloaded in X s` line);
- the level's requests that succeeded and failed, as `client perf` recorded them (perf.json).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/healing.py [--runs 3] [--concurrency 16] [--duration 20]
        [--faults tritonserver,twice,stub]

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
AGAIN_AFTER = 4.5  # seconds from the first kill to the second ("twice")
FAULTS = ("tritonserver", "twice", "stub")


def _probe(url: str, since: float, limit: float = 400.0) -> float | None:
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


def _server(serve: Serve, limit: float = 120.0) -> int:
    """tritonserver's pid (waiting for one while serve starts it again)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = next((pid for pid, cmd in children(serve.process.pid).items() if "bin/tritonserver" in cmd), None)
        if found:
            return found
        time.sleep(0.01)
    raise SystemExit("no tritonserver to kill")


def run(repo: Path, fault: str, concurrency: int, duration: float, out: Path) -> dict:
    with Serve(repo) as serve:
        perf = subprocess.Popen(
            [str(Path(sys.executable).parent / "tritonize"), "client", "perf", "--url", serve.grpc_url, "--concurrency",
             str(concurrency), "--duration", str(duration), "--warmup-requests", "2", "--load-generator", "builtin",
             "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        serve.wait_answered("onnx_model", 3 * concurrency)  # past the warm-up (2 per worker): in the window
        time.sleep(KILL_AT)
        server = _server(serve)
        victim = stub_processes(server)["onnx_model_0_0"] if fault == "stub" else server
        first = killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        if fault == "twice":
            time.sleep(max(0.0, first + AGAIN_AFTER - time.monotonic()))
            os.kill(_server(serve), signal.SIGKILL)
            killed = time.monotonic()
        answered = _probe(serve.grpc_url, killed)
        if fault == "stub":
            line = serve.expect("onnx_model: stub", timeout=400)
        else:
            for _ in range(2 if fault == "twice" else 1):  # the crash lines, then the last `serves again`
                serve.expect("tritonserver was killed by SIGKILL", timeout=400)
            line = serve.expect("tritonserver serves again, ", timeout=400)
        perf.communicate(timeout=600)
        level = json.loads((out / "perf.json").read_text())["levels"][0]
        log = [line for line in serve.stderr if not line.startswith("  |")]
    own = float(line.split("reloaded in " if fault == "stub" else "serves again, ")[1].split(" s")[0])
    return {"fault": fault, "answered_s": answered, "answered_from_first_s": None if answered is None else answered + killed - first,
            "serve_s": own, "serve_line": line, "succeeded": level["requests"], "failed": level["failures"],
            "error": level["error"], "serve_log": log}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    if not set(faults) <= set(FAULTS):
        raise SystemExit(f"--faults: of {', '.join(FAULTS)}")
    with tempfile.TemporaryDirectory(prefix="healing-") as work:
        repo = Path(work) / "models"
        build_repository(artifacts("resnet18"), repo, RepoOptions(kind="cpu", models=("onnx_model",), ensembles=False))
        load = os.getloadavg()
        runs = [run(repo, fault, args.concurrency, args.duration, Path(work) / f"perf-{fault}-{i}")
                for i in range(args.runs) for fault in faults]
    save("healing", {"concurrency": args.concurrency, "duration": args.duration, "kill_at": KILL_AT,
                     "again_after": AGAIN_AFTER, "load_average_before": load, "load_average_after": os.getloadavg(),
                     "runs": runs})
    seconds = lambda v: f"{v:.2f}" if v is not None else "never"  # noqa: E731
    rows = [[{"twice": f"tritonserver twice, {AGAIN_AFTER} s apart"}.get(r["fault"], r["fault"]), seconds(r["answered_s"]),
             seconds(r["answered_from_first_s"]) if r["fault"] == "twice" else "", f"{r['serve_s']:.1f}",
             r["succeeded"], r["failed"], (r["error"] or "")[:60]] for r in runs]
    print(markdown_table(["killed", "answered again s (after the last kill)", "after the first kill",
                          "serve's own s", "level: succeeded", "failed", "first error"], rows))
    print(f"load average before {load}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
