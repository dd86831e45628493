"""INT8 vs FP32 served on the CPU: both INT8 layouts, in-process and through the embedded server, one run.

    .venv/bin/python benchmarks/int8_served.py [--arch resnet18] [--batch 4] [--duration 5] [--rounds 3]

Makes the two INT8 variants of the FP32 export, calibrated on 8 photos cut from matplotlib's sample
photo (6 more held out): `convert trt --precision int8 --dry-run` (model_int8.onnx, TensorRT's Q/DQ
layout) and `convert cpu` (model_int8_cpu.onnx, onnxruntime's CPU layout, with its gates). Then:
(1) in-process onnxruntime throughput of FP32 and both variants, same batch and threads, interleaved
rounds; (2) served throughput of each variant vs FP32 through the embedded Triton (the speed gate's
own measurement: one instance, same threads, same batch and concurrency, rounds alternating), with
the load average. Writes results/int8_served_<arch>.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, artifacts, markdown_table, save

from tritonize.convert import ConvertOptions, Profile, convert_trt
from tritonize.convert.cpu import CpuOptions, convert_cpu, speed_figures_of
from tritonize.manifest import Manifest
from tritonize.tools import perf_analyzer


def photos(directory: Path) -> Path:
    """14 photos: crops and mirror images of matplotlib's sample photo (as the tests' photo_dir)."""
    import matplotlib.cbook as cbook
    from PIL import Image, ImageOps

    directory.mkdir(parents=True, exist_ok=True)
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = Image.open(f).convert("RGB")
    w, h = photo.size
    n = 0
    for left, top, size in [(0, 0, 1.0), (0, 0, 0.6), (0.4, 0, 0.6), (0, 0.4, 0.6), (0.4, 0.4, 0.6), (0.2, 0.2, 0.5), (0.1, 0.3, 0.7)]:
        crop = photo.crop((int(left * w), int(top * h), int((left + size) * w), int((top + size) * h)))
        for image in (crop, ImageOps.mirror(crop)):
            image.save(directory / f"photo_{n:02d}.jpg")
            n += 1
    return directory


def in_process(paths: dict[str, Path], batch: int, threads: int, seconds: float, rounds: int) -> dict:
    """img/s per variant in onnxruntime (one session each, `threads` intra-op threads), rounds interleaved."""
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    sessions = {}
    for name, path in paths.items():
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads, options.log_severity_level = threads, 1, 3
        sessions[name] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        sessions[name].run(None, {"input": x})
    rates = {name: [] for name in paths}
    for r in range(rounds):
        for name in (list(paths) if r % 2 == 0 else list(paths)[::-1]):
            n, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds or n < 2:
                sessions[name].run(None, {"input": x})
                n += 1
            rates[name].append(n * batch / elapsed)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = artifacts(args.arch)
    images = photos(RESULTS / "photos")
    load = {"before": os.getloadavg()}
    convert_trt(source, ConvertOptions(profile=Profile(1, 16, 32), precision="int8", calib_images=images, calib_count=8,
                                       dry_run=True))
    options = CpuOptions(calib_images=images, calib_count=8, batch=args.batch, concurrency=args.concurrency,
                         duration=args.duration, rounds=args.rounds, force=True)
    convert_cpu(source, options)
    manifest = Manifest.load(source)
    threads = len(os.sched_getaffinity(0))
    paths = {"fp32": manifest.path(manifest.onnx), "int8 TensorRT layout": manifest.path(manifest.variant("int8")),
             "int8 CPU layout": manifest.path(manifest.variant("int8_cpu"))}
    local = in_process(paths, args.batch, threads, args.duration, args.rounds)
    tool = perf_analyzer.find()
    engine = "perf_analyzer" if tool else "builtin"
    served = {"int8 CPU layout": manifest.variant("int8_cpu").cpu_serving.speed.figures,
              "int8 TensorRT layout": speed_figures_of(manifest, manifest.variant("int8"), manifest.spec, options, threads,
                                                        engine, str(tool) if tool else "builtin")}
    load["after"] = os.getloadavg()
    gates = manifest.variant("int8_cpu").cpu_serving
    rows = []
    for name in paths:
        ratios = [v / f for v, f in zip(local[name], local["fp32"])]
        figures = served.get(name)
        rows.append([name, f"{statistics.median(local[name]):.1f}", f"{statistics.median(ratios):.2f}",
                     f"{statistics.median(figures['variant_infer_s']):.1f} vs {statistics.median(figures['fp32_infer_s']):.1f}"
                     if figures else "-", f"{figures['ratio']:.2f} ({' / '.join(f'{r:.2f}' for r in figures['ratios'])})"
                     if figures else "1"])
    save(f"int8_served_{args.arch}", {"arch": args.arch, "batch": args.batch, "concurrency": args.concurrency,
                                      "threads": threads, "rounds": args.rounds, "duration": args.duration,
                                      "in_process_img_s": local, "served": served, "gates": {
                                          "agreement": gates.agreement.reason, "speed": gates.speed.reason,
                                          "passed": gates.passed}, "engine": str(tool) if tool else "builtin",
                                      "load_average": load})
    print(f"\n{args.arch}, batch {args.batch}, {threads} threads, {args.rounds} rounds x {args.duration:g} s; served at "
          f"concurrency {args.concurrency}, measured by {tool or 'builtin'}; load average {load['before'][0]:.2f} "
          f"before, {load['after'][0]:.2f} after\n")
    print(markdown_table(["model", "in-process img/s (median)", "in-process / FP32", "served img/s variant vs FP32",
                          "served / FP32 (median, per round)"], rows))
    print(f"\ngates: agreement: {gates.agreement.reason}; speed: {gates.speed.reason}")


if __name__ == "__main__":
    main()
