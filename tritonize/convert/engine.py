"""Engine build and check: each builder in turn (with `auto`, the next when one fails), the plan checked
where its own TensorRT is, and every outcome recorded in the manifest's "tensorrt" entry as it happens.

A failure of any kind, inside tritonize, Polygraphy, torch-tensorrt or the OS, is a recorded failure:
the plan is removed, the entry says why, and the next builder tries (N6 of issue 24).
"""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from tritonize.convert import precision as prec
from tritonize.convert.builders import Builder, Built
from tritonize.convert.layers import from_engine_information
from tritonize.convert.network import Network
from tritonize.convert.options import ConvertOptions, Precision
from tritonize.convert.plan_check import PlanCheck, last_line
from tritonize.convert.prepare import (
    FP16_TOLERANCE,
    INT8_TOLERANCE,
    TENSORRT_8_OPSET,
    check_inputs,
    cpu_data,
    onnx_opset,
    random_init_tolerance,
)
from tritonize.convert.trtexec import BuildJob
from tritonize.errors import TritonizeError
from tritonize.facts import file_facts, now_iso
from tritonize.machine import gpu_facts
from tritonize.manifest import Manifest, Plan, Profile, Status
from tritonize.progress import say, step
from tritonize.releases import CROSS_MAJOR, Release, pins_line, releases_for_tensorrt, tensorrt_loads, version_parts
from tritonize.verify import Tolerance

PLAN_NAME = "model.plan"


def plan_check(network: Network, fp32_onnx: Path, options: ConvertOptions) -> PlanCheck:
    """What a built plan is checked on (INT8: the held-out real images, up to the largest profile max) and
    against (onnxruntime on the FP32 ONNX), with which batches (profile 0's: `profile_check` for another) and tolerance."""
    held_out = cpu_data(network, options).held_out if options.precision is Precision.int8 else np.zeros(0)
    top = max(p.max for p in (options.profile, options.latency) if p is not None)
    widest = replace(options, profile=Profile(options.profile.min, options.profile.opt, top))
    inputs, described = check_inputs(network, held_out, widest)
    reference = prec.run_onnx(prec.ort_session(fp32_onnx), inputs, network.input_name, network.output_name)
    return PlanCheck(inputs, reference, plan_tolerance(options.precision.value, network),
                     plan_batches(options.profile, len(inputs)), described)


def profile_check(check: PlanCheck, profile: Profile) -> PlanCheck:
    """The same check at batch sizes inside `profile` (an engine refuses shapes outside its selected profile)."""
    return replace(check, batches=plan_batches(profile, len(check.inputs)))


def plan_batches(profile, available: int) -> list[int]:
    """The profile's min, an odd size and its max (capped at the inputs there are)."""
    top = min(profile.max, available)
    odd = next((b for b in range(profile.min + 1, top) if b % 2), profile.min)
    return sorted({profile.min, odd, top})


def plan_tolerance(precision: str, network: Network) -> Tolerance:
    """TensorRT's FP32 kernels reorder sums (TF32 is off for FP32): a little looser than the export checks.
    FP16 and INT8 as on the CPU, with the same random-init rule (top-1 reported, not gated)."""
    if precision == "fp32":
        return Tolerance(1e-3, 1.0)
    return random_init_tolerance({"fp16": FP16_TOLERANCE, "int8": INT8_TOLERANCE}[precision], network)


def build_engine(manifest: Manifest, job: BuildJob, builders: list[Builder], release: Release,
                 options: ConvertOptions, entry: Plan, check: PlanCheck) -> Plan:
    """Build with the first builder; with several (`auto`), fall through to the next when one fails."""
    failures = []
    for builder in builders:
        try:
            return _build_with(builder, manifest, job, release, options, entry, check)
        except TritonizeError as e:
            if len(builders) == 1:
                raise
            failures.append(f"{builder.name}: {e}")
            if builder is not builders[-1]:
                say(f"  ! {builder.name} failed ({e}); trying the next builder")
    raise TritonizeError("every builder failed: " + "; ".join(failures))


def _build_with(builder: Builder, manifest: Manifest, job: BuildJob, release: Release, options: ConvertOptions,
                entry: Plan, check: PlanCheck) -> Plan:
    out = manifest.directory
    (out / PLAN_NAME).unlink(missing_ok=True)  # a stale plan must not outlive a failed rebuild
    entry = replace(entry, builder=builder.name)
    try:
        version = builder.tensorrt_version()
        entry = replace(entry, tensorrt_version=version)
        check_target(builder.name, version, release, job.settings.version_compatible, named=options.triton_release is not None)
        check_opset(builder.name, version, out / job.onnx_file)
        gpu = gpu_facts()
        cache = timing_cache_file(job.settings.timing_cache, version, gpu.get("compute_capability"))
        job = replace(job, settings=replace(job.settings, timing_cache=cache))
        with step(f"build the engine with {builder.name} (TensorRT {version})") as s_build:
            built: Built = builder.build(job, out, options.build_timeout_s)
        # The engine's own tensor names are what the repository must serve (torch-tensorrt has its own).
        entry = replace(entry, input_name=built.engine_io[0], output_name=built.engine_io[1])
        layers = from_engine_information(built.layer_info, built.layer_source) if built.layer_info else None
        entry = replace(entry, layers=layers)
        say(f"  layer precisions: {layers.summary()}" if layers else
            f"  ! layer precisions unknown: {builder.name} did not give the engine's detailed layer information")
        if layers and layers.fp32_layers and options.precision is not Precision.fp32:
            say(f"    FP32 layers: {', '.join(layers.fp32_layers)}{' ...' if layers.counts['FP32'] > len(layers.fp32_layers) else ''}")
        reports, s_verify = [], []
        for index, profile in enumerate(entry.profiles):  # each profile, at batch sizes inside it
            checked = profile_check(check, profile) if index else check
            in_profile = f" in profile {index} ({profile.min}/{profile.opt}/{profile.max})" if options.latency else ""
            with step(f"verify the plan{in_profile} against onnxruntime FP32 on {checked.described} (batches "
                      f"{checked.batches}), {builder.checked_where}") as timing:
                s_verify.append(timing)
                reports.append(builder.verify(out / PLAN_NAME, built.engine_io, checked, job, version,
                                              options.build_timeout_s, profile=index))
        report, latency_report = reports[0], (reports[1] if len(reports) > 1 else None)
    except Exception as e:  # noqa: BLE001 - whatever failed (tritonize, Polygraphy, torch-tensorrt, the OS) is recorded
        (out / PLAN_NAME).unlink(missing_ok=True)
        error = str(e) if isinstance(e, TritonizeError) else f"{builder.name} failed: {type(e).__name__}: {last_line(e)}"
        manifest.record("tensorrt", replace(entry, status=Status.failed, error=error))
        raise TritonizeError(error) from None
    entry = replace(
        entry,
        **file_facts(out / PLAN_NAME),
        status=Status.built if all(r.passed for r in reports) else Status.failed,
        verification=report,
        latency_verification=latency_report,
        created=now_iso(),
    ).with_details(
        log=built.log,
        gpu=gpu,
        tf32=job.tf32,
        timing_cache_file=job.settings.timing_cache,
        timings={"build": asdict(s_build), "builder_seconds": built.seconds, "verify": asdict(s_verify[0]),
                 **({"verify_latency": asdict(s_verify[1])} if len(s_verify) > 1 else {})},
        **({"argv_used": built.argv} if built.argv else {}),
        **built.details,
    )
    manifest.record("tensorrt", entry)
    for index, r in enumerate(reports):
        if not r.passed:
            (out / PLAN_NAME).unlink(missing_ok=True)
            where = f" in profile {index}" if len(reports) > 1 else ""
            raise TritonizeError(f"the TensorRT plan failed verification{where} ({r.summary()}); it was removed")
    say(f"  ✓ built {out / PLAN_NAME} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}"
        + (f"; latency profile: {latency_report.summary()}" if latency_report else ""))
    return entry


def check_target(builder: str, version: str, release: Release, version_compatible: bool, named: bool = True) -> None:
    """Refuse a build whose plan the target release's TensorRT would not load; name the pip pins of the
    releases it would load in (or of the target's) when this TensorRT matches none. For a release whose TensorRT
    the table does not know, only the container (the server's own TensorRT) builds unless the user `named` it (N37)."""
    if not release.tensorrt and not named and builder != "container":
        raise TritonizeError(
            f"{builder}: tritonize does not know Triton {release.release}'s TensorRT, so a plan built with TensorRT "
            f"{version} may not load there; name that release (--triton-release {release.release}) to build for it all "
            "the same, or use --builder container (it builds with the server's own TensorRT)")
    if not release.tensorrt:
        say(f"  ! tritonize does not know Triton {release.release}'s TensorRT; building with TensorRT {version} "
            "(--builder container matches the server by construction)")
        if not releases_for_tensorrt(version, version_compatible):
            say(f"  ! no release in tritonize's table runs TensorRT {version}; the pins of the releases it knows:")
            say(pins_line())
        return
    if tensorrt_loads(version, release.tensorrt, version_compatible):
        return
    across = ", ".join(f"{a} -> {b}" for a, b in sorted(CROSS_MAJOR))
    raise TritonizeError(
        f"{builder} has TensorRT {version} but Triton {release.release} runs TensorRT {release.tensorrt}: the plan "
        f"would not deserialize there; use --builder container, or a TensorRT that matches ({pins_line(release)}), "
        f"or --version-compatible with a TensorRT of 8.6 or newer and not newer than {release.tensorrt} "
        f"(across majors only {across})"
    )


def check_opset(builder: str, version: str, onnx_file: Path) -> None:
    """Refuse to let a TensorRT 8.x parser read an ONNX newer than it knows: it would not refuse, it would
    misread it (prepare.TENSORRT_8_OPSET). The stage converts the ONNX for every TensorRT 8 it knows of (the target's,
    the probed builders'), so this guards a builder whose TensorRT changed since it was probed."""
    if version_parts(version)[:1] != (8,):
        return
    opset = onnx_opset(onnx_file)
    if opset > TENSORRT_8_OPSET:
        raise TritonizeError(
            f"{builder} has TensorRT {version}, whose ONNX parser reads opsets up to {TENSORRT_8_OPSET} and misreads "
            f"{onnx_file.name} (opset {opset}); run `tritonize convert trt` again: it converts the ONNX to opset "
            f"{TENSORRT_8_OPSET} for the TensorRT 8 it finds")


def timing_cache_file(base: str, version: str, compute_capability: str | None) -> str:
    """The timing cache of one TensorRT version and one GPU: `base` with both in its name (a cache is tied
    to the TensorRT that wrote it and to the GPU's properties: NvInfer.h ITimingCache::combine,
    IBuilderConfig::setTimingCache)."""
    path = Path(base)
    gpu = f"-sm{compute_capability.replace('.', '')}" if compute_capability and re.fullmatch(r"\d+\.\d+", compute_capability) else ""
    return str(path.with_name(f"{path.stem}-trt{version}{gpu}{path.suffix}"))
