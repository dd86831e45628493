"""Peak memory of the server's `preprocess` model per image, for this code and an earlier one, in one run.

    .venv/bin/python benchmarks/preprocess_memory.py [--arch resnet18] [--baseline 7c97878] [--only NAME,...]
    .venv/bin/python benchmarks/preprocess_memory.py --modes

One repository (`onnx_model` and its ensembles) is built twice: with this tritonize's preprocessing code,
and with the code of the git revision `--baseline` put in its place (the preprocess model's `model.py` and
the modules beside it, as `repo build` places them). For each image and each code, a fresh embedded Triton
serves the repository, one request carries the encoded file to `onnx_classifier` (server-side
preprocessing), and the preprocess stub's peak resident memory is read from /proc/<pid>/status (VmHWM)
after it loaded and after the request. The images: the sample photo, a noisy 4032x3024 JPEG (an accepted
large photo), and small files that cost memory without being photos: thin (1x12000 PNG, 786 Mpx once
its shorter side is resized to 256), tall (20x20000 PNG, 66 Mpx resized), huge (a flat 9000x9000 PNG:
81 Mpx, under Pillow's 89.5 Mpx limit, 99 KB), claimed huge (a PNG header of 30000x30000, above twice
Pillow's limit, with no pixels), a flat 4096x4096 PNG; and 16-bit PNGs of one flat grey: 4096x4096
(33 KB), 7000x6800 (just within images.SERVER_MEMORY), 9000x9000 gray and RGB padded to 5.5 MB with an
ancillary chunk (at most 16 pixels per byte sent, the rule before), and a 64x64 one padded to 60 and to
100 MB (what the request's own bytes cost). Writes
results/preprocess_memory_<arch>.json and prints a markdown table.

`--modes` holds `images.decoding_cost` against what decoding really holds: for each mode and format a
6000x4000 picture (24 Mpx) is decoded and preprocessed in a fresh process (`decode_rgb` and the contract's
resize and crop), its peak resident memory over what it held before (VmHWM after a reset), next to the cost.
Writes results/preprocess_memory_modes.json.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save

from tritonize.client.connection import Connection, RejectedImage
from tritonize.errors import TritonizeError
from tritonize.images import read_image_file
from tritonize.repository_builder import RepoOptions, build_repository
from tritonize.repository_builder.builder import PREPROCESS_CODE, VERSION
from tritonize.serve.embedded import embedded_server

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--baseline", default="7c97878", help="git revision whose preprocessing code is compared")
    parser.add_argument("--only", help="measure only these images, comma-separated (names as in the table)")
    parser.add_argument("--modes", action="store_true", help="decoding_cost against measured peaks, per mode and format")
    args = parser.parse_args()
    if args.modes:
        return measure_modes(RESULTS / "work-modes")
    work = RESULTS / f"work-{args.arch}" / "preprocess_memory"
    images = make_images(work / "images")
    if args.only:
        images = {name: path for name, path in images.items() if name in args.only.split(",")}
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
    for name, file, make in (
        ("claimed huge", "claimed_30000x30000.png", lambda: flat_png(30000, 30000, 1, rows=0)),
        ("16-bit 4096x4096", "gray16_4096x4096.png", lambda: flat_png(4096, 4096, 1)),
        ("16-bit 7000x6800", "gray16_7000x6800.png", lambda: flat_png(7000, 6800, 1)),
        ("16-bit 9000x9000 padded", "gray16_9000x9000_padded.png", lambda: flat_png(9000, 9000, 1, pad=5_300_000)),
        ("16-bit RGB 9000x9000 padded", "rgb48_9000x9000_padded.png", lambda: flat_png(9000, 9000, 3, pad=5_300_000)),
        ("64x64 padded to 60 MB", "gray16_64x64_60MB.png", lambda: flat_png(64, 64, 1, pad=60_000_000)),
        ("64x64 padded to 100 MB", "gray16_64x64_100MB.png", lambda: flat_png(64, 64, 1, pad=100_000_000)),
    ):
        path = folder / file
        if not path.is_file():
            path.write_bytes(make())
        made[name] = path
    return made


def flat_png(width: int, height: int, channels: int, pad: int = 0, rows: int | None = None) -> bytes:
    """A 16-bit PNG of one mid-grey (gray or RGB), `pad` bytes of an ancillary chunk (`juNk`, which decoders skip)
    before its pixels; `rows` of pixels only (0: a header that claims the size, and nothing)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\0" + b"\x80\x00" * (width * channels)
    encoder = zlib.compressobj(9)
    data = b"".join(encoder.compress(row) for _ in range(height if rows is None else rows)) + encoder.flush()
    header = struct.pack(">IIBBBBB", width, height, 16, {1: 0, 3: 2}[channels], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + (chunk(b"juNk", b"\0" * pad) if pad else b"")
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def _noisy_photo(photo: Path, size: tuple[int, int], rng) -> "object":
    from PIL import Image

    pixels = np.asarray(Image.open(photo).convert("RGB").resize(size, Image.BICUBIC), np.int16)
    return Image.fromarray(np.clip(pixels + rng.integers(-6, 7, pixels.shape), 0, 255).astype(np.uint8))


def size_of(path: Path) -> str:
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None  # only the header is read
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



MODES = (  # name, mode, format, save options; the picture's EXIF orientation 6 where the name says "turned"
    ("JPEG RGB", "RGB", "JPEG", {"quality": 90}), ("JPEG RGB turned", "RGB", "JPEG", {"quality": 90}),
    ("JPEG RGB progressive 4:2:0", "RGB", "JPEG", {"quality": 90, "progressive": True}),
    ("JPEG RGB progressive 4:4:4", "RGB", "JPEG", {"quality": 90, "progressive": True, "subsampling": 0}),
    ("JPEG CMYK progressive", "CMYK", "JPEG", {"quality": 90, "progressive": True}), ("JPEG L", "L", "JPEG", {}),
    ("PNG RGB", "RGB", "PNG", {"compress_level": 1}), ("PNG RGBA", "RGBA", "PNG", {"compress_level": 1}),
    ("PNG L", "L", "PNG", {"compress_level": 1}), ("PNG P", "P", "PNG", {"compress_level": 1}),
    ("PNG I;16", "I;16", "PNG", {"compress_level": 1}), ("PNG I;16 turned", "I;16", "PNG", {"compress_level": 1}),
    ("TIFF RGB", "RGB", "TIFF", {}), ("TIFF RGB deflate, one strip", "RGB", "TIFF", {"compression": "tiff_adobe_deflate"}),
    ("TIFF YCbCr deflate, one strip", "YCbCr", "TIFF", {"compression": "tiff_adobe_deflate"}),
    ("TIFF I;16 deflate", "I;16", "TIFF", {"compression": "tiff_adobe_deflate"}), ("TIFF I", "I", "TIFF", {}),
    ("TIFF F", "F", "TIFF", {}), ("WebP RGB", "RGB", "WEBP", {"quality": 80}),
    ("WebP RGB lossless", "RGB", "WEBP", {"lossless": True, "method": 0}), ("BMP RGB", "RGB", "BMP", {}),
    ("GIF P", "P", "GIF", {}), ("PPM RGB", "RGB", "PPM", {}),
)
MODE_CHILD = r'''
import json, sys
from pathlib import Path
from PIL import Image
from tritonize.images import decode_rgb, decoding_cost, _orientation, _pillow_pixel_limit
from tritonize.preprocessing import Preprocessing

contract = Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
data = Path(sys.argv[1]).read_bytes()
def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))
with _pillow_pixel_limit(10**9):
    image = Image.open(__import__("io").BytesIO(data))
    mode, fmt = image.mode, image.format
    image.load()
    cost = decoding_cost(Image.open(__import__("io").BytesIO(data)), contract, len(data), _orientation(image) != 1)
del image
open("/proc/self/clear_refs", "w").write("5")
idle = status("VmRSS")
contract(decode_rgb(data, "x", max_pixels=10**9, preprocess=contract))
print(json.dumps({"mode": mode, "format": fmt, "cost": cost, "held": status("VmHWM") - idle, "bytes": len(data)}))
'''


def measure_modes(folder: Path) -> None:
    """decoding_cost against the peak a fresh process holds to decode and preprocess each mode and format."""
    import numpy as np
    from PIL import Image, TiffImagePlugin

    folder.mkdir(parents=True, exist_ok=True)
    width, height = 6000, 4000
    yy, xx = np.mgrid[0:height, 0:width]
    picture = Image.fromarray(np.stack([(xx // 7) % 256, (yy // 5) % 256, ((xx + yy) // 11) % 256], -1).astype(np.uint8))
    turned = Image.Exif()
    turned[0x0112] = 6
    TiffImagePlugin.STRIP_SIZE = 2**31  # Pillow writes TIFF strips of 64 KB; other software one strip
    rows, runs = [], {}
    for name, mode, fmt, options in MODES:
        path = folder / f"{name.replace(' ', '_').replace(',', '').replace(':', '').replace(';', '')}.{fmt.lower()}"
        if not path.is_file():
            if mode in ("I;16", "I", "F"):
                image = Image.fromarray((np.asarray(picture.convert("L")).astype(np.int64) * 257).astype(
                    {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]))
            else:
                image = picture.convert(mode)
            image.save(path, fmt, **options, **({"exif": turned.tobytes()} if "turned" in name else {}))
        child = subprocess.run([sys.executable, "-c", MODE_CHILD, str(path)], capture_output=True, text=True, check=True)
        runs[name] = run = json.loads(child.stdout)
        rows.append([name, run["mode"], f"{run['bytes'] / 1e6:.1f} MB", f"{run['held'] / 1e6:.0f} MB",
                     f"{run['held'] / (width * height):.2f}", f"{run['cost'] / 1e6:.0f} MB", f"{run['held'] / run['cost']:.2f}"])
        print(" | ".join(rows[-1]), flush=True)
    out = save("preprocess_memory_modes", {"size": f"{width}x{height}", "runs": runs})
    print()
    print(markdown_table(["file", "mode", "file size", "held (peak over idle)", "bytes a pixel", "decoding_cost",
                          "held / cost"], rows))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
