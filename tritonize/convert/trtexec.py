"""The exact trtexec command for a TensorRT major version, and running it as a subprocess.

Flag history, read in each version's samples/common/sampleOptions.cpp (NVIDIA/TensorRT tags v8.6.1,
v10.0.0, v10.0.1, v10.1.0, v10.16, v11.0, v11.1; the accepted options per version are test data in
tests/convert/data/trtexec_options.json). Options are one argv element each, `--name=value`; any
option a version does not know makes trtexec exit 1 ("Unknown option").
- `--workspace=N` (MiB): replaced in 8.4 by `--memPoolSize=workspace:N`, removed in 10.0.
- `--memPoolSize=workspace:N`: a bare N is MiB on 8.4+, 10.0.x, 10.1+ and 11. Never add a unit:
  10.0.x multiplies the unit into bytes and then reads the number as MiB again, so `4096M` means
  4 PiB there, i.e. no limit.
- `--buildOnly` was renamed `--skipInference` in 8.6; 10 and 11 know only `--skipInference`.
- `--builderOptimizationLevel`, `--versionCompatible`, `--hardwareCompatibilityLevel`: new in 8.6.
- `--stronglyTyped`: TensorRT 10 (precision comes from the graph's types; no precision flags with it).
  TensorRT 11 removed `--fp16/--int8/--bf16/--fp8/--best/--calib`; strong typing is always on and
  `--stronglyTyped` is a no-op there.
- TF32 is on by default in every version (11 included); `--noTF32` keeps an FP32 build strict FP32.
- 8.x is weakly typed: `--fp16` / `--int8` enable the precisions the graph uses; FP32 islands of the
  mixed-precision graph are pinned with `--precisionConstraints=obey --layerPrecisions=<node>:fp32`
  (8.4+; the ONNX parser names layers after the ONNX nodes).
Never `--best`: it enables INT8 without calibration data (random scales) on 8.x and 10.x.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.plan_settings import BuildSettings

SUPPORTED_MAJORS = (8, 10, 11)
_BANNER = re.compile(r"\[TensorRT v(\d+)\](?: \[b(\d+)\])?")


@dataclass(frozen=True)
class BuildJob:
    """Everything a builder needs; file names are relative to the artifacts directory."""

    onnx_file: str
    plan_file: str
    input_name: str
    output_name: str
    input_shape: tuple[int, ...]  # without batch
    profile: dict  # {"min", "opt", "max"}
    precision: str  # fp32 | fp16 | int8
    settings: BuildSettings = BuildSettings()  # workspace, timing cache, optimization level, compatibility
    fp32_layers: tuple[str, ...] = field(default=())  # FP32 islands of a mixed-precision graph
    latency: dict | None = None  # a second optimization profile {"min", "opt", "max"} (index 1)

    @property
    def profiles(self) -> list[dict]:
        return [self.profile, *([self.latency] if self.latency else [])]

    def shape(self, batch: int) -> str:
        return "x".join(str(d) for d in (batch, *self.input_shape))

    @property
    def tf32(self) -> bool:
        """Whether TF32 may run the FP32 math: the one rule of every builder. TF32 is on by default in
        every TensorRT (11 included); an FP32 plan is held to FP32's tolerance, so it stays strict FP32.
        FP16 and INT8 plans keep TF32 for their FP32 parts: their tolerance is FP16's or INT8's anyway."""
        return self.precision != "fp32"

    @property
    def layer_info(self) -> str:
        """Where trtexec writes the engine inspector's JSON (--exportLayerInfo): what each layer runs in."""
        return f"{Path(self.plan_file).stem}.layers.json"

    @property
    def partial_plan(self) -> str:
        """The name trtexec writes to; renamed to plan_file only after a successful build."""
        return f".{self.plan_file}.partial"


def version_tuple(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in str(version).split(".")[:2])
    except ValueError:
        raise TritonizeError(f"cannot read TensorRT version {version!r}; expected MAJOR.MINOR[.PATCH]") from None
    return major, minor


def trtexec_argv(job: BuildJob, tensorrt_version: str, executable: str = "trtexec") -> list[str]:
    """The argv that builds `job` with the trtexec of `tensorrt_version`."""
    major, minor = version_tuple(tensorrt_version)
    if major not in SUPPORTED_MAJORS:
        raise TritonizeError(
            f"TensorRT {tensorrt_version} is not supported (supported majors: {', '.join(map(str, SUPPORTED_MAJORS))}; "
            "Triton containers ship 8, 10 or 11)"
        )
    modern = (major, minor) >= (8, 6)
    needs = job.settings.needs(tensorrt_version)
    if needs:
        raise TritonizeError(needs)
    problem = profiles_problem(job, major)
    if problem:
        raise TritonizeError(f"{problem}; target a release with TensorRT 10 or newer, or use --builder tensorrt")
    argv = [executable, f"--onnx={job.onnx_file}", f"--saveEngine={job.partial_plan}"]
    for index, profile in enumerate(job.profiles):
        if job.latency:  # several profiles: `--profile=N` then its three shapes (sampleOptions.cpp getOptimizationProfiles)
            argv.append(f"--profile={index}")
        argv += [f"--{kind}Shapes={job.input_name}:{job.shape(profile[kind])}" for kind in ("min", "opt", "max")]
    if (major, minor) >= (8, 4):
        argv.append(f"--memPoolSize=workspace:{job.settings.workspace_mib}")  # bare number = MiB (module doc)
    else:
        argv.append(f"--workspace={job.settings.workspace_mib}")
    argv += _precision_flags(job, major, minor)
    argv.append(f"--timingCacheFile={job.settings.timing_cache}")
    if modern:
        argv.append(f"--builderOptimizationLevel={job.settings.opt_level}")
    if job.settings.version_compatible:
        argv.append("--versionCompatible")
    if job.settings.hardware_compatibility != "none":
        argv.append(f"--hardwareCompatibilityLevel={job.settings.hardware_compatibility}")
    if modern:  # the precision each layer runs in, read back after the build (convert/layers.py)
        argv += ["--profilingVerbosity=detailed", f"--exportLayerInfo={job.layer_info}"]
    argv.append("--skipInference" if modern else "--buildOnly")
    return argv


def profiles_problem(job: BuildJob, major: int) -> str | None:
    """Why the trtexec of `major` cannot build `job`'s profiles: 8.x reads one --minShapes/--optShapes/--maxShapes
    (sampleOptions.cpp v8.6.1 BuildOptions::parse); `--profile=N` came with 10.0."""
    if job.latency and major < 10:
        return f"trtexec of TensorRT {major}.x builds one optimization profile, not the two of --latency-profile"
    return None


def _precision_flags(job: BuildJob, major: int, minor: int) -> list[str]:
    strict_fp32 = [] if job.tf32 else ["--noTF32"]  # TF32 is on by default, 11 included
    if major >= 11:
        return strict_fp32  # always strongly typed; precision flags were removed
    if major == 10:
        return ["--stronglyTyped", *strict_fp32]  # FP16/INT8 come from the graph's types
    flags = {"fp32": strict_fp32, "fp16": ["--fp16"], "int8": ["--int8"]}[job.precision]
    if job.precision == "fp16" and job.fp32_layers:
        if (major, minor) < (8, 4):
            raise TritonizeError(
                f"TensorRT {major}.{minor} cannot pin the {len(job.fp32_layers)} FP32 layers of the mixed-precision "
                "graph (needs 8.4+ --precisionConstraints); target a newer Triton release"
            )
        flags += ["--precisionConstraints=obey", "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in job.fp32_layers)]
    return flags


def trtexec_run_argv(plan_file: str, input_name: str, shape, inputs_file: str, outputs_file: str,
                     version_compatible: bool, profile: int = 0) -> list[str]:
    """trtexec arguments that load a plan, run it once at `shape` on the raw input file and export the output
    as JSON (every version from 8.6 has these). `--versionCompatible` lets the runtime run a
    version-compatible plan's lean runtime (samples/common/sampleEngines.cpp: setEngineHostCodeAllowed);
    `--useProfile=N` (10.0+) runs it in optimization profile N."""
    argv = [f"--loadEngine={plan_file}", f"--shapes={input_name}:{'x'.join(str(d) for d in shape)}",
            f"--loadInputs={input_name}:{inputs_file}", f"--exportOutput={outputs_file}",
            "--iterations=1", "--warmUp=0", "--duration=0"]
    if profile:
        argv.append(f"--useProfile={profile}")
    if version_compatible:
        argv.append("--versionCompatible")
    return argv


def parse_banner_version(text: str) -> str | None:
    """'[TensorRT v100500] [b18]' -> '10.5.0.18' (10.4+ print the build number); 'v100300' -> '10.3.0';
    'v8601' -> '8.6.1'."""
    match = _BANNER.search(text)
    if not match:
        return None
    n = int(match.group(1))
    if n >= 100000:  # 10.x and later encode MAJOR*10000 + MINOR*100 + PATCH
        version = f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    else:
        version = f"{n // 1000}.{n % 1000 // 100}.{n % 100}"  # 8.x: MAJOR*1000 + MINOR*100 + PATCH
    return f"{version}.{match.group(2)}" if match.group(2) else version


def probe_trtexec(executable: str, timeout_s: float = 60) -> str | None:
    """The TensorRT version of a trtexec binary (it prints its banner even for --help)."""
    try:
        done = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_banner_version(done.stdout + done.stderr)


@dataclass
class TrtexecRun:
    returncode: int
    seconds: float
    log: Path
    timed_out: bool = False


def run_trtexec(argv: list[str], cwd: Path, job: BuildJob, log_name: str, timeout_s: float,
                kill: list[str] | None = None) -> TrtexecRun:
    """Run trtexec in `cwd`, keep its whole output in `log_name`, and publish the plan only on success.

    trtexec writes to job.partial_plan; that file is renamed to job.plan_file when trtexec exits 0
    and left nowhere otherwise (failure, crash, timeout, Ctrl-C), so a plan on disk is always complete.
    `kill` is the command that stops trtexec when stopping `argv` does not (`docker kill <name>`: the
    container outlives its `docker run` client).
    """
    cwd = Path(cwd)
    partial, final, log = cwd / job.partial_plan, cwd / job.plan_file, cwd / log_name
    partial.unlink(missing_ok=True)
    start = time.perf_counter()
    timed_out = False
    with open(log, "w") as log_file:
        log_file.write("$ " + " ".join(argv) + "\n")
        log_file.flush()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            raise TritonizeError(f"cannot start {argv[0]}: {e.strerror or e}") from None
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc, kill)
            returncode = proc.returncode
        except BaseException:
            _stop(proc, kill)
            partial.unlink(missing_ok=True)
            raise
    seconds = round(time.perf_counter() - start, 3)
    if returncode == 0 and not timed_out and partial.is_file() and partial.stat().st_size > 0:
        os.replace(partial, final)
    else:
        partial.unlink(missing_ok=True)
    return TrtexecRun(returncode=returncode, seconds=seconds, log=log, timed_out=timed_out)


STOP_GRACE_S = 10  # between SIGTERM and SIGKILL


def _stop(proc: subprocess.Popen, kill: list[str] | None = None) -> None:
    """Stop trtexec and anything it started (its own process group)."""
    if kill:
        try:
            subprocess.run(kill, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass  # still stop the client below; its log names the container
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def log_tail(log: Path, lines: int = 3) -> str:
    """The last meaningful lines of a trtexec log, for a one-line error."""
    try:
        text = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in text if "error" in line.lower()]
    return " | ".join((errors or text)[-lines:])
