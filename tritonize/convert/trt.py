"""The convert stage: precision-prepared ONNX (verified on the CPU) -> reproducer -> TensorRT plan.

Reads only the artifacts directory and its manifest (or, for an ONNX from elsewhere given with
--onnx to a directory without one, the ONNX graph: see network.py). Writes, each published atomically:
  model_opset17.onnx, model_fp16.onnx, model_int8.onnx   the prepared ONNX (prepare.py)
  convert.sh                                            the by-hand build, trtexec or the Triton container
  model.plan, convert.log                               only when TensorRT really built it (engine.py)
and the manifest entry "tensorrt" (status waiting_for_gpu | built | failed) that the repository
builder reads (`profile`, `status`, and the engine's own tensor names `input_name` / `output_name`).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from tritonize.convert.builders import (
    Builder,
    ContainerBuilder,
    TensorRTApiBuilder,
    TrtexecBuilder,
    container_argv,
    find_trtexec,
    pick_builders,
)
from tritonize.convert.engine import PLAN_NAME, build_engine, plan_check
from tritonize.convert.network import Network, network_from_onnx
from tritonize.convert.options import AUTO_RELEASE, ConvertOptions
from tritonize.convert.prepare import (
    onnx_opset,
    opset_for_release,
    opset_for_tensorrt,
    prepare_opset,
    prepare_precision,
)
from tritonize.convert.reproducer import argv_by_major, write_reproducer
from tritonize.convert.torch_trt import TorchTensorRTBuilder
from tritonize.convert.trtexec import BuildJob, probe_trtexec, profiles_problem, trtexec_argv, version_tuple
from tritonize.errors import TritonizeError
from tritonize.facts import now_iso
from tritonize.files import ensure_writable_dir, sha256_file
from tritonize.manifest import FileRef, Manifest, Plan, Status, Target, manifest_path
from tritonize.progress import say
from tritonize.releases import (
    Release,
    host_tensorrt,
    install_problem,
    latest_release,
    load_releases,
    pins_line,
    release_info,
    tensorrt_matches,
)
from tritonize.stage import StageResult, StageStatus

TIMING_CACHE_NAME = "timing.cache"


def convert_trt(artifacts: Path, options: ConvertOptions) -> StageResult:
    """Prepare, verify and (where TensorRT can run) build; records the manifest's "tensorrt" entry.

    Returns `waiting_for_gpu` when no builder can run here (or on a dry run), after writing everything
    the GPU box needs, also when the recorded wait is for the same job; `up_to_date` when the recorded
    plan is for the same ONNX, profile, precision, target and settings, unless `options.force`.
    """
    out = ensure_writable_dir(Path(artifacts), "--artifacts")
    if options.onnx is None and not manifest_path(out).is_file():
        raise TritonizeError(f"no manifest at {manifest_path(out)}: run `tritonize export --artifacts {out}` first, "
                             "or give --onnx FILE to convert an ONNX from elsewhere")
    manifest = Manifest.load_or_empty(out)
    fp32_onnx = _source_onnx(manifest, options)
    network = Network.from_spec(manifest.model) if manifest.model else network_from_onnx(fp32_onnx)
    release = target_release(options.triton_release)
    say(f"Converting {network.described} for Triton {release.release} ({release.image}): {options.precision.value}, "
        f"batch profile {options.profile.min}/{options.profile.opt}/{options.profile.max}"
        + (f", latency profile {options.latency.min}/{options.latency.opt}/{options.latency.max}" if options.latency else ""))
    say(f"  pins: {pins_line(release)}")
    if release.tensorrt_pip and install_problem(release):
        say(f"  ! {install_problem(release)}: on this machine, build with --builder container")

    # Probed before the ONNX is prepared (no probing on a dry run: the container's first probe pulls its image).
    candidates = {} if options.dry_run else candidate_builders(release, manifest)
    problems = {name: b.why_not() for name, b in candidates.items() if options.builder.value in ("auto", name)}
    source = fp32_onnx
    opset = min((o for o in (opset_for_release(release), builders_opset(candidates, problems)) if o), default=None)
    if opset is not None:
        source = prepare_opset(manifest, network, fp32_onnx, opset, options)
    prepared = prepare_precision(manifest, network, source, options)
    job = BuildJob(
        onnx_file=prepared.onnx_file,
        plan_file=PLAN_NAME,
        input_name=network.input_name,
        output_name=network.output_name,
        input_shape=network.input_shape,
        profile=options.profile.to_dict(),
        precision=options.precision.value,
        settings=replace(options.settings, timing_cache=_timing_cache(out, options)),
        fp32_layers=prepared.fp32_layers,
        latency=options.latency.to_dict() if options.latency else None,
    )
    argv_by_major(job)  # fail now, not on the GPU box, if a flag combination is impossible
    gpu_command = shlex.join(["tritonize", "convert", "trt", "--artifacts", str(out),
                              *replace(options, triton_release=release.release).to_argv()])
    header = [
        f"{network.described}; input {job.input_name} {'x'.join(map(str, job.input_shape))}, "
        f"batch min {job.profile['min']} / opt {job.profile['opt']} / max {job.profile['max']}"
        + (f"; latency profile {job.latency['min']} / {job.latency['opt']} / {job.latency['max']}" if job.latency else ""),
        f"Precision {job.precision}: prepared in {job.onnx_file} (see manifest.json)",
        f"Serving release {release.release}: TensorRT {release.tensorrt or 'unknown to tritonize (check the NGC release notes)'}",
        f"Full build with verification and manifest entry: {gpu_command}",
    ]
    script = write_reproducer(out, job, release.image, header, onnx_opset(out / job.onnx_file))
    if options.dry_run:
        builders, why = [], "--dry-run"
    else:
        builders, why = pick_builders(options.builder.value, candidates, job, problems)
    waiting = f"on the GPU box run: {gpu_command}   (or by hand: bash {script})"

    entry = Plan(
        status=Status.waiting_for_gpu,
        precision=job.precision,
        profile=options.profile,
        latency=options.latency,
        input_name=job.input_name,
        output_name=job.output_name,
        onnx=FileRef(job.onnx_file, sha256_file(out / job.onnx_file)),
        target=Target(release.release, release.image, release.tensorrt),
        options=job.settings,
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
            say("  = still waiting for a GPU box (same ONNX, profile, precision and target)")
            return StageResult("convert", StageStatus.waiting_for_gpu, waiting)

    if not can_build:
        manifest.record("tensorrt", entry)
        say(f"  ✓ wrote {script} and {job.onnx_file}; manifest entry 'tensorrt' is waiting_for_gpu")
        if not options.dry_run:
            say(f"  ! no TensorRT builder can run here ({why})")
        return StageResult("convert", StageStatus.waiting_for_gpu, waiting)  # the caller says it, once
    check = plan_check(network, fp32_onnx, options)
    built = build_engine(manifest, job, builders, release, options, entry, check)
    return StageResult("convert", StageStatus.done, _built_detail(built))


def _target_commands(job: BuildJob, release: Release, out: Path) -> dict:
    """The target release's exact trtexec and container commands, when the table knows its TensorRT
    (else convert.sh reads the version from the image's trtexec banner at build time)."""
    if not release.tensorrt:
        return {"container_command": f"bash {out / 'convert.sh'} container  (flags from the image's trtexec banner)"}
    problem = profiles_problem(job, version_tuple(release.tensorrt)[0])
    if problem:
        return {"container_command": f"none: {problem}"}
    argv = trtexec_argv(job, release.tensorrt)
    return {"trtexec_argv_target": argv, "container_argv": container_argv(release.image, out, argv[1:])}


def _same_job(recorded: Plan, wanted: Plan) -> bool:
    """The recorded plan was (or is to be) built from the same inputs with the same settings."""
    return (recorded.onnx == wanted.onnx and recorded.profiles == wanted.profiles and recorded.precision == wanted.precision
            and recorded.target.triton_release == wanted.target.triton_release and recorded.options == wanted.options)


def _plan_file_intact(manifest: Manifest, plan: Plan) -> bool:
    path = manifest.directory / (plan.file or PLAN_NAME)
    return path.is_file() and path.stat().st_size == plan.size_bytes


def _built_detail(plan: Plan) -> str:
    return f"{plan.precision} plan, TensorRT {plan.tensorrt_version or '?'}"


def target_release(choice: str | None) -> Release:
    """The release a plan is built for: --triton-release YY.MM; `auto`, the newest release whose TensorRT is this
    machine's (this Python's `tensorrt`, else trtexec's); and without one (None), `auto`'s where this machine has a
    TensorRT a release runs, else the newest release tritonize knows (N37: the card's command names no release)."""
    if choice is not None and choice != AUTO_RELEASE:
        return release_info(choice)
    version, where = host_tensorrt(), "this Python's TensorRT"
    if version is None:
        executable = find_trtexec()
        version, where = (probe_trtexec(executable) if executable else None), f"the trtexec at {executable}"
    matching = [r for r in load_releases() if version and r.tensorrt and tensorrt_matches(version, r.tensorrt)]
    if choice is None and not matching:
        return latest_release()
    if version is None:
        raise TritonizeError("--triton-release auto: this machine has no TensorRT (no `tensorrt` Python package, no "
                             "trtexec on PATH); give --triton-release YY.MM (`tritonize convert releases` lists the pins)")
    if not matching:
        raise TritonizeError(f"--triton-release auto: no release in tritonize's table runs TensorRT {version} ({where}); "
                             "install the pins of your target release (`tritonize convert releases`) or give "
                             "--triton-release YY.MM")
    release = matching[-1]
    say(f"--triton-release {choice or 'not given'}: Triton {release.release}, whose TensorRT {release.tensorrt} is {where}")
    return release


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
    """The timing cache the user named (relative to the artifacts when inside them); each build names its
    own file after it, by TensorRT version and GPU (engine.timing_cache_file)."""
    if options.settings.timing_cache is None:
        return TIMING_CACHE_NAME
    path = Path(options.settings.timing_cache).expanduser().resolve()
    try:
        return str(path.relative_to(out.resolve()))
    except ValueError:
        return str(path)  # reused across builds from wherever it lives


def builders_opset(candidates: dict[str, Builder], problems: dict[str, str | None]) -> int | None:
    """The ONNX opset the oldest parser among the builders that can run here reads, from each one's probed TensorRT
    (N27: the table does not know 23.10-24.01's 8.6; a TensorRT 8.6 builder of a version-compatible plan for 10)."""
    versions = [candidates[name].tensorrt_version() for name, problem in problems.items() if problem is None]
    opsets = [o for o in map(opset_for_tensorrt, versions) if o is not None]
    if opsets:
        say(f"  the builder's TensorRT is {min(versions, key=version_tuple)}: the ONNX is converted to opset {min(opsets)}")
    return min(opsets, default=None)


def candidate_builders(release: Release, manifest: Manifest) -> dict[str, Builder]:
    """In `auto` order: the container first (it matches the serving release by construction)."""
    builders = [ContainerBuilder(release), TrtexecBuilder(), TensorRTApiBuilder(), TorchTensorRTBuilder(manifest)]
    return {b.name: b for b in builders}
