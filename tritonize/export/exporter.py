"""The export stage: build, export, verify, publish atomically, record in the manifest."""

from __future__ import annotations

import functools
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.facts import file_facts, now_iso, tool_versions
from tritonize.files import ensure_writable_dir, staged_path, sweep_stale
from tritonize.machine import compute_threads
from tritonize.manifest import MANIFEST_NAME, ExportedArtifact, Manifest, Status
from tritonize.progress import say, step
from tritonize.sources import build_model
from tritonize.spec import TORCHSCRIPT_INPUT_NAME, TORCHSCRIPT_OUTPUT_NAME, ModelSpec
from tritonize.stage import StageResult, StageStatus
from tritonize.verify import FP32, Tolerance, VerificationReport, verification_inputs, verify_runner

FORMATS = ("torchscript", "onnx", "exported_program")
# What Triton serves. The ExportedProgram is only for torch-tensorrt's dynamo frontend (convert trt), and costs
# about as much again as the TorchScript export (benchmarks/RESULTS.md): asked for, not written by default.
DEFAULT_FORMATS = ("torchscript", "onnx")
FILES = {"torchscript": "model.pt", "onnx": "model.onnx", "exported_program": "model.pt2"}
MIN_DYNAMO_OPSET = 18  # the dynamo exporter silently raises lower opsets to 18
MAX_DYNAMIC_BATCH = 4096  # the batch range torch.export is asked to keep symbolic


@dataclass(frozen=True)
class ExportOptions:
    formats: tuple[str, ...] = DEFAULT_FORMATS
    opset: int = 18
    simplify: bool = True
    max_batch: int = 32
    force: bool = False
    tolerance: Tolerance = FP32  # relative to the output scale; FP32 exports land near 1e-6

    def __post_init__(self):
        unknown = set(self.formats) - set(FORMATS)
        if unknown or not self.formats:
            raise TritonizeError(f"unknown format {', '.join(sorted(unknown)) or '(none)'}: choose from "
                                 f"{', '.join(FORMATS)}, or all")
        if self.max_batch < 1:
            raise TritonizeError(f"--max-batch must be >= 1, got {self.max_batch}")
        if not 7 <= self.opset <= 23:
            raise TritonizeError(f"--opset {self.opset} is not supported: use 7..23 (default 18)")

    def fingerprint(self, fmt: str) -> dict:
        """What, besides the spec, decides an artifact's content (used to skip up-to-date work)."""
        if fmt in ("torchscript", "exported_program"):
            return {"max_batch": self.max_batch}
        return {"max_batch": self.max_batch, "opset": self.opset, "simplify": self.simplify}


def export_artifacts(spec: ModelSpec, artifacts: Path, options: ExportOptions = ExportOptions(),
                     model=None) -> StageResult:
    """Export the requested formats into `artifacts` and record them in its manifest.

    An artifact is published (renamed into place and recorded) only after it passed verification;
    an existing artifact made from the same spec and options is kept as it is unless `force`. `model`: the module
    itself (the Python API's), in eval mode; otherwise the spec's source builds it.
    """
    artifacts = ensure_writable_dir(Path(artifacts), "--artifacts")
    _sweep(artifacts)
    manifest = Manifest.load_or_empty(artifacts)
    if manifest.model is not None and manifest.model != spec:
        stale = [k for k in manifest.artifacts if k in FILES and (artifacts / FILES[k]).is_file()]
        if stale and not options.force:
            raise TritonizeError(
                f"{artifacts} holds artifacts of another model ({manifest.model.arch}, weights "
                f"{manifest.model.weights}); use --force to replace them or --artifacts for another directory"
            )
        manifest = Manifest(artifacts)  # a new model: every earlier entry (plans, precision variants) is stale
    manifest.model = spec

    todo = [f for f in options.formats if options.force or not _up_to_date(manifest, f, options)]
    for fmt in options.formats:
        if fmt not in todo:
            say(f"  = {FILES[fmt]} is up to date (same model and options); --force rebuilds it")
    detail = f"{spec.arch}, weights {spec.weights}"
    if not todo:
        return StageResult("export", StageStatus.up_to_date, detail)

    say(f"Exporting {spec.arch} (weights: {spec.weights}) to {', '.join(FILES[f] for f in todo)} in {artifacts}/")
    if not spec.pretrained:
        say("  ! random-init weights: artifacts are real but predictions and labels are meaningless")
    with step(f"build {spec.arch}") as built:
        model = build_model(spec) if model is None else model
    pre = spec.preprocessing
    inputs = verification_inputs(spec.input_shape, options.max_batch, pre.mean, pre.std, layout=pre.layout)
    with step(f"reference outputs in PyTorch eager (batch {options.max_batch})") as ref_step:
        reference = _reference(model, inputs, spec)
    common = {"build": asdict(built), "reference": asdict(ref_step)}

    exporters: dict[str, Callable] = {"torchscript": _export_torchscript, "onnx": _export_onnx,
                                      "exported_program": _export_program}
    for fmt in todo:
        path = artifacts / FILES[fmt]
        with staged_path(path) as staged:
            fields, report, timings = exporters[fmt](model, spec, path, staged, inputs, reference, options)
            entry = ExportedArtifact(
                status=Status.verified,
                format=fmt,
                **{**file_facts(staged), "file": path.name},
                input_name=fields.pop("input_name"),
                output_name=fields.pop("output_name"),
                verification=report,
                options=options.fingerprint(fmt),
                created=now_iso(),
                tools=fields.pop("tools"),
                details={**fields, "timings": {**common, **timings}},
            )
            manifest.publish(fmt, entry, staged)
        say(f"  ✓ published {path} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}")
    return StageResult("export", StageStatus.done, detail)


def _sweep(artifacts: Path) -> None:
    """What an interrupted export left beside its files goes now, even when nothing is exported again; a
    temporary of an export that still runs is named and kept."""
    for name in (*FILES.values(), MANIFEST_NAME):
        swept, running = sweep_stale(artifacts / name)
        for path in swept:
            say(f"  removed {path.name}, left by an interrupted run (pid {path.name.rpartition('-')[2]})")
        for path in running:
            say(f"  ! {path.name} belongs to a running process (pid {path.name.rpartition('-')[2]}): another export "
                f"is writing {artifacts}?")


def _up_to_date(manifest: Manifest, fmt: str, options: ExportOptions) -> bool:
    entry = manifest.artifacts.get(fmt)
    if not isinstance(entry, ExportedArtifact) or entry.options != options.fingerprint(fmt):
        return False
    problem = manifest.file_problem(entry)
    if problem:
        say(f"  ! {problem}: exporting it again")
    return problem is None


def _reference(model, inputs: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """The eager outputs; a model whose output is not a (batch, classes) tensor of the spec's classes is refused."""
    import torch

    from tritonize.sources.shared import logits_classes

    with torch.inference_mode():
        output = model(torch.from_numpy(inputs))
    classes = logits_classes(output, len(inputs), spec.arch)
    if classes != spec.num_classes:
        raise TritonizeError(f"{spec.arch} returns {classes} classes, but {spec.num_classes_source or 'its source'} "
                             f"says {spec.num_classes}: the model and what it was described from differ")
    return output.numpy()


def _run_torch(model, batch: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return model(torch.from_numpy(batch)).numpy()


def _run_ort(session, spec: ModelSpec, batch: np.ndarray) -> np.ndarray:
    return session.run([spec.output_name], {spec.input_name: batch})[0]


def _check(report: VerificationReport, what: str, path: Path) -> None:
    if not report.passed:
        raise TritonizeError(
            f"{what} failed verification against PyTorch eager ({report.summary()}; tolerance "
            f"{report.tolerance.max_rel_to_scale:.0e} of scale); {path.name} was not published"
        )


def _export_torchscript(model, spec, path, tmp, inputs, reference, options) -> tuple[dict, VerificationReport, dict]:
    import torch

    # TorchScript is deprecated in torch but is what Triton's libtorch backend loads.
    warnings.filterwarnings("ignore", message=r".*torch\.jit\..* is deprecated", category=FutureWarning)
    timings = {}
    with step("TorchScript (torch.jit.script)") as s:
        try:
            module = torch.jit.script(model)
            method = "script"
        except Exception as e:  # noqa: BLE001 - some archs are not scriptable: tracing is exact for fixed-graph CNNs
            say(f"  ! torch.jit.script failed ({type(e).__name__}); tracing instead")
            module = torch.jit.trace(model, torch.from_numpy(inputs[:2]))
            method = "trace"
        module.save(str(tmp))
    timings["export"] = asdict(s)
    with step("verify TorchScript (batches 1, odd, max)") as s:
        loaded = torch.jit.load(str(tmp), map_location="cpu").eval()
        report = verify_runner(lambda x: _run_torch(loaded, x), inputs, reference, options.tolerance)
    timings["verify"] = asdict(s)
    _check(report, "TorchScript export", path)
    fields = {
        "input_name": TORCHSCRIPT_INPUT_NAME,
        "output_name": TORCHSCRIPT_OUTPUT_NAME,
        "method": method,
        "tools": tool_versions("torch", "torchvision"),
    }
    return fields, report, timings


def _dynamic_batch() -> tuple:
    """torch.export's dynamic batch for forward()'s one positional argument, whatever its name (`x` for torchvision
    classifiers, `pixel_values` for Hugging Face's)."""
    import torch

    return ({0: torch.export.Dim("batch", min=1, max=MAX_DYNAMIC_BATCH)},)


def _export_program(model, spec, path, tmp, inputs, reference, options) -> tuple[dict, VerificationReport, dict]:
    """torch.export's ExportedProgram with a dynamic batch, saved as a .pt2 archive: what torch-tensorrt's dynamo
    frontend compiles (convert_exported_program_to_serialized_trt_engine). Verified after torch.export.load."""
    import torch

    timings = {}
    with step("torch.export (dynamic batch)") as s:
        program = torch.export.export(model, (torch.from_numpy(inputs[:2]),), dynamic_shapes=_dynamic_batch())
        with open(tmp, "wb") as f:  # a file object: a path must end in .pt2, and the staged one does not
            torch.export.save(program, f)
        signature = program.graph_signature
        del program
    timings["export"] = asdict(s)
    with step("verify the ExportedProgram after torch.export.load (batches 1, odd, max)") as s:
        with open(tmp, "rb") as f:
            loaded = torch.export.load(f).module()
        report = verify_runner(functools.partial(_run_torch, loaded), inputs, reference, options.tolerance)
        del loaded
    timings["verify"] = asdict(s)
    _check(report, "torch.export program", path)
    fields = {
        "input_name": signature.user_inputs[0],  # the placeholder: torch-tensorrt's engine names its input after it
        "output_name": signature.user_outputs[0],
        "batch_axis": "batch",
        "batch_range": [1, MAX_DYNAMIC_BATCH],
        "tools": tool_versions("torch", "torchvision"),
    }
    return fields, report, timings


def _export_onnx(model, spec, path, tmp, inputs, reference, options) -> tuple[dict, VerificationReport, dict]:
    import onnx
    import torch

    timings = {}
    example = torch.from_numpy(inputs[:2])  # batch 2: a batch-1 example would specialize the axis
    with step(f"ONNX export (opset {options.opset})") as s:
        if options.opset >= MIN_DYNAMO_OPSET:
            exporter = "dynamo"
            program = torch.onnx.export(
                model,
                (example,),
                dynamo=True,
                input_names=[spec.input_name],
                output_names=[spec.output_name],
                dynamic_shapes=_dynamic_batch(),
                opset_version=options.opset,
                optimize=True,
                verbose=False,
            )
            proto = program.model_proto
        else:
            exporter = "torchscript-legacy"
            import io

            buffer = io.BytesIO()
            torch.onnx.export(
                model,
                (example,),
                buffer,
                dynamo=False,
                input_names=[spec.input_name],
                output_names=[spec.output_name],
                dynamic_axes={spec.input_name: {0: "batch"}, spec.output_name: {0: "batch"}},
                opset_version=options.opset,
            )
            proto = onnx.load_from_string(buffer.getvalue())
    timings["export"] = asdict(s)
    simplified = "off"
    if options.simplify:
        with step("simplify with onnxsim") as s:
            proto, simplified = _simplify(proto)
        timings["simplify"] = asdict(s)
    with step("save and check the ONNX graph") as s:
        onnx.save_model(proto, str(tmp))  # one file: models under 2 GB need no external data
        onnx.checker.check_model(str(tmp))
        opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        _check_symbolic_batch(proto, spec)
        nodes = len(proto.graph.node)
        del proto
    timings["save"] = asdict(s)
    with step("verify ONNX in onnxruntime (batches 1, odd, max)") as s:
        session = _ort_session(tmp)
        report = verify_runner(functools.partial(_run_ort, session, spec), inputs, reference, options.tolerance)
        del session
    timings["verify"] = asdict(s)
    _check(report, "ONNX export", path)
    if opset != options.opset:
        say(f"  ! the exporter wrote opset {opset} although {options.opset} was asked for")
    fields = {
        "input_name": spec.input_name,
        "output_name": spec.output_name,
        "exporter": exporter,
        "opset": opset,
        "simplified": simplified,
        "nodes": nodes,
        "batch_axis": "batch",
        "tools": tool_versions("torch", "torchvision", "onnx", "onnxscript", "onnxsim", "onnxruntime"),
    }
    return fields, report, timings


def _simplify(proto):
    """onnxsim keeps the symbolic batch axis (no input shapes are overwritten)."""
    try:
        import onnxsim

        simplified, ok = onnxsim.simplify(proto)
    except Exception as e:  # noqa: BLE001 - onnxsim raises plain RuntimeErrors from its C++ core
        say(f"  ! onnxsim failed ({str(e).splitlines()[0][:120]}); keeping the unsimplified graph")
        return proto, "failed, unsimplified graph kept"
    if not ok:
        say("  ! onnxsim's own check failed; keeping the unsimplified graph")
        return proto, "check failed, unsimplified graph kept"
    return simplified, "onnxsim"


def _check_symbolic_batch(proto, spec: ModelSpec) -> None:
    graph = proto.graph
    names = ([i.name for i in graph.input], [o.name for o in graph.output])
    if names != ([spec.input_name], [spec.output_name]):
        raise TritonizeError(f"exported ONNX has inputs/outputs {names}, expected {spec.input_name}/{spec.output_name}")
    for value in (graph.input[0], graph.output[0]):
        dim = value.type.tensor_type.shape.dim[0]
        if not dim.dim_param:
            raise TritonizeError(
                f"exported ONNX {value.name} has a fixed batch of {dim.dim_value}, not a symbolic batch axis"
            )


def _ort_session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = compute_threads()
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
