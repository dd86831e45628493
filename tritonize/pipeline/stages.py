"""`tritonize build`: export -> convert aoti -> convert -> repo build -> repo check, as one command.

The pipeline only sequences: every stage decides for itself whether its outputs are current (export
by its fingerprint, convert aoti by the ExportedProgram's hash and torch's version, convert by the recorded ONNX
hash, profile, precision and target, the repository
by comparing what it would write with what is there) and returns a StageResult. TensorRT builds
where a builder can run; elsewhere convert writes the reproducer for the GPU box and the pipeline
goes on with one line saying why. So does it where the target release cannot serve the AOTInductor package.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tritonize.convert import ConvertOptions, Profile, convert_trt
from tritonize.convert.aoti import AotiOptions, convert_aoti
from tritonize.errors import TritonizeError
from tritonize.export import ExportOptions, export_artifacts
from tritonize.export.exporter import DEFAULT_FORMATS
from tritonize.manifest import Manifest
from tritonize.model_repository import AOTI_MODEL, release_problem
from tritonize.progress import say
from tritonize.releases import latest_release
from tritonize.repository_builder import Finding, RepoOptions, build_repository, check_repository
from tritonize.spec import ModelSpec
from tritonize.stage import StageResult, StageStatus


@dataclass(frozen=True)
class BuildOptions:
    artifacts: Path = Path("build")
    repository: Path = Path("models")
    min_batch: int = 1
    opt_batch: int = 16
    max_batch: int = 32
    precision: str = "fp16"
    triton_release: str | None = None
    calib_images: Path | None = None
    kind: str = "auto"
    instances: int = 1
    force: bool = False


@dataclass
class Timed:
    result: StageResult
    seconds: float


@dataclass
class BuildReport:
    stages: list[Timed] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def build_all(spec: ModelSpec, options: BuildOptions, model=None) -> BuildReport:
    """Run the stages in order on the model `spec` describes (`model`: the module itself, handed over from
    Python); a failing stage stops the pipeline with its one-line error."""
    # Validate every stage's options before the first (long) stage starts.
    convert_options = ConvertOptions(
        profile=Profile(options.min_batch, options.opt_batch, options.max_batch),
        precision=options.precision, triton_release=options.triton_release, calib_images=options.calib_images,
        force=options.force,
    )
    repo_options = RepoOptions(max_batch=options.max_batch, kind=options.kind, instances=options.instances,
                               force=options.force, overwrite=True)
    release = options.triton_release if options.triton_release not in (None, "auto") else latest_release().release
    without_aoti = release_problem(AOTI_MODEL, release)
    # the package for the instances the repository asks for: --kind gpu wants a GPU's (made on the GPU box), cpu the CPU's
    aoti_options = AotiOptions(device=options.kind, triton_release=release, force=options.force)
    formats = DEFAULT_FORMATS if without_aoti else (*DEFAULT_FORMATS, "exported_program")  # what convert aoti compiles
    export_options = ExportOptions(formats=formats, max_batch=options.max_batch, force=options.force)
    report = BuildReport()
    steps = (
        ("export", lambda: export_artifacts(spec, options.artifacts, export_options, model=model)),
        *([] if without_aoti else [("convert aoti", lambda: convert_aoti(options.artifacts, aoti_options, model))]),
        ("convert", lambda: convert_trt(options.artifacts, convert_options)),
        ("repo build", lambda: build_repository(options.artifacts, options.repository, repo_options)),
        ("repo check", lambda: _check(options, report)),
    )
    if without_aoti:
        say(f"no {AOTI_MODEL.name}: {without_aoti}")
    for name, run in steps:
        say(f"\n▶ {name}")
        start = time.perf_counter()
        result = run()
        if result.status is StageStatus.waiting_for_gpu:
            why = "TensorRT cannot run here" if name == "convert" else "torch cannot compile a GPU package here"
            result = replace(result, detail=f"{why}; {result.detail}")
        report.stages.append(Timed(result, time.perf_counter() - start))
    return report


def _check(options: BuildOptions, report: BuildReport) -> StageResult:
    findings = check_repository(options.repository, options.artifacts, options.triton_release)
    report.findings = findings
    errors = [f for f in findings if f.severity == "error"]
    for f in findings:
        say(f"  {f.severity}: {f.model}: {f.message} — {f.fix}")
    if errors:
        raise TritonizeError(f"repo check found {len(errors)} error(s) in {options.repository} (listed above)")
    return StageResult("repo check", StageStatus.done, f"no errors, {len(findings)} warning(s)")


def summary_rows(artifacts: Path) -> list[list[str]]:
    """One row per artifact: what it is, its size, what its verification measured, its status."""
    rows = []
    for key, entry in Manifest.load(artifacts).artifacts.items():
        size = getattr(entry, "size_bytes", None)
        check = getattr(entry, "verification", None)
        figures = (f"rel err {check.worst_rel_to_scale:.1e}, top-1 {check.top1_agreement:.0%}, "
                   f"top-5 {check.top5_overlap:.0%}") if check else "-"
        rows.append([key, getattr(entry, "file", None) or "-", f"{size / 1e6:.0f} MB" if size else "-", figures,
                     entry.status.value.replace("_", " ")])
    return rows
