"""Precision preparation: the ONNX a TensorRT engine (or onnxruntime on the CPU) is built from, with its
precision in the graph and verified on the CPU against the FP32 export before any GPU is involved.

Used by the TensorRT stage (stage.py) and by `convert cpu` (cpu.py). Writes, each published atomically
with its manifest entry (see manifest.py):
  model_opset17.onnx   "onnx_opset17"   the FP32 export in the opset TensorRT 8.x's parser reads
  model_fp16.onnx      "onnx_fp16"      FP16 mixed precision (FP32 kept where FP16 would overflow)
  model_int8.onnx      "onnx_int8"      INT8 Q/DQ for TensorRT
  model_int8_cpu.onnx  "onnx_int8_cpu"  INT8 laid out for onnxruntime's CPU kernels
"""

from __future__ import annotations

import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tritonize.convert import precision as prec
from tritonize.convert.network import Network
from tritonize.convert.options import SYNTHETIC, ConvertOptions, Precision
from tritonize.errors import TritonizeError
from tritonize.facts import file_facts, now_iso
from tritonize.files import atomic_path, sha256_file
from tritonize.images import image_files, load_batch
from tritonize.manifest import FileRef, Manifest, PrecisionVariant, Status, variant_key
from tritonize.progress import say, step
from tritonize.releases import Release, tensorrt_major_floor, version_parts
from tritonize.verify import FP32, Tolerance, VerificationReport, compare, verification_batches, verify_runner


@dataclass(frozen=True)
class VariantKind:
    """One variant of the FP32 ONNX: its manifest key (`onnx_<name>`), file and flavour."""

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
# TensorRT 8.6's ONNX parser reads opsets up to 17 (onnx/onnx-tensorrt docs/operators.md, 8.6-GA), and its
# Reduce* importers read only their first input (builtin_op_importers.cpp, 8.6-GA): opset 18's `axes`
# input is ignored and they reduce over every axis, which gives wrong logits for a global average pool.
TENSORRT_8_OPSET = 17


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


def opset_for_tensorrt(version: str | None) -> int | None:
    """The ONNX opset to convert to for a target TensorRT (None: the export's opset is read as it is)."""
    return TENSORRT_8_OPSET if version and version_parts(version)[:1] == (8,) else None


def opset_for_release(release: Release) -> int | None:
    """The ONNX opset to convert to for `release`: its TensorRT's, and where the table does not know that, opset 17
    when the release may ship TensorRT 8 (23.10-24.01, 24.05-24.07: no earlier release in the table has a newer
    major), which TensorRT 8 and 10 read alike (N27: convert.sh's TensorRT 8 branch on the CPU box)."""
    if release.tensorrt:
        return opset_for_tensorrt(release.tensorrt)
    floor = tensorrt_major_floor(release)
    return TENSORRT_8_OPSET if floor is None or floor <= 8 else None


def onnx_opset(path: Path) -> int:
    """The default-domain opset of an ONNX file (its graph is not loaded)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


OPSET_VARIANT = VariantKind(f"opset{TENSORRT_8_OPSET}", f"model_opset{TENSORRT_8_OPSET}.onnx", Precision.fp32)


def prepare_opset(manifest: Manifest, network: Network, source: Path, opset: int, options: ConvertOptions) -> Path:
    """`source` in ONNX `opset` (when it is newer), verified against it in onnxruntime like the precision
    variants; reused when recorded for the same source (unless --force). Returns the ONNX to prepare from."""
    import onnx

    model = onnx.load(str(source))
    current = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if current <= opset:
        return source
    out, kind = manifest.directory, OPSET_VARIANT
    source_ref = FileRef(source.name, sha256_file(source))
    recorded = manifest.variant(kind.name)
    if (not options.force and recorded is not None and recorded.source == source_ref
            and manifest.file_problem(recorded) is None):
        say(f"  = {kind.file} is up to date (opset {opset} of the same source ONNX); --force rebuilds it")
        return out / kind.file
    reference_session = prec.ort_session(source)
    inputs = network.synthetic(options.profile.max, seed=0)
    with atomic_path(out / kind.file) as tmp:
        with step(f"convert the ONNX from opset {current} to {opset} (TensorRT 8.x's parser reads up to {opset})") as s_convert:
            onnx.save_model(prec.opset_converted(model, opset), str(tmp))
        with step(f"verify opset {opset} in onnxruntime against opset {current} (batches 1, odd, max)") as s_verify:
            session = prec.ort_session(tmp)
            names = network.input_name, network.output_name
            report = verify_runner(lambda x: prec.run_onnx(session, x, *names), inputs,
                                   prec.run_onnx(reference_session, inputs, *names), FP32,
                                   batches=verification_batches(len(inputs)), described="synthetic (normalized uniform noise)")
        if not report.passed:
            raise TritonizeError(f"the opset-{opset} conversion changed the outputs ({report.summary()}); "
                                 f"{kind.file} was not published: target a release with TensorRT 10 or newer")
    entry = PrecisionVariant(
        status=Status.verified, precision=Precision.fp32.value, **file_facts(out / kind.file),
        input_name=network.input_name, output_name=network.output_name, verification=report, source=source_ref,
        inputs={"max_batch": options.profile.max}, created=now_iso(),
        details={"opset": opset, "source_opset": current, "tool": f"onnx {onnx.__version__} version_converter",
                 "timings": {"convert": asdict(s_convert), "verify": asdict(s_verify)}},
    )
    manifest.record(variant_key(kind.name), entry)
    say(f"  ✓ published {out / kind.file} (opset {opset}) — {report.summary()}")
    return out / kind.file



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
        return Prepared(onnx_file=name, fp32_layers=recorded.fp32_nodes or ())

    data = cpu_data(network, options)
    for note in data.notes:
        say(f"  ! {note}")
    session = prec.ort_session(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxconverter-common and the quantizer warn per node
        with atomic_path(out / name) as tmp:
            if options.precision is Precision.fp16:
                fields = _prepare_fp16(onnx.load(str(source)), source, tmp, network, session, data, options)
            else:
                fields = _prepare_int8(source, tmp, network, session, data, options, kind.for_cpu)
            report: VerificationReport = fields.pop("verification")
            fp32_layers = fields.pop("fp32_nodes", None)
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
        fp32_nodes=fp32_layers,
        details=fields,
    )
    manifest.record(variant_key(kind.name), entry)
    say(f"  ✓ published {out / name} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}")
    return Prepared(onnx_file=name, fp32_layers=tuple(fp32_layers or ()))


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
    tolerance = random_init_tolerance(FP16_TOLERANCE, network)
    with step("verify FP16 in onnxruntime against FP32 (batches 1, odd, max)") as s_verify:
        report, held = _verify_variant(tmp, network, reference_session, data, options, tolerance)
    sample = (data.held_out if len(data.held_out) else network.synthetic(TRUE_FP16_SAMPLES, seed=0))[:TRUE_FP16_SAMPLES]
    with step(f"true-FP16 check, node by node ({len(sample)} inputs)") as s_true:
        names = network.input_name, network.output_name
        reference = prec.run_onnx(reference_session, sample, *names)
        true_mixed = compare(reference, prec.run_true_fp16(mixed.model, sample, *names), tolerance)
        naive = compare(reference, prec.run_true_fp16(prec.all_fp16(model), sample, *names), tolerance)
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
    return entry


def _prepare_int8(source, tmp, network: Network, reference_session, data: Data, options, for_cpu: bool):
    import onnx

    flavour = "for onnxruntime's CPU kernels" if for_cpu else "for TensorRT"
    with step(f"INT8 Q/DQ {flavour} with onnxruntime quantize_static ({len(data.calibration)} calibration inputs)") as s_quant:
        tool = prec.quantized_int8(source, tmp, data.calibration, network.input_name, tmp.parent, for_cpu)
    tol = random_init_tolerance(INT8_TOLERANCE, network)
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


def random_init_tolerance(tolerance: Tolerance, network: Network) -> Tolerance:
    """`tolerance` for a pretrained network; with random-init weights, top-1 agreement reported, not gated.

    Random-init logits are near ties far below their scale: reduced-precision noise reorders them
    (INT8 on wide_resnet101_2: 3 % of scale, top-1 0 %) without saying anything about a trained model.
    The same holds for every reduced precision (FP16 and INT8) and wherever it is checked (CPU or plan).
    """
    if network.pretrained:
        return tolerance
    return Tolerance(tolerance.max_rel_to_scale, min_top1_agreement=0.0)


def check_inputs(network: Network, held_out: np.ndarray, options: ConvertOptions) -> tuple[np.ndarray, str]:
    """What a variant or plan is checked on, `options.profile.max` of them: INT8 on the held-out real images
    (its scales fit real images; noise lies outside the calibrated ranges), repeated up to the profile's
    max batch when there are fewer, so the max batch runs too; everything else on synthetic inputs."""
    if len(held_out) >= options.profile.min and options.precision is Precision.int8:
        repeats = -(-options.profile.max // len(held_out))
        tiled = np.concatenate([held_out] * repeats)[: options.profile.max]
        described = "held-out real images" + (f" ({len(held_out)}, repeated to {len(tiled)})" if len(tiled) > len(held_out) else "")
        return tiled, described
    return network.synthetic(options.profile.max, seed=0), "synthetic (normalized uniform noise)"


def _verify_variant(path, network: Network, reference_session, data: Data, options, tol):
    """Batch sizes 1/odd/max on the check inputs, plus all held-out real images."""
    session = prec.ort_session(path)
    names = network.input_name, network.output_name
    run = lambda x: session.run([network.output_name], {network.input_name: x})[0]  # noqa: E731
    inputs, described = check_inputs(network, data.held_out, options)
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
