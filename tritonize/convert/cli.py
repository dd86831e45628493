"""`tritonize convert trt`, `convert aoti` and `convert cpu`: options in, library calls out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.convert.options import BuilderName, ConvertOptions
from tritonize.errors import TritonizeError
from tritonize.manifest import Profile
from tritonize.options import (
    DEFAULT_ARTIFACTS,
    EXIT_WAITING_FOR_GPU,
    Artifacts,
    Batch,
    CalibCount,
    CalibImages,
    Duration,
    Force,
    LatencyProfile,
    LoadGenerator,
    LoadGeneratorOption,
    MaxBatch,
    MinBatch,
    OptBatch,
    PrecisionOption,
    Threads,
    TritonRelease,
)
from tritonize.stage import StageStatus

app = typer.Typer(no_args_is_help=True)

DEFAULTS = ConvertOptions()  # the one statement of the defaults (ConvertOptions.to_argv relies on it)


@app.command("trt")
def trt_command(
    min_batch: MinBatch = Profile.min,
    opt_batch: OptBatch = Profile.opt,
    max_batch: MaxBatch = Profile.max,
    latency: LatencyProfile = None,
    precision: PrecisionOption = DEFAULTS.precision,
    builder: Annotated[BuilderName, typer.Option(help="Who builds the engine; auto = the first of container, trtexec, "
                                                      "tensorrt, torch-tensorrt that can run here (the next one when "
                                                      "it fails).")] = DEFAULTS.builder,
    workspace: Annotated[float, typer.Option(help="Builder workspace memory in GiB.")] = DEFAULTS.settings.workspace_gib,
    timing_cache: Annotated[Optional[Path], typer.Option(help="Timing cache file, reused across builds; its name gets "
                                                              "the TensorRT version and the GPU's compute capability "
                                                              "(default: timing.cache in --artifacts).")] = None,
    opt_level: Annotated[int, typer.Option(help="TensorRT builder optimization level 0-5 (TensorRT 8.6+).")] = DEFAULTS.settings.opt_level,
    version_compatible: Annotated[bool, typer.Option("--version-compatible", help="Build a version-compatible "
                                                     "plan (runs on later TensorRT; TensorRT 8.6+).")] = False,
    hardware_compatibility: Annotated[str, typer.Option(help="none, or ampere+ to run on any Ampere-or-newer GPU "
                                                             "(TensorRT 8.6+).")] = DEFAULTS.settings.hardware_compatibility,
    triton_release: TritonRelease = None,
    calib_images: CalibImages = None,
    calib_count: CalibCount = DEFAULTS.calib_count,
    onnx: Annotated[Optional[Path], typer.Option(help="ONNX to convert (default: the export named in the manifest). "
                                                      "Into a directory without a manifest: an ONNX from elsewhere, "
                                                      "names and shape read from its graph.")] = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Prepare and verify the ONNX, write convert.sh and the "
                                                            "manifest entry, but build nothing.")] = False,
    force: Force = False,
) -> None:
    """Build a TensorRT plan with one batch profile (two with --latency-profile), precision prepared and verified on
    the CPU first.

    Where no TensorRT builder can run, everything the GPU box needs is written (convert.sh, the
    prepared ONNX, the manifest entry) and the command exits with code 3 naming the command to run
    there (0 with --dry-run).
    """
    from tritonize import api

    result = api.convert_trt(min_batch=min_batch, opt_batch=opt_batch, max_batch=max_batch, latency=latency,
                             precision=precision, builder=builder, workspace=workspace, timing_cache=timing_cache,
                             opt_level=opt_level, version_compatible=version_compatible,
                             hardware_compatibility=hardware_compatibility, triton_release=triton_release,
                             calib_images=calib_images, calib_count=calib_count, onnx=onnx, artifacts=artifacts,
                             dry_run=dry_run, force=force)
    if result.status is StageStatus.waiting_for_gpu and not dry_run:
        raise TritonizeError(f"TensorRT cannot run on this machine; {result.detail}", exit_code=EXIT_WAITING_FOR_GPU)
    if result.status is StageStatus.waiting_for_gpu:
        typer.echo(result.detail)
    typer.echo(f"tensorrt: {result.status.value} ({artifacts / 'manifest.json'})")


@app.command("aoti")
def aoti_command(
    device: Annotated[str, typer.Option(
        "--device", help="What the package is compiled for: cpu, gpu (a GPU box's; on a machine without one the "
                         "manifest entry waits for it, exit 3, naming the command to run there), or auto: this "
                         "machine's GPU when torch sees one, else the CPU.")] = "auto",
    triton_release: TritonRelease = None,
    max_batch: MaxBatch = None,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    force: Force = False,
) -> None:
    """Compile the verified ExportedProgram (`export --format exported_program`) with AOTInductor into a PyTorch 2
    package for Triton's pytorch backend (aoti_model, platform torch_aoti), verified against PyTorch eager at batch 1,
    an odd batch and the max (default: the program's). Compiling takes minutes; the same program, torch, device,
    release and batch are up to date. --triton-release: the release that serves it (default: the newest tritonize
    knows; from 26.05, batched from 26.07)."""
    from tritonize.convert.aoti import AotiOptions, convert_aoti

    result = convert_aoti(artifacts, AotiOptions(device=device, triton_release=triton_release, max_batch=max_batch,
                                                 force=force))
    if result.status is StageStatus.waiting_for_gpu:
        raise TritonizeError(f"torch cannot compile a GPU package here; {result.detail}", exit_code=EXIT_WAITING_FOR_GPU)
    typer.echo(f"aoti: {result.status.value}, {result.detail} ({artifacts / 'manifest.json'})")


@app.command("releases")
def releases_command(
    installed: Annotated[bool, typer.Option("--installed", help="Print only the release whose TensorRT is the one "
                                                                "installed in this Python (exit code 1 when none is).")] = False,
    triton_release: TritonRelease = None,
) -> None:
    """The Triton releases whose TensorRT tritonize knows, each with the one pip install that builds plans for it
    (TensorRT's Python package of exactly that TensorRT, the torch-tensorrt built against it, its torch and
    torchvision) and the Pythons and machines it resolves on. With --triton-release, that release's line alone, and
    an error when this Python or machine is not among them."""
    from tritonize.releases import (
        host_tensorrt,
        install_problem,
        load_releases,
        pins_line,
        release_info,
        releases_for_tensorrt,
    )

    version = host_tensorrt()
    matching = releases_for_tensorrt(version) if version and len(version.split(".")) >= 3 else []
    if triton_release is not None:
        release = release_info(triton_release)
        problem = install_problem(release) if release.tensorrt_pip else None
        if problem:
            raise TritonizeError(f"{problem}: install that Python there, or build with --builder container")
        typer.echo(pins_line(release))
        return
    if installed:
        if matching:
            typer.echo(matching[-1].release)
            return
        raise TritonizeError(f"no release in tritonize's table runs this Python's TensorRT "
                             f"({version or 'not installed'}); install the pins of your target release:\n{pins_line()}")
    for release in load_releases():
        if release.tensorrt:
            mark = "  # <- this Python's TensorRT" if release in matching else ""
            typer.echo(pins_line(release) + mark)


@app.command("cpu")
def cpu_command(
    calib_images: CalibImages = None,
    calib_count: CalibCount = 32,
    batch: Batch = 4,
    gate_concurrency: Annotated[int, typer.Option("--gate-concurrency", min=1, help="Requests in flight in the speed gate.")] = 2,
    threads: Threads = None,
    duration: Duration = 5.0,
    rounds: Annotated[int, typer.Option(help="Rounds; FP32 and INT8 alternate which goes first.")] = 3,
    min_speedup: Annotated[float, typer.Option(help="Serve the variant only when its throughput is at least this "
                                                    "many times FP32's.")] = 1.1,
    min_top1: Annotated[float, typer.Option(help="Serve the variant only when its top-1 agrees with FP32 on at "
                                                 "least this fraction of the held-out images (pretrained weights; "
                                                 "random-init: reported, not gated).")] = 0.99,
    load_generator: LoadGeneratorOption = LoadGenerator.auto,
    artifacts: Artifacts = DEFAULT_ARTIFACTS,
    force: Force = False,
) -> None:
    """INT8 for onnxruntime on the CPU, served by `repo build` (as onnx_int8_model) only when it agrees with FP32
    on held-out real images and serves faster than FP32 through the embedded Triton server.

    Both gates are measured here (the speed gate runs the server for a minute or more, with one instance per model
    and --batch, --gate-concurrency, --threads; --duration per model and round) and recorded in the manifest;
    `repo build` reads the verdict.
    """
    from tritonize.convert.cpu import CpuOptions, convert_cpu

    options = CpuOptions(calib_images=calib_images, calib_count=calib_count, batch=batch, concurrency=gate_concurrency,
                         threads=threads, duration=duration, rounds=rounds, min_speedup=min_speedup, min_top1=min_top1,
                         engine=load_generator.value, force=force)
    result = convert_cpu(artifacts, options)
    typer.echo(f"convert cpu: {result.status.value} ({result.detail})")
