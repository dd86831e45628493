"""The four ways to build the same engine, each a thin, exact call; `pick_builders` chooses.

All build one optimization profile (min/opt/max on the batch axis; two with --latency-profile, except
torch-tensorrt, which refuses it, and trtexec 8.x) from the precision-prepared ONNX (torch-tensorrt from
the export: torch_trt.py), strongly typed where TensorRT supports it, with one TF32
rule (BuildJob.tf32). None of them can run on a machine without TensorRT and a GPU; `why_not()` then
says why, and the stage writes the reproducer instead. Nothing here ever writes a plan that TensorRT
did not produce.

Each builder also checks its plan where its TensorRT is (`verify`): trtexec plans with the same trtexec,
on the host or in the same image; the others with this Python's TensorRT, through Polygraphy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tritonize.convert.layers import read_engine
from tritonize.convert.plan_check import PlanCheck, verify_plan, verify_with_trtexec
from tritonize.convert.trtexec import (
    BuildJob,
    log_tail,
    parse_banner_version,
    probe_trtexec,
    profiles_problem,
    run_trtexec,
    trtexec_argv,
    version_tuple,
)
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path
from tritonize.machine import cuda_gpu, docker_gpu_problem, gpu_visible
from tritonize.releases import Release
from tritonize.verify import VerificationReport

# Where Triton's QA scripts run trtexec in images built FROM tritonserver:<release>-py3 (server
# qa/L0_perf_resnet/test.sh); NVIDIA's TensorRT images have it on PATH. trtexec is looked up on PATH
# first, then here: on the host (`find_trtexec`) and in the image (`IMAGE_TRTEXEC`).
TRTEXEC_FALLBACK = "/usr/src/tensorrt/bin/trtexec"
# Run in the image by `sh -c SCRIPT sh ARGS...`; `sh` exits 127 when neither exists.
IMAGE_TRTEXEC = f'exec "$(command -v trtexec || echo {TRTEXEC_FALLBACK})" "$@"'
LOG_NAME = "convert.log"
PROBE_TIMEOUT_S = 900  # the first `docker run` pulls a ~15 GB image


@dataclass
class Built:
    tensorrt_version: str
    seconds: float
    engine_io: tuple[str, str]  # the input and output tensor names the engine has
    log: str | None = None
    argv: list[str] | None = None
    layer_info: str | None = None  # the engine inspector's JSON (convert/layers.py); None: not read
    layer_source: str = "IEngineInspector"
    details: dict = field(default_factory=dict)  # what the manifest entry records besides (the builder's own facts)


class Builder:
    name = ""
    checked_where = "with this Python's TensorRT (Polygraphy)"
    one_profile = ""  # why this builder makes one optimization profile only ("": it makes several)

    def why_not(self) -> str | None:
        """None when this builder can run here, else the reason it cannot."""
        raise NotImplementedError

    def refuses(self, job: BuildJob) -> str | None:
        """Why this builder cannot honour `job` (asked only when it can run), else None: by default, a setting its
        TensorRT does not have (settings.NEEDS)."""
        return job.settings.needs(self.tensorrt_version())

    def tensorrt_version(self) -> str:
        raise NotImplementedError

    def build(self, job: BuildJob, out: Path, timeout_s: float) -> Built:
        raise NotImplementedError

    def verify(self, plan: Path, engine_io: tuple[str, str], check: PlanCheck, job: BuildJob, version: str,
               timeout_s: float, profile: int = 0) -> VerificationReport:
        """Run the plan where its TensorRT is, in optimization profile `profile`, and compare it with onnxruntime FP32."""
        return verify_plan(plan, engine_io, check.inputs, check.reference, check.tolerance, check.batches,
                           check.described, built_with=version, version_compatible=job.settings.version_compatible,
                           profile=profile)


def find_trtexec() -> str | None:
    return shutil.which("trtexec") or (TRTEXEC_FALLBACK if Path(TRTEXEC_FALLBACK).is_file() else None)


def gpu_problem() -> str | None:
    """Why no CUDA GPU can run a build here (through the CUDA runtime, as TensorRT will), or None."""
    gpu = cuda_gpu()
    return gpu["error"] if "error" in gpu else None


class TrtexecBuilder(Builder):
    name = "trtexec"
    checked_where = "with the same trtexec"

    def __init__(self, executable: str | None = None):
        self.executable = executable or find_trtexec()
        self._version = probe_trtexec(self.executable) if self.executable else None

    def why_not(self):
        if not self.executable:
            return f"no trtexec on PATH or at {TRTEXEC_FALLBACK}"
        if not self._version:
            return f"{self.executable} did not report a TensorRT version"
        return None

    def refuses(self, job):
        return profiles_problem(job, version_tuple(self._version)[0]) or super().refuses(job)

    def tensorrt_version(self):
        return self._version

    def build(self, job, out, timeout_s):
        argv = trtexec_argv(job, self._version, executable=self.executable)
        return _run(argv, job, out, timeout_s, self._version)

    def verify(self, plan, engine_io, check, job, version, timeout_s, profile=0):
        return verify_with_trtexec([self.executable], plan.parent, plan.name, engine_io, check, job.settings.version_compatible,
                                   timeout_s, profile=profile)


class ContainerBuilder(Builder):
    """trtexec inside nvcr.io/nvidia/tritonserver:<release>-py3: the plan matches the server by construction,
    and is checked by a second `docker run` of the same image.

    `why_not` needs Docker that gives containers the GPU and a GPU on this host, then runs the image's
    trtexec once (`--help`: its banner names the TensorRT version, with the build number from 10.4).
    """

    name = "container"
    checked_where = "with trtexec in the same image"

    def __init__(self, release: Release):
        self.release = release
        self._version: str | None = None

    def why_not(self):
        problem = docker_gpu_problem(self.release.image)
        if problem:
            return problem
        if not gpu_visible() and gpu_problem():
            return "no NVIDIA GPU on this host (no /dev/nvidia*, no /dev/dxg)"
        return self.probe()

    def probe(self) -> str | None:
        """Run the image's trtexec (`--help`) once: None when it reported its TensorRT version, else why not."""
        if self._version:
            return None
        image, name = self.release.image, container_name()
        try:
            done = subprocess.run(container_argv(image, None, ["--help"], name=name), capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S)
        except OSError as e:
            return f"cannot run docker: {e.strerror or e}"
        except subprocess.TimeoutExpired:
            subprocess.run(["docker", "kill", name], capture_output=True)
            return f"`docker run {image}` did not finish within {PROBE_TIMEOUT_S} s"
        if done.returncode in (126, 127):  # neither on the image's PATH nor at the fallback
            return (f"{image} has no trtexec (on its PATH or at {TRTEXEC_FALLBACK}): NVIDIA's TensorRT container "
                    f"{self.release.tensorrt_image} has trtexec (check that its TensorRT is the server's "
                    f"{self.release.tensorrt or 'version'}); build there with `IMAGE=<that image> bash convert.sh container`")
        self._version = parse_banner_version(done.stdout + done.stderr)
        if not self._version:
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            return (f"trtexec in {image} reported no TensorRT version (`docker run` exit code {done.returncode}: "
                    f"{lines[-1] if lines else 'no output'})")
        return None

    def tensorrt_version(self):
        problem = self.probe()
        if problem:
            raise TritonizeError(f"cannot build in the container: {problem}")
        return self._version

    def refuses(self, job):
        return profiles_problem(job, version_tuple(self.tensorrt_version())[0]) or super().refuses(job)

    def _mounts(self, job: BuildJob) -> list[Path]:
        if Path(job.settings.timing_cache).is_absolute():  # a cache outside the artifacts: mount its directory too
            Path(job.settings.timing_cache).parent.mkdir(parents=True, exist_ok=True)
            return [Path(job.settings.timing_cache).parent]
        return []

    def build(self, job, out, timeout_s):
        version = self.tensorrt_version()
        name = container_name()
        argv = container_argv(self.release.image, out, trtexec_argv(job, version)[1:], name=name, mounts=self._mounts(job))
        return _run(argv, job, out, timeout_s, version, kill=["docker", "kill", name])

    def verify(self, plan, engine_io, check, job, version, timeout_s, profile=0):
        name = container_name()
        command = container_argv(self.release.image, plan.parent, [], name=name)
        return verify_with_trtexec(command, plan.parent, plan.name, engine_io, check, job.settings.version_compatible, timeout_s,
                                   kill=["docker", "kill", name], profile=profile)


def container_name() -> str:
    """A unique `docker run --name`, so that a run past its time can be ended with `docker kill`."""
    return f"tritonize-{uuid.uuid4().hex[:12]}"


def container_argv(image: str, workdir: Path | None, trtexec_args: list[str], *, name: str | None = None,
                   mounts: tuple[Path, ...] | list[Path] = (), user: str | None = None) -> list[str]:
    """`docker run` of the image's trtexec in `workdir` (mounted at /work), writing files as `user`.

    Docker's contract (docker/cli docs/reference/commandline/container_run.md): a relative mount
    source names a volume, so sources are absolute (other `mounts` keep their host path inside);
    the image's entrypoint stays; trtexec as PID 1 would ignore SIGTERM, so `--init` forwards
    signals, and `--name` lets a timed-out build be ended with `docker kill`. trtexec is found by
    `IMAGE_TRTEXEC` (the image's PATH, then TRTEXEC_FALLBACK); the arguments follow the command.
    """
    argv = ["docker", "run", "--rm", "--init", "--gpus", "all"]
    if name:
        argv += ["--name", name]
    if workdir is not None:
        argv += ["--user", user or f"{os.getuid()}:{os.getgid()}", "-v", f"{Path(workdir).resolve()}:/work", "-w", "/work"]
    for mount in mounts:
        argv += ["-v", f"{Path(mount).resolve()}:{Path(mount).resolve()}"]
    return [*argv, image, "sh", "-c", IMAGE_TRTEXEC, "sh", *trtexec_args]


def _run(argv, job, out, timeout_s, version, kill=None) -> Built:
    (out / job.layer_info).unlink(missing_ok=True)  # a stale one must not describe this build
    with cache_lock_removed(out / job.settings.timing_cache):
        run = run_trtexec(argv, out, job, LOG_NAME, timeout_s, kill=kill)
    if run.timed_out:
        raise TritonizeError(f"trtexec timed out after {timeout_s:.0f} s and was stopped; no plan written (log: {run.log})")
    if run.returncode != 0:
        raise TritonizeError(
            f"trtexec failed with exit code {run.returncode}: {log_tail(run.log)}; no plan written (log: {run.log})"
        )
    if not (out / job.plan_file).is_file():
        raise TritonizeError(f"trtexec exited 0 but wrote no engine; see {run.log}")
    exported = out / job.layer_info
    return Built(tensorrt_version=version, seconds=run.seconds, engine_io=(job.input_name, job.output_name),
                 log=run.log.name, argv=argv, layer_info=exported.read_text() if exported.is_file() else None,
                 layer_source="trtexec --exportLayerInfo")


@contextlib.contextmanager
def cache_lock_removed(cache: Path) -> Iterator[None]:
    """trtexec and Polygraphy lock the timing cache with the file <cache>.lock and leave it behind (trtexec's FileLock
    unlocks and closes it, never unlinks it: NVIDIA/TensorRT samples/utils/fileLock.cpp, 8.6's samples/common/common.h):
    removed after the build, unless it was there before (another build's lock is not ours to remove)."""
    lock = Path(f"{cache}.lock")
    ours = not lock.exists()
    try:
        yield
    finally:
        if ours:
            lock.unlink(missing_ok=True)


class TensorRTApiBuilder(Builder):
    """The same build through the TensorRT Python API, driven by Polygraphy (`plan_from_onnx`)."""

    name = "tensorrt"

    def why_not(self):
        if importlib.util.find_spec("tensorrt") is None:
            return "the tensorrt Python package is not installed"
        return gpu_problem()

    def tensorrt_version(self):
        import tensorrt as trt

        return trt.__version__

    def build(self, job, out, timeout_s):
        import tensorrt as trt
        from polygraphy.exception import PolygraphyException

        build = plan_from_onnx(job, out, trt)
        start = time.perf_counter()
        try:
            with cache_lock_removed(out / job.settings.timing_cache):
                engine = build()
        except PolygraphyException as e:  # raised after Polygraphy logged TensorRT's own errors
            raise TritonizeError(f"TensorRT could not build {job.onnx_file}: {str(e).strip().splitlines()[-1]}; "
                                 "no plan written (TensorRT's messages are above)") from None
        seconds = round(time.perf_counter() - start, 3)
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(bytes(engine))
        return Built(tensorrt_version=trt.__version__, seconds=seconds, engine_io=(job.input_name, job.output_name),
                     layer_info=read_engine(bytes(engine), trt))


def plan_from_onnx(job: BuildJob, out: Path, trt):
    """Polygraphy's lazy build of `job` with the `tensorrt` module `trt`: calling it returns the
    serialized engine and saves the timing cache. Nothing runs before the call.

    Polygraphy (NVIDIA/TensorRT tools/Polygraphy) knows what each TensorRT version has: EXPLICIT_BATCH
    only before 10, and a precision flag 11 lacks fails loudly, so FP16/INT8 flags are asked for only
    where the network is weakly typed (8.x). TF32 follows `job.tf32` (on by default in every version).
    The names taken from `trt` here are checked against the real bindings of 8.6, 10 and 11 by
    tests/convert/test_tensorrt_api.py, and the build runs on the emulated TensorRT in the tests.
    """
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineBytesFromNetwork,
        NetworkFromOnnxPath,
        Profile,
        SetLayerPrecisions,
    )

    major, minor = version_tuple(trt.__version__)
    weakly_typed = major < 10
    network = NetworkFromOnnxPath(str(out / job.onnx_file), strongly_typed=not weakly_typed)
    pin = weakly_typed and job.precision == "fp16" and bool(job.fp32_layers)
    if pin:  # the FP32 islands of the mixed-precision graph
        network = SetLayerPrecisions(network, {name: trt.float32 for name in job.fp32_layers})
    profiles = [Profile().add(job.input_name, *[(p[k], *job.input_shape) for k in ("min", "opt", "max")])
                for p in job.profiles]  # in index order: 0 (throughput), 1 (latency)
    cache = str(out / job.settings.timing_cache)
    modern = (major, minor) >= (8, 6)
    config = CreateConfig(
        tf32=job.tf32,
        fp16=weakly_typed and job.precision == "fp16",
        int8=weakly_typed and job.precision == "int8",
        precision_constraints="obey" if pin else None,
        profiles=profiles,
        memory_pool_limits={trt.MemoryPoolType.WORKSPACE: job.settings.workspace_mib << 20},
        builder_optimization_level=job.settings.opt_level if modern else None,
        version_compatible=job.settings.version_compatible or None,
        hardware_compatibility_level=(trt.HardwareCompatibilityLevel.AMPERE_PLUS
                                      if job.settings.hardware_compatibility == "ampere+" else None),
        load_timing_cache=cache,
        profiling_verbosity=trt.ProfilingVerbosity.DETAILED,  # the layers' precisions can be read back
    )
    return EngineBytesFromNetwork(network, config=config, save_timing_cache=cache)


def pick_builders(choice: str, builders: dict[str, Builder], job: BuildJob,
                  problems: dict[str, str | None] | None = None) -> tuple[list[Builder], str]:
    """The builders to try, in order (`auto`: each one that can run here and honour `job`), and a
    sentence saying why (or, with none, why nothing can build here). A builder asked for by name
    that can run but cannot honour `job` is an error. `problems`: the builders' `why_not()`, where already asked."""
    names = list(builders) if choice == "auto" else [choice]
    usable, refused = [], []
    for name in names:
        reason = problems[name] if problems and name in problems else builders[name].why_not()
        if reason is None:
            one = builders[name].one_profile
            reason = f"{one}: it cannot build --latency-profile" if one and job.latency else builders[name].refuses(job)
            if reason and choice != "auto":
                raise TritonizeError(f"--builder {name}: {reason}")
        if reason:
            refused.append(f"{name}: {reason}")
        else:
            usable.append(builders[name])
    if not usable:
        return [], "; ".join(refused)
    if choice != "auto":
        return usable, f"{choice} (asked for)"
    skipped = f" ({'; '.join(refused)})" if refused else ""
    order = ", ".join(builders)
    return usable, f"{usable[0].name}: the first of {order} that can run here{skipped}"
