"""Peak memory of the server's `preprocess` model per image, for this code and an earlier one, in one run.

    .venv/bin/python benchmarks/preprocess_memory.py [--arch resnet18] [--baseline be93167]

One repository (`onnx_model` and its ensembles) is built twice: with this tritonize's preprocessing code,
and with the code of the git revision `--baseline` put in its place (the preprocess model's `model.py` and
the modules beside it, as `repo build` places them). For each image and each code, a fresh embedded Triton
serves the repository, one request carries the encoded file to `onnx_classifier` (server-side
preprocessing), and the preprocess stub's peak resident memory is read from /proc/<pid>/status (VmHWM)
after it loaded and after the request. The images: the sample photo, a noisy 4032x3024 JPEG (an accepted
large photo), and three small files that cost memory without being photos: thin (1x12000 PNG, 786 Mpx once
its shorter side is resized to 256), tall (20x20000 PNG, 66 Mpx resized) and huge (a flat 9000x9000 PNG:
81 Mpx, under Pillow's 89.5 Mpx limit, 99 KB); and a flat 4096x4096 PNG, the largest image the server
decodes whatever its file size (images.FREE_PIXELS).
Writes results/preprocess_memory_<arch>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save  # noqa: E402

from tritonize.client.connection import Connection, RejectedImage  # noqa: E402
from tritonize.errors import TritonizeError  # noqa: E402
from tritonize.images import read_image_file  # noqa: E402
from tritonize.repository_builder import RepoOptions, build_repository  # noqa: E402
from tritonize.repository_builder.builder import PREPROCESS_CODE, VERSION  # noqa: E402
from tritonize.serve.embedded import embedded_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--baseline", default="be93167", help="git revision whose preprocessing code is compared")
    args = parser.parse_args()
    work = RESULTS / f"work-{args.arch}" / "preprocess_memory"
    images = make_images(work / "images")
    repos = {"this code": work / "current", f"{args.baseline}": work / "baseline"}
    for repo in repos.values():
        build_repository(artifacts(args.arch), repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False,
                                                                 force=True))
    place_code(repos[args.baseline], args.baseline)
    results = {"arch": args.arch, "baseline": args.baseline, "images": {}, "runs": {}}
    for name, path in images.items():
        results["images"][name] = {"file": path.name, "bytes": path.stat().st_size, "size": size_of(path)}
        for code, repo in repos.items():
            results["runs"][f"{name} @ {code}"] = run = measure(repo, path)
            print(f"{name:12s} {code:10s} peak {run['peak_mb']:7.0f} MB (+{run['peak_mb'] - run['loaded_peak_mb']:.0f}) "
                  f"{run['seconds']:6.2f} s  {run['outcome'][:110]}", flush=True)
    out = save(f"preprocess_memory_{args.arch}", results)
    rows = []
    for name, facts in results["images"].items():
        before, after = (results["runs"][f"{name} @ {c}"] for c in (args.baseline, "this code"))
        rows.append([name, facts["size"], f"{facts['bytes'] / 1e3:,.0f} KB", _cell(before), _cell(after),
                     after["outcome"] if len(after["outcome"]) < 90 else after["outcome"][:87] + "..."])
    print()
    print(markdown_table(["image", "size", "file", f"stub peak (+request), time: {args.baseline}", "this code",
                          "this code's answer"], rows))
    print(f"\nwrote {out}")


def _cell(run: dict) -> str:
    return f"{run['peak_mb']:,.0f} MB (+{run['peak_mb'] - run['loaded_peak_mb']:,.0f}), {run['seconds']:.2f} s"


def make_images(folder: Path) -> dict[str, Path]:
    from matplotlib import cbook
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    photo = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    made = {"photo": photo}
    for name, file, make in (
        ("large photo", "photo_4032x3024.jpg", lambda: _noisy_photo(photo, (4032, 3024), rng)),
        ("thin", "thin_1x12000.png", lambda: Image.fromarray(rng.integers(0, 256, (12000, 1, 3), np.uint8))),
        ("tall", "tall_20x20000.png", lambda: Image.fromarray(rng.integers(0, 256, (20000, 20, 3), np.uint8))),
        ("huge", "huge_9000x9000.png", lambda: Image.new("L", (9000, 9000), 128)),
        ("flat 4096x4096", "flat_4096x4096.png", lambda: Image.new("L", (4096, 4096), 128)),
    ):
        path = folder / file
        if not path.is_file():
            make().save(path, **({"quality": 92} if file.endswith(".jpg") else {}))
        made[name] = path
    return made


def _noisy_photo(photo: Path, size: tuple[int, int], rng) -> "object":
    from PIL import Image

    pixels = np.asarray(Image.open(photo).convert("RGB").resize(size, Image.BICUBIC), np.int16)
    return Image.fromarray(np.clip(pixels + rng.integers(-6, 7, pixels.shape), 0, 255).astype(np.uint8))


def size_of(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as image:
        return f"{image.width}x{image.height}"


def place_code(repo: Path, revision: str) -> None:
    """The preprocessing code of `revision` in place of this code's, where `repo build` put it."""
    for rel, source in PREPROCESS_CODE.items():
        text = subprocess.run(["git", "show", f"{revision}:{source.relative_to(ROOT)}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        (repo / "preprocess" / VERSION / rel).write_text(text)


def measure(repo: Path, image: Path) -> dict:
    """A fresh server, one request with `image` through onnx_classifier; the preprocess stub's peak memory."""
    with embedded_server(repo) as server:
        stub = stub_pid(server.pid, "preprocess_0_0")
        loaded = status(stub)
        connection = Connection(server.grpc_url, timeout=600)
        info = connection.model_for("onnx_model", "server")
        start = time.perf_counter()
        try:
            logits = connection.infer(info, np.array([[read_image_file(image)]], dtype=np.object_))
            outcome = f"classified ({logits.shape[1]} logits)"
        except RejectedImage as e:
            outcome = f"refused: {e.reason}"
        except TritonizeError as e:
            outcome = f"failed: {e}"
        seconds = time.perf_counter() - start
        after = status(stub)
        connection.close()
    return {"loaded_peak_mb": loaded["VmHWM"], "peak_mb": after["VmHWM"], "rss_mb": after["VmRSS"],
            "seconds": round(seconds, 3), "outcome": outcome}


def stub_pid(server_pid: int, instance: str) -> int:
    """The Python backend stub of a model instance: a child of tritonserver with the instance name in its arguments."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == server_pid \
                    and instance.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    raise RuntimeError(f"no stub for {instance} under tritonserver {server_pid}")


def status(pid: int) -> dict[str, float]:
    """VmHWM and VmRSS of a process, in MB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) / 1024
    return found


if __name__ == "__main__":
    main()
