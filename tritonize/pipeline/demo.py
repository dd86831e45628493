"""`make demo`: the whole mission on this machine, the way a user would type it.

    python -m tritonize.pipeline.demo [--arch wide_resnet101_2] [--artifacts build] [--repository models]

1. `tritonize build`: export (TorchScript, ONNX), convert (TensorRT if it can run here, else the
   reproducer for the GPU box), repository, lint. Pretrained weights when they can be downloaded,
   otherwise random weights with a loud banner.
2. The embedded Triton (real tritonserver binary) serves the repository on free local ports.
3. `tritonize client classify` a real photo on every served backend (the JPEG itself goes to the
   server, which preprocesses it), `client compare` across the backends and across the preprocessing
   paths of one, and a short `client perf` sweep (CSV + PNG under <artifacts>/perf/).
4. The server stops; a summary says what ran, what did not and where the outputs are.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tritonize.access import ControlKey
from tritonize.errors import TritonizeError
from tritonize.manifest import Manifest, Status
from tritonize.model_repository import BACKENDS
from tritonize.serve.embedded import embedded_server
from tritonize.sources import resolve_spec

BANNER = "=" * 78


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the tritonize pipeline end to end on this machine.")
    parser.add_argument("--arch", default="wide_resnet101_2")
    parser.add_argument("--artifacts", type=Path, default=Path("build"))
    parser.add_argument("--repository", type=Path, default=Path("models"))
    args = parser.parse_args(argv)
    try:
        return _demo(args)
    except TritonizeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def _demo(args) -> int:
    started = time.perf_counter()
    weights = _choose_weights(args.arch)
    tritonize = [str(Path(sys.executable).with_name("tritonize"))]
    ran, not_ran = [], []

    _run(tritonize + ["build", "--arch", args.arch, "--weights", weights,
                      "--artifacts", str(args.artifacts), str(args.repository)])
    ran.append(f"build: export + convert (precision-prepared ONNX) + repository + lint ({args.arch}, weights {weights})")
    plan = Manifest.load(args.artifacts).plan
    if plan is None or plan.status is not Status.built:
        not_ran.append(f"TensorRT engine build: {plan.status.value if plan else 'not attempted'}; "
                       f"run {args.artifacts / 'convert.sh'} on a GPU box (needs TensorRT)")

    photo = _sample_images(args.artifacts / "demo_images")
    _section("Starting the embedded Triton server (real tritonserver 2.51 binary, Python-based backends)")
    with embedded_server(args.repository, control_key=ControlKey.generate()) as server:  # `client` finds the key itself
        ready = [name for name in BACKENDS if server.models.get(name, ("",))[0] == "READY"]  # the classifiers
        for name, (state, reason) in sorted(server.models.items()):
            print(f"  {name:22s} {state}{'  ' + reason if reason else ''}")
            if state != "READY":
                not_ran.append(f"serving {name}: {reason or state}")
        print(f"  gRPC {server.grpc_url}  HTTP {server.http_url}  metrics {server.metrics_url}")
        url = ["--url", server.grpc_url]
        for name in ready:
            _run(tritonize + ["client", "classify", str(photo[0]), "--model", name, "--top-k", "5"] + url)
        ran.append(f"client classify on {', '.join(ready)} (the JPEG sent as is, preprocessed by the server)")
        if len(ready) > 1:
            _run(tritonize + ["client", "compare", *map(str, photo), "--repeat", "2"] + url)
            ran.append("client compare across " + " vs ".join(ready))
        if ready:
            _run(tritonize + ["client", "compare", *map(str, photo), "--models", ready[0], "--preprocess-paths",
                              "client,server,uint8", "--repeat", "1", "--min-top1-agreement", "1"] + url)
            ran.append(f"client compare of {ready[0]} across the client, server and uint8 preprocessing paths")
        perf_dir = args.artifacts / "perf"
        _run(tritonize + ["client", "perf", "--models", ",".join(ready), "--concurrency", "1,2,4",
                          "--requests", "6", "--warmup-requests", "1", "--output-dir", str(perf_dir)] + url)
        ran.append(f"client perf sweep (concurrency 1,2,4) on {', '.join(ready)}")
    ran.append("server stopped (process group, stubs included)")

    _section(f"Summary ({time.perf_counter() - started:.0f} s)")
    if weights == "none":
        print("  ! RANDOM WEIGHTS: every number above is real, but the labels are meaningless.")
    print("  Ran:")
    for line in ran:
        print(f"    ✓ {line}")
    print("  Did not run here:")
    for line in not_ran or ["(nothing)"]:
        print(f"    ✗ {line}")
    print("  Outputs:")
    print(f"    artifacts + manifest   {args.artifacts}/ (model.pt, model.onnx, manifest.json, convert.sh)")
    print(f"    model repository       {args.repository}/ (serve it: tritonize serve {args.repository})")
    print(f"    perf CSV + plot        {args.artifacts / 'perf'}/")
    return 0


def _choose_weights(arch: str) -> str:
    """The arch's pretrained weights when they are cached or downloadable, else random init."""
    spec = resolve_spec(arch)
    if _weights_reachable(arch, spec.weights):
        return spec.weights
    print(BANNER)
    print(f"!! Pretrained weights for {arch} cannot be downloaded on this machine (offline).")
    print("!! The demo continues with RANDOM weights (--weights none): every artifact, check and")
    print("!! benchmark is real, but the predicted LABELS ARE MEANINGLESS.")
    print("!! On a machine with internet access, or with --weights PATH, real labels come out.")
    print(BANNER, flush=True)
    return "none"


def _weights_reachable(arch: str, name: str) -> bool:
    import urllib.request

    import torch
    import torchvision

    url = torchvision.models.get_model_weights(arch)[name].url
    if (Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name).is_file():
        return True
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
        return True
    except OSError:
        return False


def _sample_images(folder: Path) -> list[Path]:
    """matplotlib's Grace Hopper photo, plus a mirrored, a grayscale and a cropped variant."""
    from matplotlib import cbook
    from PIL import Image, ImageOps

    folder.mkdir(parents=True, exist_ok=True)
    photo = Image.open(cbook.get_sample_data("grace_hopper.jpg")).convert("RGB")
    variants = {
        "grace_hopper.jpg": photo,
        "grace_hopper_mirrored.jpg": ImageOps.mirror(photo),
        "grace_hopper_gray.png": photo.convert("L"),
        "grace_hopper_crop.jpg": photo.crop((100, 50, 420, 400)),
    }
    paths = []
    for name, image in variants.items():
        image.save(folder / name)
        paths.append(folder / name)
    return paths


def _section(title: str) -> None:
    print(f"\n{BANNER}\n{title}\n{BANNER}", flush=True)


def _run(cmd: list[str]) -> None:
    shown = ["tritonize", *cmd[1:]] if cmd[0].endswith("tritonize") else cmd
    _section("$ " + shlex.join(shown))
    if subprocess.run(cmd).returncode != 0:
        raise TritonizeError(f"`{shlex.join(shown)}` failed (see above)")


if __name__ == "__main__":
    sys.exit(main())
