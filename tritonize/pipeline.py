"""`tritonize build`: export -> convert -> repo build -> repo check, as one command.

Each stage is skipped when the manifest says its outputs are current for the same inputs (the
stages' own checks for export; the recorded ONNX hash, profile and precision for convert; the
manifest hash every config carries for the repository); `force` rebuilds everything. TensorRT
builds where a builder can run; elsewhere the stage writes the reproducer for the GPU box and the
pipeline goes on with one line saying why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tritonize import manifest as mf
from tritonize.errors import TritonizeError
from tritonize.progress import say

NO_TENSORRT_EXIT = 3  # convert_trt's exit code when no builder can run here


@dataclass(frozen=True)
class BuildOptions:
    arch: str = "wide_resnet101_2"
    weights: str | None = None
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
class StageResult:
    stage: str
    status: str  # "done" | "up to date" | "waiting for GPU" | "failed"
    detail: str = ""
    seconds: float = 0.0


@dataclass
class BuildReport:
    stages: list[StageResult] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)


def build_all(options: BuildOptions) -> BuildReport:
    """Run the stages in order; a failing stage stops the pipeline with its one-line error."""
    from tritonize.convert import ConvertOptions, Profile
    from tritonize.repository_builder import RepoOptions

    # Validate every stage's options before the first (long) stage starts.
    convert_options = ConvertOptions(
        profile=Profile(options.min_batch, options.opt_batch, options.max_batch),
        precision=options.precision, triton_release=options.triton_release, calib_images=options.calib_images,
    )
    repo_options = RepoOptions(max_batch=options.max_batch, kind=options.kind, instances=options.instances, force=True)
    report = BuildReport()
    for name, run in (
        ("export", lambda: _export(options)),
        ("convert", lambda: _convert(options, convert_options)),
        ("repo build", lambda: _repository(options, repo_options)),
        ("repo check", lambda: _check(options, report)),
    ):
        say(f"\n▶ {name}")
        start = time.perf_counter()
        try:
            status, detail = run()
        except TritonizeError as e:
            report.stages.append(StageResult(name, "failed", str(e), time.perf_counter() - start))
            raise
        report.stages.append(StageResult(name, status, detail, time.perf_counter() - start))
    report.manifest = mf.load_manifest(options.artifacts)
    return report


def _export(options: BuildOptions) -> tuple[str, str]:
    from tritonize.export import ExportOptions, export_artifacts
    from tritonize.spec import resolve_spec

    before = _created(options.artifacts, "torchscript", "onnx")
    spec = resolve_spec(options.arch, options.weights)
    export_artifacts(spec, options.artifacts, ExportOptions(max_batch=options.max_batch, force=options.force))
    after = _created(options.artifacts, "torchscript", "onnx")
    return ("up to date" if before == after else "done"), f"{spec.arch}, weights {spec.weights}"


def _convert(options: BuildOptions, convert_options) -> tuple[str, str]:
    from tritonize.convert import convert_trt

    manifest = mf.load_manifest(options.artifacts)
    if not options.force and _convert_current(manifest, convert_options):
        entry = manifest["artifacts"]["tensorrt"]
        return "up to date", _convert_detail(entry)
    try:
        entry = convert_trt(options.artifacts, convert_options)
    except TritonizeError as e:
        if e.exit_code != NO_TENSORRT_EXIT:
            raise
        entry = mf.load_manifest(options.artifacts)["artifacts"]["tensorrt"]
    return ("done" if entry["status"] == "built" else "waiting for GPU"), _convert_detail(entry)


def _convert_detail(entry: dict) -> str:
    if entry["status"] == "built":
        return f"{entry['precision']} plan, TensorRT {entry.get('tensorrt_version', '?')}"
    return f"TensorRT cannot run here; on a GPU box run {entry['reproducer']} (or: {entry.get('gpu_command', '')})"


def _convert_current(manifest: dict, convert_options) -> bool:
    """The recorded conversion used the same profile, precision and target from the current ONNX."""
    artifacts = manifest.get("artifacts", {})
    entry, onnx = artifacts.get("tensorrt"), artifacts.get("onnx")
    if not entry or not onnx or entry.get("status") not in ("built", "waiting_for_gpu"):
        return False
    variant = {"fp16": "onnx_fp16", "int8": "onnx_int8"}.get(entry.get("precision"))
    source_sha = artifacts.get(variant, {}).get("source", {}).get("sha256") if variant else entry["onnx"]["sha256"]
    wanted_release = convert_options.triton_release or entry.get("target", {}).get("triton_release")
    return (
        entry.get("profile") == convert_options.profile.to_dict()
        and entry.get("precision") == convert_options.precision.value
        and entry.get("target", {}).get("triton_release") == wanted_release
        and source_sha == onnx["sha256"]
    )


def _repository(options: BuildOptions, repo_options) -> tuple[str, str]:
    from tritonize.repository_builder import build_repository

    sha = mf.manifest_sha256(options.artifacts)
    if not options.force and _repository_current(options.repository, sha):
        return "up to date", f"{options.repository}/ built from this manifest"
    build_repository(options.artifacts, options.repository, repo_options)
    models = sorted(p.name for p in options.repository.iterdir() if (p / "config.pbtxt").is_file())
    return "done", f"{options.repository}/: {', '.join(models)}"


def _repository_current(repository: Path, manifest_sha: str) -> bool:
    from tritonize.repository_builder.config import parse_config

    configs = sorted(Path(repository).glob("*/config.pbtxt"))
    if not configs:
        return False
    try:
        return all(parse_config(c).parameters["source.manifest_sha256"].string_value == manifest_sha for c in configs)
    except (TritonizeError, KeyError):
        return False


def _check(options: BuildOptions, report: BuildReport) -> tuple[str, str]:
    from tritonize.repository_builder import check_repository

    findings = check_repository(options.repository, options.artifacts, options.triton_release)
    report.findings = findings
    errors = [f for f in findings if f.severity == "error"]
    for f in findings:
        say(f"  {f.severity}: {f.model}: {f.message} — {f.fix}")
    if errors:
        raise TritonizeError(f"repo check found {len(errors)} error(s) in {options.repository} (listed above)")
    return "done", f"no errors, {len(findings)} warning(s)"


def _created(artifacts: Path, *keys: str) -> list:
    entries = mf.load_manifest_or_empty(artifacts).get("artifacts", {})
    return [entries.get(k, {}).get("created") for k in keys]


def summary_rows(report: BuildReport) -> list[list[str]]:
    """One row per artifact: what it is, its size, what its verification measured, its status."""
    rows = []
    for key, entry in report.manifest.get("artifacts", {}).items():
        size = f"{entry['size_bytes'] / 1e6:.0f} MB" if entry.get("size_bytes") else "-"
        check = entry.get("verification") or {}
        figures = (f"rel err {check['worst_rel_to_scale']:.1e}, top-1 {check['top1_agreement']:.0%}, "
                   f"top-5 {check['top5_overlap']:.0%}") if check else "-"
        rows.append([key, entry.get("file") or "-", size, figures, entry.get("status", "?").replace("_", " ")])
    return rows
