"""`convert.sh`: the exact build, runnable by hand on the GPU box, with trtexec or in the Triton container."""

from __future__ import annotations

import shlex
from pathlib import Path

from tritonize.convert.builders import IMAGE_TRTEXEC, LOG_NAME, TRTEXEC_FALLBACK
from tritonize.convert.prepare import TENSORRT_8_OPSET
from tritonize.convert.trtexec import SUPPORTED_MAJORS, BuildJob, profiles_problem, trtexec_argv
from tritonize.files import atomic_path

SCRIPT_NAME = "convert.sh"
# A representative version per major: the flags differ between majors (and 8.x before 8.6).
MAJOR_VERSIONS = {8: "8.6", 10: "10.0", 11: "11.0"}


def argv_by_major(job: BuildJob) -> dict[str, list[str]]:
    """The trtexec argv per major whose trtexec can build `job` (8.x builds one profile: trtexec.profiles_problem)."""
    return {str(m): trtexec_argv(job, MAJOR_VERSIONS[m]) for m in SUPPORTED_MAJORS if not profiles_problem(job, m)}


def _cache_mount(job: BuildJob) -> str:
    """A timing cache outside the artifacts directory is mounted at its own path."""
    if not Path(job.settings.timing_cache).is_absolute():
        return ""
    folder = shlex.quote(str(Path(job.settings.timing_cache).parent))
    return f"-v {folder}:{folder} "


def write_reproducer(out: Path, job: BuildJob, image: str, header: list[str], opset: int) -> Path:
    """Write convert.sh (mode 0755) next to the plan; returns its path. `opset`: the ONNX's, which trtexec 8.x
    misreads above TENSORRT_8_OPSET (its branch then refuses, saying why)."""
    lines = [
        "#!/usr/bin/env bash",
        "# Written by `tritonize convert trt`. Rebuilds the TensorRT plan by hand on a GPU box:",
        f"#   bash {SCRIPT_NAME}             # trtexec from PATH, else {TRTEXEC_FALLBACK} (or $TRTEXEC)",
        f"#   bash {SCRIPT_NAME} container   # trtexec inside {image}, the release that serves the plan",
        "#   IMAGE=nvcr.io/nvidia/tensorrt:YY.MM-py3 bash convert.sh container   # another image with trtexec",
        *(f"# {h}" for h in header),
        "# The flags depend on the TensorRT major version, read from trtexec's banner (override: TRT_MAJOR=10).",
        "# Verification and the manifest entry come from `tritonize convert trt` itself; this script only builds.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'IMAGE="${{IMAGE:-{image}}}"',
        'if [ "${1:-local}" = container ]; then',
        "  # --init: trtexec as PID 1 would ignore Ctrl-C; the image's own entrypoint stays; trtexec from the",
        f"  # image's PATH, else {TRTEXEC_FALLBACK}.",
        '  RUN=(docker run --rm --init --gpus all --user "$(id -u):$(id -g)" -v "$PWD":/work -w /work '
        f'{_cache_mount(job)}"$IMAGE" sh -c {shlex.quote(IMAGE_TRTEXEC)} sh)',
        *([f"  mkdir -p {shlex.quote(str(Path(job.settings.timing_cache).parent))}"] if _cache_mount(job) else []),
        "else",
        f'  RUN=("${{TRTEXEC:-$(command -v trtexec || echo {TRTEXEC_FALLBACK})}}")',
        "fi",
        'if [ -z "${TRT_MAJOR:-}" ]; then',
        "  N=$(\"${RUN[@]}\" --help 2>&1 | grep -o 'TensorRT v[0-9]*' | head -n1 | tr -dc 0-9 || true)",
        '  if [ -z "$N" ]; then echo "cannot read the TensorRT version from trtexec; set TRT_MAJOR=8|10|11" >&2; exit 2; fi',
        "  if [ \"$N\" -ge 100000 ]; then TRT_MAJOR=$((N / 10000)); else TRT_MAJOR=$((N / 1000)); fi",
        "fi",
        'case "$TRT_MAJOR" in',
    ]
    for major, argv in argv_by_major(job).items():
        if major == "8" and opset > TENSORRT_8_OPSET:
            why = (f"trtexec of TensorRT 8 misreads {job.onnx_file} (opset {opset}; its ONNX parser reads up to opset "
                   f"{TENSORRT_8_OPSET}): build in the release's container (bash {SCRIPT_NAME} container) or with a "
                   "TensorRT 10 trtexec")
            lines.append(f"  8) echo {shlex.quote(why)} >&2; exit 2 ;;")
            continue
        lines.append(f"  {major}) ARGS=({' '.join(shlex.quote(a) for a in argv[1:])}) ;;")
    lines += [
        f'  *) echo "trtexec of TensorRT $TRT_MAJOR cannot build this plan (majors: {", ".join(argv_by_major(job))})" >&2; exit 2 ;;',
        "esac",
        f"rm -f {shlex.quote(job.partial_plan)}",
        "# trtexec leaves its timing cache's lock file behind: removed, unless another build's was there.",
        f"LOCK={shlex.quote(job.settings.timing_cache + '.lock')}",
        '[ -e "$LOCK" ] || trap \'rm -f "$LOCK"\' EXIT',
        f'"${{RUN[@]}}" "${{ARGS[@]}}" 2>&1 | tee {LOG_NAME}',
        "# Publish only a complete engine: trtexec wrote to a temporary name.",
        f"mv -f {shlex.quote(job.partial_plan)} {shlex.quote(job.plan_file)}",
        f'echo "built $PWD/{job.plan_file} (TensorRT $TRT_MAJOR.x); log: {LOG_NAME}"',
    ]
    path = Path(out) / SCRIPT_NAME
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
        tmp.chmod(0o755)
    return path
