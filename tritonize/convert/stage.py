"""The convert stage: precision-prepared ONNX (verified on the CPU) -> reproducer -> TensorRT plan.

Reads only the artifacts directory and its manifest (or, for an ONNX from elsewhere given with
--onnx to a directory without one, the ONNX graph: see network.py). Writes, each published atomically:
  model_fp16.onnx / model_int8.onnx   manifest "onnx_fp16" / "onnx_int8"   (fp32 builds use model.onnx)
  convert.sh                          the by-hand build, trtexec or the Triton container
  model.plan, convert.log             only when TensorRT really built it
and the manifest entry "tensorrt" (status waiting_for_gpu | built | failed) that the repository
builder reads (`profile`, `status`, and the engine's own tensor names `input_name` / `output_name`).
"""

from __future__ import annotations

import shlex
import shutil
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from tritonize.convert import precision as prec
from tritonize.convert.builders import Builder, candidate_builders, container_argv, pick_builders
from tritonize.convert.network import Network, network_from_onnx
from tritonize.convert.options import SYNTHETIC, ConvertOptions, Precision
from tritonize.convert.plan_check import verify_plan
from tritonize.convert.reproducer import argv_by_major, write_reproducer
from tritonize.convert.trtexec import BuildJob, trtexec_argv
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, ensure_writable_dir, sha256_file
from tritonize.images import image_files, load_batch
from tritonize.machine import gpu_facts
from tritonize.manifest import (
    FileRef, Manifest, Plan, PlanOptions, PrecisionVariant, Status, Target, file_facts, manifest_path, now_iso, variant_key,
)
from tritonize.progress import say, step
from tritonize.releases import CROSS_MAJOR, Release, latest_release, release_info, tensorrt_loads
from tritonize.stage import StageResult, StageStatus
from tritonize.verify import Tolerance, VerificationReport, compare, verification_batches, verify_runner

PLAN_NAME = "model.plan"
TIMING_CACHE_NAME = "timing.cache"


@dataclass(frozen=True)
class VariantKind:
    """One precision variant of the FP32 ONNX: its manifest key (`onnx_<name>`), file and flavour."""

    name: str
    file: str
    precision: Precision
    for_cpu: bool = False  # INT8 laid out for onnxruntime's CPU kernels instead of for TensorRT


VARIANTS = {Precision.fp16: VariantKind("fp16", "model_fp16.onnx", Precision.fp16),
            Precision.int8: VariantKind("int8", "model_int8.onnx", Precision.int8)}
CPU_INT8 = VariantKind("int8_cpu", "model_int8_cpu.onnx", Precision.int8, for_cpu=True)
# FP16 keeps ~3 significant digits per value (unit roundoff 4.9e-4); over tens of layers the error
# measured relative to the logit scale stays near 1e-3 (resnet18: 3.5e-4 in onnxruntime, 6.8e-4 in
# true FP16). 1e-2 leaves room for deeper nets; a near-tie between two logits may still flip top-1.
FP16_TOLERANCE = Tolerance(max_rel_to_scale=1e-2, min_top1_agreement=0.9)
# INT8 steps are 1/127 of each tensor's calibrated range; errors of a few % of the logit scale are
# normal (resnet18 on held-out photos: 2.1 %). 10 % and 75 % top-1 agreement flag a broken
# calibration, not the last percent of accuracy, which needs a labelled validation set to judge.
INT8_TOLERANCE = Tolerance(max_rel_to_scale=0.10, min_top1_agreement=0.75)
TRUE_FP16_SAMPLES = 8  # the node-by-node check costs one session per node: a few images suffice
RANGE_SAMPLES = 16  # synthetic images for FP16 activation ranges when no images are given


@dataclass
class Data:
    """The inputs the CPU checks use, and where they came from."""

    calibration: np.ndarray
    held_out: np.ndarray
    described: str
    synthetic: bool
    notes: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    onnx_file: str
    fp32_layers: tuple[str, ...] = ()


def convert_trt(artifacts: Path, options: ConvertOptions) -> StageResult:
    """Prepare, verify and (where TensorRT can run) build; records the manifest's "tensorrt" entry.

    Returns `waiting_for_gpu` when no builder can run here (or on a dry run), after writing
    everything the GPU box needs; `up_to_date` when the recorded plan (or the recorded wait for a
    GPU) is for the same ONNX, profile, precision, target and settings, unless `options.force`.
    """
    out = ensure_writable_dir(Path(artifacts), "--artifacts")
    if options.onnx is None and not manifest_path(out).is_file():
        raise TritonizeError(f"no manifest at {manifest_path(out)}: run `tritonize export --artifacts {out}` first, "
                             "or give --onnx FILE to convert an ONNX from elsewhere")
    manifest = Manifest.load_or_empty(out)
    source = _source_onnx(manifest, options)
    network = Network.from_spec(manifest.model) if manifest.model else network_from_onnx(source)
    release = release_info(options.triton_release) if options.triton_release else latest_release()
    say(f"Converting {network.described} for Triton {release.release} ({release.image}): {options.precision.value}, "
        f"batch profile {options.profile.min}/{options.profile.opt}/{options.profile.max}")

    prepared = prepare_precision(manifest, network, source, options)
    job = BuildJob(
        onnx_file=prepared.onnx_file,
        plan_file=PLAN_NAME,
        input_name=network.input_name,
        output_name=network.output_name,
        input_shape=network.input_shape,
        profile=options.profile.to_dict(),
        precision=options.precision.value,
        workspace_mib=options.workspace_mib,
        timing_cache=_timing_cache(out, options),
        opt_level=options.opt_level,
        version_compatible=options.version_compatible,
        hardware_compatibility=options.hardware_compatibility,
        fp32_layers=prepared.fp32_layers,
    )
    argv_by_major(job)  # fail now, not on the GPU box, if a flag combination is impossible
    gpu_command = _gpu_command(out, options, release.release)
    header = [
        f"{network.described}; input {job.input_name} {'x'.join(map(str, job.input_shape))}, "
        f"batch min {job.profile['min']} / opt {job.profile['opt']} / max {job.profile['max']}",
        f"Precision {job.precision}: prepared in {job.onnx_file} (see manifest.json)",
        f"Serving release {release.release}: TensorRT {release.tensorrt or 'unknown to tritonize (check the NGC release notes)'}",
        f"Full build with verification and manifest entry: {gpu_command}",
    ]
    script = write_reproducer(out, job, release.image, header)
    if options.dry_run:  # no probing (the container builder's first probe pulls its image)
        builders, why = [], "--dry-run"
    else:
        candidates = candidate_builders(release, manifest.path(manifest.torchscript) if manifest.torchscript else None)
        builders, why = pick_builders(options.builder.value, candidates, job)
    waiting = f"on the GPU box run: {gpu_command}   (or by hand: bash {script})"

    entry = Plan(
        status=Status.waiting_for_gpu,
        precision=job.precision,
        profile=options.profile,
        input_name=job.input_name,
        output_name=job.output_name,
        onnx=FileRef(job.onnx_file, sha256_file(out / job.onnx_file)),
        target=Target(release.release, release.image, release.tensorrt),
        options=PlanOptions(
            workspace_mib=job.workspace_mib,
            timing_cache=job.timing_cache,
            opt_level=job.opt_level,
            version_compatible=job.version_compatible,
            hardware_compatibility=job.hardware_compatibility,
        ),
        reproducer=script.name,
        gpu_command=gpu_command,
        created=now_iso(),
        builder=builders[0].name if builders else options.builder.value,
        details={
            "builder_reason": why,
            "input_shape": list(job.input_shape),
            "fp32_layers": list(job.fp32_layers),
            "trtexec_argv": argv_by_major(job),
            **_target_commands(job, release, out),
        },
    )
    recorded = manifest.plan
    can_build = bool(builders)
    if not options.force and recorded is not None and _same_job(recorded, entry):
        if recorded.status is Status.built and _plan_file_intact(manifest, recorded):
            say(f"  = {PLAN_NAME} is up to date (same ONNX, profile, precision and target); --force rebuilds it")
            return StageResult("convert", StageStatus.up_to_date, _built_detail(recorded))
        if recorded.status is Status.waiting_for_gpu and not can_build:
            say(f"  = still waiting for a GPU box (same ONNX, profile, precision and target); {waiting}")
            return StageResult("convert", StageStatus.up_to_date, waiting)

    if not can_build:
        manifest.record("tensorrt", entry)
        say(f"  ✓ wrote {script} and {job.onnx_file}; manifest entry 'tensorrt' is waiting_for_gpu")
        if not options.dry_run:
            say(f"  ! no TensorRT builder can run here ({why})")
        say(waiting)
        return StageResult("convert", StageStatus.waiting_for_gpu, waiting)
    built = _build(manifest, network, source, job, builders, release, options, entry)
    return StageResult("convert", StageStatus.done, _built_detail(built))


def _target_commands(job: BuildJob, release: Release, out: Path) -> dict:
    """The target release's exact trtexec and container commands, when the table knows its TensorRT
    (else convert.sh reads the version from the image's trtexec banner at build time)."""
    if not release.tensorrt:
        return {"container_command": f"bash {out / 'convert.sh'} container  (flags from the image's trtexec banner)"}
    argv = trtexec_argv(job, release.tensorrt)
    return {"trtexec_argv_target": argv, "container_argv": container_argv(release.image, out, argv[1:])}


def _same_job(recorded: Plan, wanted: Plan) -> bool:
    """The recorded plan was (or is to be) built from the same inputs with the same settings."""
    return (recorded.onnx == wanted.onnx and recorded.profile == wanted.profile and recorded.precision == wanted.precision
            and recorded.target.triton_release == wanted.target.triton_release and recorded.options == wanted.options)


def _plan_file_intact(manifest: Manifest, plan: Plan) -> bool:
    path = manifest.directory / (plan.file or PLAN_NAME)
    return path.is_file() and path.stat().st_size == plan.size_bytes


def _built_detail(plan: Plan) -> str:
    return f"{plan.precision} plan, TensorRT {plan.tensorrt_version or '?'}"


# ------------------------------------------------------------------------------------ precision


def prepare_precision(manifest: Manifest, network: Network, source: Path, options: ConvertOptions,
                      kind: VariantKind | None = None) -> Prepared:
    """The ONNX with its precision in the graph, verified on the CPU: for the engine (`kind` None: the
    variant of `options.precision`), or `CPU_INT8` for onnxruntime on the CPU.

    A variant recorded for the same source ONNX and calibration inputs is reused (unless --force).
    """
    out = manifest.directory
    if options.precision is Precision.fp32:
        if source.parent.resolve() != out.resolve():  # builds read files relative to the artifacts dir
            with atomic_path(out / source.name) as tmp:
                shutil.copyfile(source, tmp)
        return Prepared(onnx_file=source.name)
    import onnx

    kind = kind or VARIANTS[options.precision]
    name = kind.file
    source_ref = FileRef(source.name, sha256_file(source))
    wanted_inputs = _inputs_fingerprint(options)
    recorded = manifest.variant(kind.name)
    if (not options.force and recorded is not None and recorded.source == source_ref
            and recorded.inputs == wanted_inputs and (out / name).is_file()
            and (out / name).stat().st_size == recorded.size_bytes):
        say(f"  = {name} is up to date (same source ONNX and calibration inputs); --force rebuilds it")
        return Prepared(onnx_file=name, fp32_layers=tuple(recorded.details.get("fp32_nodes", ())))

    data = cpu_data(network, options)
    for note in data.notes:
        say(f"  ! {note}")
    session = prec.ort_session(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxconverter-common and the quantizer warn per node
        with atomic_path(out / name) as tmp:
            if options.precision is Precision.fp16:
                fields, fp32_layers = _prepare_fp16(onnx.load(str(source)), source, tmp, network, session, data, options)
            else:
                fields, fp32_layers = _prepare_int8(source, tmp, network, session, data, options, kind.for_cpu), ()
            report: VerificationReport = fields.pop("verification")
            passed = report.passed and fields.get("true_fp16", {}).get("passed", True)
            if not passed and not data.synthetic:
                raise TritonizeError(
                    f"the {options.precision.value} variant failed CPU verification ({report.summary()}); "
                    f"{name} was not published: use --precision fp32 or check the images"
                )
    entry = PrecisionVariant(
        status=fields.pop("status"),
        precision=options.precision.value,
        **file_facts(out / name),
        input_name=network.input_name,
        output_name=network.output_name,
        verification=report,
        source=source_ref,
        inputs=wanted_inputs,
        created=now_iso(),
        details=fields,
    )
    manifest.record(variant_key(kind.name), entry)
    say(f"  ✓ published {out / name} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}")
    return Prepared(onnx_file=name, fp32_layers=tuple(fp32_layers))


def _inputs_fingerprint(options: ConvertOptions) -> dict:
    """What decides a precision variant besides its source ONNX: the calibration images and the checks' max batch."""
    images = options.calib_images
    if images is not None and not options.synthetic_calibration:
        images = str(Path(images).resolve())
    return {"calib_images": None if images is None else str(images), "calib_count": options.calib_count,
            "max_batch": options.profile.max}


def _prepare_fp16(model, source, tmp, network: Network, reference_session, data: Data, options):
    import onnx

    # The check inputs join the range data: a value that overflows on them would fail the checks.
    range_inputs = np.concatenate([data.calibration, network.synthetic(RANGE_SAMPLES // 4, seed=0)])
    with step(f"FP16 mixed precision (activation ranges from {len(range_inputs)} inputs)") as s_convert:
        mixed = prec.mixed_fp16(model, range_inputs, network.input_name, source_path=source)
        onnx.save_model(mixed.model, str(tmp))
    with step("verify FP16 in onnxruntime against FP32 (batches 1, odd, max)") as s_verify:
        report, held = _verify_variant(tmp, network, reference_session, data, options, FP16_TOLERANCE)
    sample = (data.held_out if len(data.held_out) else network.synthetic(TRUE_FP16_SAMPLES, seed=0))[:TRUE_FP16_SAMPLES]
    with step(f"true-FP16 check, node by node ({len(sample)} inputs)") as s_true:
        names = network.input_name, network.output_name
        reference = prec.run_onnx(reference_session, sample, *names)
        true_mixed = compare(reference, prec.run_true_fp16(mixed.model, sample, *names), FP16_TOLERANCE)
        naive = compare(reference, prec.run_true_fp16(prec.all_fp16(model), sample, *names), FP16_TOLERANCE)
    say(f"  · FP32 kept for {len(mixed.fp32_nodes)}/{mixed.nodes_total} nodes (peak FP32 activation {mixed.max_activation:.3g}); "
        f"true FP16: mixed rel err {true_mixed.rel_to_scale:.1e}, all-FP16 "
        f"{'finite' if naive.finite else 'NOT FINITE'} rel err {naive.rel_to_scale:.1e}")
    entry = {
        "format": "onnx",
        "status": Status.verified,
        "tool": mixed.tool,
        "fp32_nodes": mixed.fp32_nodes,
        "nodes_total": mixed.nodes_total,
        "data_max": prec.DATA_MAX,
        "max_fp32_activation": mixed.max_activation,
        "range_data": data.described,
        "verification": report,
        "held_out": held,
        "true_fp16": true_mixed.to_dict(),
        "all_fp16_true": naive.to_dict(),
        "notes": [
            "verification/held_out: onnxruntime CPU, which computes many FP16 ops in FP32 and hides overflow",
            "true_fp16: the same graph run node by node, every tensor stored in its declared type (as on a GPU)",
            "all_fp16_true: every node in FP16 (what a plain --fp16 build risks), for comparison only",
            *data.notes,
        ],
        "timings": {"convert": asdict(s_convert), "verify": asdict(s_verify), "true_fp16": asdict(s_true)},
    }
    return entry, mixed.fp32_nodes


def _prepare_int8(source, tmp, network: Network, reference_session, data: Data, options, for_cpu: bool):
    import onnx

    flavour = "for onnxruntime's CPU kernels" if for_cpu else "for TensorRT"
    with step(f"INT8 Q/DQ {flavour} with onnxruntime quantize_static ({len(data.calibration)} calibration inputs)") as s_quant:
        tool = prec.quantized_int8(source, tmp, data.calibration, network.input_name, tmp.parent, for_cpu)
    tol = _int8_tolerance(network)
    if not network.pretrained:
        data.notes.append("random-init weights: top-1 agreement reported, not gated")
    with step("verify INT8 in onnxruntime against FP32") as s_verify:
        report, held = _verify_variant(tmp, network, reference_session, data, options, tol)
    status = Status.verified
    if data.synthetic:
        status = Status.unverified_synthetic_calibration
        say("  !!! INT8 ACCURACY IS UNKNOWN: calibrated and checked on synthetic noise, not real images. "
            "Re-run with --calib-images DIR of real photos before serving this model.")
    return {
        "format": "onnx",
        "status": status,
        "tool": tool,
        "quantization": {
            "format": "QDQ", "per_channel": True, "weights": "int8 symmetric",
            "activations": "uint8 asymmetric" if for_cpu else "int8 symmetric",
            "calibration_method": "MinMax", "quantize_bias": for_cpu, **prec.qdq_facts(onnx.load(str(tmp))),
        },
        "calibration_data": data.described,
        "verification": report,
        "held_out": held,
        "notes": data.notes,
        "timings": {"quantize": asdict(s_quant), "verify": asdict(s_verify)},
    }


def _int8_tolerance(network: Network) -> Tolerance:
    if network.pretrained:
        return INT8_TOLERANCE
    # Random-init logits are near ties far below their scale: INT8 noise reorders them
    # (wide_resnet101_2: 3 % of scale, top-1 0 %) without saying anything about a trained model.
    return Tolerance(INT8_TOLERANCE.max_rel_to_scale, min_top1_agreement=0.0)


def _check_inputs(network: Network, held_out: np.ndarray, options: ConvertOptions) -> tuple[np.ndarray, str]:
    """What a variant or plan is checked on: INT8 on the held-out real images (its scales fit real
    images; noise lies outside the calibrated ranges), everything else on synthetic inputs."""
    if len(held_out) >= options.profile.min and options.precision is Precision.int8:
        return held_out, "held-out real images"
    return network.synthetic(options.profile.max, seed=0), "synthetic (normalized uniform noise)"


def _verify_variant(path, network: Network, reference_session, data: Data, options, tol):
    """Batch sizes 1/odd/max on the check inputs, plus all held-out real images."""
    session = prec.ort_session(path)
    names = network.input_name, network.output_name
    run = lambda x: session.run([network.output_name], {network.input_name: x})[0]  # noqa: E731
    inputs, described = _check_inputs(network, data.held_out, options)
    reference = prec.run_onnx(reference_session, inputs, *names)
    report = verify_runner(run, inputs, reference, tol, batches=verification_batches(len(inputs)), described=described)
    held = None
    if len(data.held_out):
        ref = prec.run_onnx(reference_session, data.held_out, *names)
        held = compare(ref, prec.run_onnx(session, data.held_out, *names), tol).to_dict()
    return report, held


def cpu_data(network: Network, options: ConvertOptions) -> Data:
    """Calibration inputs and held-out real images (never the same files)."""
    pre = network.preprocessing
    if options.calib_images is None or options.synthetic_calibration:
        count = options.calib_count if options.precision is Precision.int8 else RANGE_SAMPLES
        notes = [] if options.precision is Precision.fp16 else ["INT8 calibrated on synthetic noise: accuracy unknown"]
        if options.precision is Precision.fp16:
            notes.append("FP16 activation ranges measured on synthetic inputs; give --calib-images for real ones")
        return Data(network.synthetic(count, seed=1), np.zeros((0, *network.input_shape), np.float32),
                    f"{count} synthetic inputs (seed 1)", synthetic=True, notes=notes)
    if pre is None:
        raise TritonizeError("--calib-images needs the model's preprocessing, which an ONNX from elsewhere does not "
                             f"carry: use `--calib-images {SYNTHETIC}` (accuracy unknown) or export with tritonize")
    files = image_files(options.calib_images)
    n = len(files)
    hold = min(options.profile.max, n - options.calib_count) if n > options.calib_count else (max(1, n // 5) if n >= 2 else 0)
    calib_files, held_files = files[: n - hold][: options.calib_count], files[n - hold :]
    notes = []
    if n <= options.calib_count:
        notes.append(f"{n} images for --calib-count {options.calib_count}: {len(calib_files)} calibrate, {hold} held out")
    if not held_files:
        notes.append("only one image: no held-out image, checks use synthetic inputs")
    with step(f"decode {n} images from {options.calib_images}"):
        calibration, held_out = load_batch(calib_files, pre), load_batch(held_files, pre)
    described = f"{len(calib_files)} images from {options.calib_images} ({len(held_files)} more held out for checks)"
    return Data(calibration, held_out, described, synthetic=False, notes=notes)


# ------------------------------------------------------------------------------------ building


def _build(manifest: Manifest, network: Network, fp32_onnx: Path, job: BuildJob, builders: list[Builder],
           release: Release, options: ConvertOptions, entry: Plan) -> Plan:
    """Build with the first builder; with several (`auto`), fall through to the next when one fails.
    Each failure is recorded in the manifest as it happens: the entry never describes an older build."""
    held_out = cpu_data(network, options).held_out if options.precision is Precision.int8 else np.zeros(0)
    inputs, described = _check_inputs(network, held_out, options)
    check = PlanCheck(inputs, prec.run_onnx(prec.ort_session(fp32_onnx), inputs, network.input_name, network.output_name),
                      _plan_tolerance(job.precision, network), _plan_batches(options.profile, len(inputs)), described)
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


@dataclass(frozen=True)
class PlanCheck:
    """What a built plan is checked on, and against (onnxruntime on the FP32 ONNX)."""

    inputs: np.ndarray
    reference: np.ndarray
    tolerance: Tolerance
    batches: list[int]
    described: str


def _build_with(builder: Builder, manifest: Manifest, job: BuildJob, release: Release, options: ConvertOptions,
                entry: Plan, check: PlanCheck) -> Plan:
    out = manifest.directory
    (out / PLAN_NAME).unlink(missing_ok=True)  # a stale plan must not outlive a failed rebuild
    entry = replace(entry, builder=builder.name)
    try:
        version = builder.tensorrt_version()
        entry = replace(entry, tensorrt_version=version)
        _check_target(builder.name, version, release, job.version_compatible)
        with step(f"build the engine with {builder.name} (TensorRT {version})") as s_build:
            built = builder.build(job, out, options.build_timeout_s)
        # The engine's own tensor names are what the repository must serve (torch-tensorrt has its own).
        entry = replace(entry, input_name=built.engine_io[0], output_name=built.engine_io[1])
        with step(f"verify the plan against onnxruntime FP32 on {check.described} (batches {check.batches})") as s_verify:
            report = verify_plan(out / PLAN_NAME, built.engine_io, check.inputs, check.reference, check.tolerance,
                                 check.batches, check.described)
    except TritonizeError as e:
        (out / PLAN_NAME).unlink(missing_ok=True)
        manifest.record("tensorrt", replace(entry, status=Status.failed, error=str(e)))
        raise
    entry = replace(
        entry,
        **file_facts(out / PLAN_NAME),
        status=Status.built if report.passed else Status.failed,
        verification=report,
        created=now_iso(),
    ).with_details(
        log=built.log,
        gpu=gpu_facts(),
        timings={"build": asdict(s_build), "builder_seconds": built.seconds, "verify": asdict(s_verify)},
        **({"argv_used": built.argv} if built.argv else {}),
    )
    manifest.record("tensorrt", entry)
    if not report.passed:
        (out / PLAN_NAME).unlink(missing_ok=True)
        raise TritonizeError(f"the TensorRT plan failed verification ({report.summary()}); it was removed")
    say(f"  ✓ built {out / PLAN_NAME} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}")
    return entry


def _check_target(builder: str, version: str, release: Release, version_compatible: bool) -> None:
    """Refuse a build whose plan the target release's TensorRT would not load."""
    if not release.tensorrt:
        say(f"  ! tritonize does not know Triton {release.release}'s TensorRT; building with TensorRT {version} "
            "(--builder container matches the server by construction)")
        return
    if tensorrt_loads(version, release.tensorrt, version_compatible):
        return
    across = ", ".join(f"{a} -> {b}" for a, b in sorted(CROSS_MAJOR))
    raise TritonizeError(
        f"{builder} has TensorRT {version} but Triton {release.release} runs TensorRT {release.tensorrt}: the plan "
        f"would not deserialize there; use --builder container, or --version-compatible with a TensorRT of 8.6 or "
        f"newer and not newer than {release.tensorrt} (across majors only {across})"
    )


def _plan_batches(profile, available: int) -> list[int]:
    """The profile's min, an odd size and its max (capped at the inputs there are)."""
    top = min(profile.max, available)
    odd = next((b for b in range(profile.min + 1, top) if b % 2), profile.min)
    return sorted({profile.min, odd, top})


def _plan_tolerance(precision: str, network: Network) -> Tolerance:
    # TensorRT's FP32 kernels reorder sums (TF32 is off): a little looser than the export checks.
    return {"fp32": Tolerance(1e-3, 1.0), "fp16": FP16_TOLERANCE, "int8": _int8_tolerance(network)}[precision]


# ------------------------------------------------------------------------------------ helpers


def _source_onnx(manifest: Manifest, options: ConvertOptions) -> Path:
    if options.onnx is not None:
        path = Path(options.onnx)
        if not path.is_file():
            raise TritonizeError(f"--onnx {path} does not exist")
        return path
    out = manifest.directory
    if manifest.onnx is None:
        raise TritonizeError(f"{out}/manifest.json has no ONNX export: run `tritonize export --format onnx --artifacts {out}` "
                             "first, or give the ONNX with --onnx FILE")
    path = manifest.path(manifest.onnx)
    if not path.is_file():
        raise TritonizeError(f"the manifest names {path} but it is missing: re-run `tritonize export --artifacts {out}`")
    return path


def _timing_cache(out: Path, options: ConvertOptions) -> str:
    if options.timing_cache is None:
        return TIMING_CACHE_NAME
    path = Path(options.timing_cache).expanduser().resolve()
    try:
        return str(path.relative_to(out.resolve()))
    except ValueError:
        return str(path)  # reused across builds from wherever it lives


def _gpu_command(out: Path, options: ConvertOptions, release: str) -> str:
    p = options.profile
    parts = ["tritonize", "convert", "trt", "--artifacts", str(out), "--min", str(p.min), "--opt", str(p.opt),
             "--max", str(p.max), "--precision", options.precision.value, "--triton-release", release]
    if options.calib_images is not None:
        parts += ["--calib-images", SYNTHETIC if options.synthetic_calibration else str(options.calib_images),
                  "--calib-count", str(options.calib_count)]
    if options.builder.value != "auto":
        parts += ["--builder", options.builder.value]
    if options.workspace_gib != 4.0:
        parts += ["--workspace", f"{options.workspace_gib:g}"]
    if options.timing_cache is not None:
        parts += ["--timing-cache", str(options.timing_cache)]
    if options.opt_level != 3:
        parts += ["--opt-level", str(options.opt_level)]
    if options.version_compatible:
        parts.append("--version-compatible")
    if options.hardware_compatibility != "none":
        parts += ["--hardware-compatibility", options.hardware_compatibility]
    if options.onnx is not None:
        parts += ["--onnx", str(options.onnx)]
    return " ".join(shlex.quote(x) for x in parts)
