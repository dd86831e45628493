"""`tritonize convert cpu`: a precision variant for onnxruntime on the CPU, behind two measured gates.

The variant (`model_int8_cpu.onnx`, manifest `onnx_int8_cpu`) is INT8 Q/DQ laid out for onnxruntime's
CPU kernels (see precision.quantized_int8), calibrated and verified like the TensorRT variants. It is
served (`repo build` adds `onnx_int8_model`) only when both gates passed, and both are recorded in the
manifest entry (`cpu_serving`) and, by `repo build`, in the model's config parameters:

- agreement: logits of the variant vs FP32 on the held-out real images (top-1, top-5, error relative
  to the logit scale). With random-init weights the figures are reported, not gated: their logits are
  near ties that INT8 noise reorders without saying anything about a trained model.
- speed: throughput through the embedded Triton server, the variant vs FP32, same batch, concurrency,
  instance and intra-op threads, measured in interleaved rounds (perf_analyzer when it is found); the
  median ratio must reach `min_speedup`. A variant that is not faster is left out, saying so.

Why a stage of its own and not part of `repo build`: the speed gate runs a server for a minute or more
(wide_resnet101_2 serves ~4 images/s in FP32), which a repository build must not do silently; measured
once here, the verdict is recorded and `repo build` stays a fast, pure function of the manifest.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from tritonize.access import ControlKey
from tritonize.client.connection import Connection
from tritonize.client.perf import LOAD_GENERATORS, UNJUDGED, PerfOptions, run_perf
from tritonize.convert import precision as prec
from tritonize.convert.network import Network
from tritonize.convert.options import ConvertOptions, Precision
from tritonize.convert.prepare import CPU_INT8, INT8_TOLERANCE, cpu_data, prepare_precision
from tritonize.errors import TritonizeError
from tritonize.facts import now_iso
from tritonize.manifest import FileRef, Gate, Manifest, PrecisionVariant, ServingGates, variant_key
from tritonize.model_repository import ONNX_INT8_MODEL, ONNX_MODEL
from tritonize.progress import say
from tritonize.serve.embedded import embedded_server
from tritonize.stage import StageResult, StageStatus
from tritonize.tools import perf_analyzer
from tritonize.verify import compare


@dataclass(frozen=True)
class CpuOptions:
    calib_images: Path | None = None  # real images (or "synthetic"): calibration and held-out agreement
    calib_count: int = 32
    batch: int = 4  # images per request in the speed gate
    concurrency: int = 2  # requests in flight in the speed gate
    threads: int | None = None  # intra-op threads of the one instance per model; None: the usable cores
    duration: float = 5.0  # measured seconds per model and round
    rounds: int = 3
    min_speedup: float = 1.1  # the variant must serve this many times FP32's throughput
    min_top1: float = 0.99  # top-1 agreement with FP32 on held-out real images (pretrained weights)
    engine: str = "auto"  # perf_analyzer | builtin | auto
    force: bool = False  # re-quantize and re-measure even when the manifest is current

    def __post_init__(self):
        for option, value, low in (("--batch", self.batch, 1), ("--gate-concurrency", self.concurrency, 1),
                                   ("--rounds", self.rounds, 1)):
            if value < low:
                raise TritonizeError(f"{option} must be >= {low}, got {value}")
        if self.threads is not None and self.threads < 1:
            raise TritonizeError(f"--threads must be >= 1, got {self.threads}")
        if not 0 < self.duration <= 600:
            raise TritonizeError(f"--duration must be between 0 and 600 seconds, got {self.duration}")
        if self.min_speedup <= 0 or not 0 <= self.min_top1 <= 1:
            raise TritonizeError("--min-speedup must be > 0 and --min-top1 between 0 and 1")
        if self.engine not in LOAD_GENERATORS:
            raise TritonizeError(f"--load-generator must be one of {', '.join(LOAD_GENERATORS)}, got {self.engine!r}")
        if self.calib_images is None:
            raise TritonizeError("convert cpu needs --calib-images DIR: real images calibrate the INT8 variant and "
                                 "the held-out ones measure its agreement with FP32 (`--calib-images synthetic` "
                                 "calibrates on noise and leaves the agreement unknown)")

    def measurement(self, threads: int, engine: str) -> dict:
        """What the speed figures depend on (recorded with them; a change measures again). The thresholds are not
        in it: changing --min-speedup or --min-top1 judges the recorded figures again, without a server."""
        return {"batch": self.batch, "concurrency": self.concurrency, "threads": threads, "instances": 1,
                "duration_s": self.duration, "rounds": self.rounds, "engine": engine}


def convert_cpu(artifacts: Path, options: CpuOptions) -> StageResult:
    """Make (or reuse) the CPU INT8 variant; measure both gates unless figures for the same FP32 export and
    measurement settings are recorded; judge them against the thresholds; record the verdict."""
    manifest = Manifest.load(artifacts)
    spec, fp32 = manifest.spec, manifest.onnx
    if fp32 is None:
        raise TritonizeError(f"no ONNX export in {manifest.directory}: run `tritonize export --artifacts {manifest.directory}`")
    network = Network.from_spec(spec)
    source = manifest.path(fp32)
    convert_options = ConvertOptions(precision=Precision.int8, calib_images=options.calib_images,
                                     calib_count=options.calib_count, force=options.force)
    say(f"CPU precision variant of {spec.arch} ({spec.weights}): INT8 for onnxruntime's CPU kernels")
    prepare_precision(manifest, network, source, convert_options, CPU_INT8)
    entry: PrecisionVariant = manifest.variant(CPU_INT8.name)  # type: ignore[assignment]
    tool = None if options.engine == "builtin" else perf_analyzer.find()
    if options.engine == "perf_analyzer" and tool is None:
        tool = perf_analyzer.require()
    engine = "perf_analyzer" if tool else "builtin"
    threads = options.threads or len(os.sched_getaffinity(0))
    measurement = options.measurement(threads, engine)
    fp32_ref = FileRef(fp32.file, fp32.sha256)
    recorded = entry.cpu_serving
    if not options.force and recorded is not None and recorded.fp32 == fp32_ref and recorded.settings == measurement:
        say(f"= gate figures for {entry.file} are recorded for these settings (measured {recorded.measured}); "
            "judging them again (--force measures again)")
        agreement_figures, speed_figures, measured = recorded.agreement.figures, recorded.speed.figures, recorded.measured
    else:
        agreement_figures = agreement_figures_of(network, source, manifest.path(entry), convert_options)
        speed_figures = speed_figures_of(manifest, entry, spec, options, threads, engine, str(tool) if tool else "builtin")
        measured = now_iso()
    gates = ServingGates(judge_agreement(agreement_figures, network.pretrained, options.min_top1),
                         judge_speed(speed_figures, options.min_speedup), fp32_ref, measurement, measured)
    for name, gate in (("agreement", gates.agreement), ("speed", gates.speed)):
        say(f"  {'✓' if gate.passed else '✗'} {name}: {gate.reason}")
    say(("✓ " if gates.passed else "✗ ") + _verdict(gates))
    if gates == recorded:
        return StageResult("convert cpu", StageStatus.up_to_date, _verdict(gates))
    manifest.record(variant_key(CPU_INT8.name), replace(entry, cpu_serving=gates))
    return StageResult("convert cpu", StageStatus.done, _verdict(gates))


def _verdict(gates: ServingGates) -> str:
    if gates.passed:
        return "onnx_int8_cpu passes both gates: `repo build` serves it as onnx_int8_model"
    failed = gates.agreement if not gates.agreement.passed else gates.speed
    return f"onnx_int8_cpu will not be served: {failed.reason}"


def agreement_figures_of(network: Network, fp32: Path, variant: Path, options: ConvertOptions) -> dict:
    """The variant's logits vs FP32's on the held-out real images (none: {"images": 0})."""
    held_out = cpu_data(network, options).held_out
    if not len(held_out):
        return {"images": 0}
    names = network.input_name, network.output_name
    reference = prec.run_onnx(prec.ort_session(fp32), held_out, *names)
    result = compare(reference, prec.run_onnx(prec.ort_session(variant), held_out, *names), INT8_TOLERANCE)
    return {"images": len(held_out), "finite": result.finite, "top1_agreement": result.top1_agreement,
            "top5_overlap": result.top5_overlap, "rel_to_scale": result.rel_to_scale, "mean_kl": result.mean_kl}


def judge_agreement(figures: dict, pretrained: bool, min_top1: float) -> Gate:
    if not figures["images"]:
        if pretrained:
            return Gate(False, "no held-out real images to compare with FP32 on: give --calib-images DIR with more "
                               "images than --calib-count", figures)
        return Gate(True, "random-init weights and no held-out real images: agreement not measured, not gated", figures)
    measured = (f"top-1 {figures['top1_agreement']:.1%}, top-5 {figures['top5_overlap']:.1%}, error "
                f"{figures['rel_to_scale']:.1e} of the logit scale on {figures['images']} held-out real images")
    if not pretrained:
        return Gate(True, f"{measured} (random-init weights: reported, not gated)", figures)
    passed = (figures["finite"] and figures["top1_agreement"] >= min_top1
              and figures["rel_to_scale"] <= INT8_TOLERANCE.max_rel_to_scale)
    return Gate(passed, f"{measured}; needs top-1 >= {min_top1:.0%} (--min-top1) and error <= "
                        f"{INT8_TOLERANCE.max_rel_to_scale:.0%}", figures)


def speed_figures_of(manifest: Manifest, variant: PrecisionVariant, spec, options: CpuOptions, threads: int, engine: str,
                     described: str) -> dict:
    """Throughput of the variant and FP32 through the embedded server: one instance each, `threads` intra-op
    threads, requests of `batch` images at `concurrency`, in `rounds` rounds whose order alternates."""
    models = {"fp32": (ONNX_MODEL.name, manifest.path(manifest.onnx)), "variant": (ONNX_INT8_MODEL.name, manifest.path(variant))}
    say(f"  speed gate through the embedded Triton server, measured by {described}: batch {options.batch}, concurrency "
        f"{options.concurrency}, 1 instance x {threads} threads, {options.rounds} rounds x 2 x {options.duration:g} s")
    perf = PerfOptions(concurrency=(options.concurrency,), batch=options.batch, duration=options.duration, warmup=2,
                       engine=engine, preprocess="client", stability=UNJUDGED, level_time_limit=max(120.0, 4 * options.duration))
    rates: dict[str, list[float]] = {"fp32": [], "variant": []}
    with tempfile.TemporaryDirectory(prefix=".gate-", dir=manifest.directory) as tmp:
        repo = Path(tmp) / "models"
        for name, path in models.values():
            _gate_model(repo / name, name, path, spec, variant, options.batch, threads)
        with (embedded_server(repo, model_config_name="config", control_key=ControlKey.generate()) as server,
              Connection(server.grpc_url, timeout=600) as connection):  # the connection finds the key itself
            for round_ in range(options.rounds):
                for which in (("fp32", "variant") if round_ % 2 == 0 else ("variant", "fp32")):
                    (level,) = run_perf(connection, [models[which][0]], perf).levels
                    rates[which].append(round(level.throughput, 2))
    ratios = [round(v / f, 3) for v, f in zip(rates["variant"], rates["fp32"]) if f > 0]
    return {"ratio": statistics.median(ratios) if ratios else 0.0, "ratios": ratios, "fp32_infer_s": rates["fp32"],
            "variant_infer_s": rates["variant"], "batch": options.batch, "concurrency": options.concurrency,
            "threads": threads, "measured_by": described}


def judge_speed(figures: dict, min_speedup: float) -> Gate:
    how = (f"{figures['ratio']:.2f}x FP32's throughput through the server (median of {len(figures['ratios'])} rounds: "
           f"{statistics.median(figures['variant_infer_s']):.1f} vs {statistics.median(figures['fp32_infer_s']):.1f} img/s "
           f"at batch {figures['batch']}, concurrency {figures['concurrency']}, {figures['threads']} threads)")
    if figures["ratio"] >= min_speedup:
        return Gate(True, how, figures)
    return Gate(False, f"not {min_speedup:g}x faster than FP32 (--min-speedup): {how}", figures)


def _gate_model(directory: Path, name: str, model_file: Path, spec, variant: PrecisionVariant, max_batch: int,
                threads: int) -> None:
    """A minimal model directory: the model file (hard-linked) and a config with one CPU instance of `threads`
    intra-op threads and no dynamic batching, so both models run exactly the same requests the same way."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    (directory / "1").mkdir(parents=True)
    try:
        os.link(model_file, directory / "1" / ONNX_MODEL.filename)
    except OSError:
        shutil.copyfile(model_file, directory / "1" / ONNX_MODEL.filename)
    cfg = pb.ModelConfig(name=name, platform=ONNX_MODEL.platform, max_batch_size=max_batch)
    cfg.input.add(name=variant.input_name, data_type=pb.TYPE_FP32, dims=list(spec.input_shape))
    cfg.output.add(name=variant.output_name, data_type=pb.TYPE_FP32, dims=[spec.num_classes])
    cfg.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    cfg.parameters["intra_op_thread_count"].string_value = str(threads)
    for key, value in spec.preprocessing.to_parameters().items():  # the client reads the contract from the config
        cfg.parameters[key].string_value = value
    (directory / "config.pbtxt").write_text(text_format.MessageToString(cfg))
