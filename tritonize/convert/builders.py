"""The four ways to build the same engine, each a thin, exact call; `pick_builders` chooses.

All build one optimization profile (min/opt/max on the batch axis) from the precision-prepared ONNX
(torch-tensorrt from the TorchScript export), strongly typed where TensorRT supports it. None of
them can run on a machine without TensorRT and a GPU; `why_not()` then says why, and the stage
writes the reproducer instead. Nothing here ever writes a plan that TensorRT did not produce.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tritonize.convert.trtexec import (
    BuildJob, log_tail, parse_banner_version, probe_trtexec, run_trtexec, trtexec_argv, version_tuple,
)
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path
from tritonize.releases import Release
from tritonize.machine import docker_gpu_problem, gpu_visible

# Where Triton's QA scripts run trtexec in images built FROM tritonserver:<release>-py3
# (server qa/L0_perf_resnet/test.sh); not confirmed for the -py3 image itself, so it is probed.
CONTAINER_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"
LOG_NAME = "convert.log"
PROBE_TIMEOUT_S = 900  # the first `docker run` pulls a ~15 GB image


@dataclass
class Built:
    tensorrt_version: str
    seconds: float
    engine_io: tuple[str, str]  # the input and output tensor names the engine has
    log: str | None = None
    argv: list[str] | None = None


class Builder:
    name = ""

    def why_not(self) -> str | None:
        """None when this builder can run here, else the reason it cannot."""
        raise NotImplementedError

    def refuses(self, job: BuildJob) -> str | None:
        """Why this builder cannot honour `job` (asked only when it can run), else None."""
        return None

    def tensorrt_version(self) -> str:
        raise NotImplementedError

    def build(self, job: BuildJob, out: Path, timeout_s: float) -> Built:
        raise NotImplementedError


def find_trtexec() -> str | None:
    return shutil.which("trtexec") or (CONTAINER_TRTEXEC if Path(CONTAINER_TRTEXEC).is_file() else None)


class TrtexecBuilder(Builder):
    name = "trtexec"

    def __init__(self, executable: str | None = None):
        self.executable = executable or find_trtexec()
        self._version = probe_trtexec(self.executable) if self.executable else None

    def why_not(self):
        if not self.executable:
            return "no trtexec on PATH or in /usr/src/tensorrt/bin"
        if not self._version:
            return f"{self.executable} did not report a TensorRT version"
        return None

    def tensorrt_version(self):
        return self._version

    def build(self, job, out, timeout_s):
        argv = trtexec_argv(job, self._version, executable=self.executable)
        return _run(argv, job, out, timeout_s, self._version)


class ContainerBuilder(Builder):
    """trtexec inside nvcr.io/nvidia/tritonserver:<release>-py3: the plan matches the server by construction.

    `why_not` needs Docker with the NVIDIA runtime and a GPU on this host, then runs the image's
    trtexec once (`--help`: its banner names the TensorRT version, with the build number from 10.4).
    """

    name = "container"

    def __init__(self, release: Release):
        self.release = release
        self._version: str | None = None

    def why_not(self):
        problem = docker_gpu_problem(self.release.image)
        if problem:
            return problem
        if not gpu_visible():
            return "no NVIDIA GPU on this host (no /dev/nvidia*, no /dev/dxg)"
        return self.probe()

    def probe(self) -> str | None:
        """Run the image's trtexec (`--help`) once: None when it reported its TensorRT version, else why not."""
        if self._version:
            return None
        image, name = self.release.image, _container_name()
        try:
            done = subprocess.run(container_argv(image, None, ["--help"], name=name), capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S)
        except OSError as e:
            return f"cannot run docker: {e.strerror or e}"
        except subprocess.TimeoutExpired:
            subprocess.run(["docker", "kill", name], capture_output=True)
            return f"`docker run {image}` did not finish within {PROBE_TIMEOUT_S} s"
        if done.returncode in (126, 127):  # the entrypoint's `exec` found no such file
            return (f"{image} has no {CONTAINER_TRTEXEC}: NVIDIA's TensorRT container {self.release.tensorrt_image} "
                    f"has trtexec (check that its TensorRT is the server's {self.release.tensorrt or 'version'}); "
                    "build there with `IMAGE=<that image> bash convert.sh container`")
        self._version = parse_banner_version(done.stdout + done.stderr)
        if not self._version:
            lines = [l.strip() for l in (done.stderr or done.stdout).splitlines() if l.strip()]
            return (f"trtexec in {image} reported no TensorRT version (`docker run` exit code {done.returncode}: "
                    f"{lines[-1] if lines else 'no output'})")
        return None

    def tensorrt_version(self):
        problem = self.probe()
        if problem:
            raise TritonizeError(f"cannot build in the container: {problem}")
        return self._version

    def build(self, job, out, timeout_s):
        version = self.tensorrt_version()
        mounts = []
        if Path(job.timing_cache).is_absolute():  # a cache outside the artifacts: mount its directory too
            Path(job.timing_cache).parent.mkdir(parents=True, exist_ok=True)
            mounts.append(Path(job.timing_cache).parent)
        name = _container_name()
        argv = container_argv(self.release.image, out, trtexec_argv(job, version)[1:], name=name, mounts=mounts)
        return _run(argv, job, out, timeout_s, version, kill=["docker", "kill", name])


def _container_name() -> str:
    return f"tritonize-{uuid.uuid4().hex[:12]}"


def container_argv(image: str, workdir: Path | None, trtexec_args: list[str], *, name: str | None = None,
                   mounts: tuple[Path, ...] | list[Path] = (), user: str | None = None) -> list[str]:
    """`docker run` of the image's trtexec in `workdir` (mounted at /work), writing files as `user`.

    Docker's contract (docker/cli docs/reference/commandline/container_run.md): a relative mount
    source names a volume, so sources are absolute (other `mounts` keep their host path inside);
    the image's entrypoint stays; trtexec as PID 1 would ignore SIGTERM, so `--init` forwards
    signals, and `--name` lets a timed-out build be ended with `docker kill`.
    """
    argv = ["docker", "run", "--rm", "--init", "--gpus", "all"]
    if name:
        argv += ["--name", name]
    if workdir is not None:
        argv += ["--user", user or f"{os.getuid()}:{os.getgid()}", "-v", f"{Path(workdir).resolve()}:/work", "-w", "/work"]
    for mount in mounts:
        argv += ["-v", f"{Path(mount).resolve()}:{Path(mount).resolve()}"]
    return [*argv, image, CONTAINER_TRTEXEC, *trtexec_args]


def _run(argv, job, out, timeout_s, version, kill=None) -> Built:
    run = run_trtexec(argv, out, job, LOG_NAME, timeout_s, kill=kill)
    if run.timed_out:
        raise TritonizeError(f"trtexec timed out after {timeout_s:.0f} s and was stopped; no plan written (log: {run.log})")
    if run.returncode != 0:
        raise TritonizeError(
            f"trtexec failed with exit code {run.returncode}: {log_tail(run.log)}; no plan written (log: {run.log})"
        )
    if not (out / job.plan_file).is_file():
        raise TritonizeError(f"trtexec exited 0 but wrote no engine; see {run.log}")
    return Built(tensorrt_version=version, seconds=run.seconds, engine_io=(job.input_name, job.output_name),
                 log=run.log.name, argv=argv)


def _cuda_device() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class TensorRTApiBuilder(Builder):
    """The same build through the TensorRT Python API, driven by Polygraphy (`plan_from_onnx`)."""

    name = "tensorrt"

    def why_not(self):
        if importlib.util.find_spec("tensorrt") is None:
            return "the tensorrt Python package is not installed"
        if not _cuda_device():
            return "no CUDA GPU"
        return None

    def tensorrt_version(self):
        import tensorrt as trt

        return trt.__version__

    def build(self, job, out, timeout_s):
        import tensorrt as trt
        from polygraphy.exception import PolygraphyException

        build = plan_from_onnx(job, out, trt)
        start = time.perf_counter()
        try:
            engine = build()
        except PolygraphyException as e:  # raised after Polygraphy logged TensorRT's own errors
            raise TritonizeError(f"TensorRT could not build {job.onnx_file}: {str(e).strip().splitlines()[-1]}; "
                                 "no plan written (TensorRT's messages are above)") from None
        seconds = round(time.perf_counter() - start, 3)
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(bytes(engine))
        return Built(tensorrt_version=trt.__version__, seconds=seconds, engine_io=(job.input_name, job.output_name))


def plan_from_onnx(job: BuildJob, out: Path, trt):
    """Polygraphy's lazy build of `job` with the `tensorrt` module `trt`: calling it returns the
    serialized engine and saves the timing cache. Nothing runs before the call.

    Polygraphy (NVIDIA/TensorRT tools/Polygraphy) knows what each TensorRT version has: EXPLICIT_BATCH
    only before 10, and a precision flag 11 lacks fails loudly, so FP16/INT8 flags are asked for only
    where the network is weakly typed (8.x). `tf32=False` clears TF32, which is on by default in every
    version. The names taken from `trt` here are checked against the real bindings of 8.6, 10 and 11
    by tests/convert/test_tensorrt_api.py.
    """
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile, SetLayerPrecisions

    major, minor = version_tuple(trt.__version__)
    weakly_typed = major < 10
    network = NetworkFromOnnxPath(str(out / job.onnx_file), strongly_typed=not weakly_typed)
    pin = weakly_typed and job.precision == "fp16" and bool(job.fp32_layers)
    if pin:  # the FP32 islands of the mixed-precision graph
        network = SetLayerPrecisions(network, {name: trt.float32 for name in job.fp32_layers})
    shapes = [(job.profile[k], *job.input_shape) for k in ("min", "opt", "max")]
    cache = str(out / job.timing_cache)
    modern = (major, minor) >= (8, 6)
    config = CreateConfig(
        tf32=False,
        fp16=weakly_typed and job.precision == "fp16",
        int8=weakly_typed and job.precision == "int8",
        precision_constraints="obey" if pin else None,
        profiles=[Profile().add(job.input_name, *shapes)],
        memory_pool_limits={trt.MemoryPoolType.WORKSPACE: job.workspace_mib << 20},
        builder_optimization_level=job.opt_level if modern else None,
        version_compatible=job.version_compatible or None,
        hardware_compatibility_level=(trt.HardwareCompatibilityLevel.AMPERE_PLUS
                                      if job.hardware_compatibility == "ampere+" else None),
        load_timing_cache=cache,
    )
    return EngineBytesFromNetwork(network, config=config, save_timing_cache=cache)


class TorchTensorRTBuilder(Builder):
    """torch-tensorrt's TorchScript frontend compiles the TorchScript export with Input(min, opt, max).

    It takes only the arguments of `torch_tensorrt.ts.convert_method_to_trt_engine` (pytorch/TensorRT
    py/torch_tensorrt/ts/_compiler.py, 1.4 to 2.14; no **kwargs): no optimization level, version or
    hardware compatibility, or timing cache (build time only: not used). From 2.13 (TensorRT 11) it
    ignores FP16 and keeps the graph's FP32 types (core/conversion/conversionctx/ConversionCtx.cpp).
    What it cannot honour is refused. Its engine names the tensors input_0 / output_0
    (core/conversion/conversion.cpp), which the manifest records for the repository.
    """

    name = "torch-tensorrt"
    ENGINE_IO = ("input_0", "output_0")

    def __init__(self, torchscript: Path | None):
        self.torchscript = torchscript

    def why_not(self):
        if importlib.util.find_spec("torch_tensorrt") is None:
            return "torch-tensorrt is not installed"
        if not _cuda_device():
            return "no CUDA GPU"
        if self.torchscript is None or not self.torchscript.is_file():
            return "no TorchScript export (model.pt) to compile"
        return None

    def refuses(self, job):
        return torchscript_frontend_refuses(job, self.tensorrt_version())

    def tensorrt_version(self):
        import tensorrt as trt

        return trt.__version__

    def build(self, job, out, timeout_s):
        import torch
        import torch_tensorrt

        module = torch.jit.load(str(self.torchscript), map_location="cuda").eval()
        shapes = {k: (job.profile[k], *job.input_shape) for k in ("min", "opt", "max")}
        inputs = [torch_tensorrt.Input(min_shape=shapes["min"], opt_shape=shapes["opt"], max_shape=shapes["max"],
                                       dtype=torch.float32)]
        precisions = {torch.float32} | ({torch.float16} if job.precision == "fp16" else set())
        start = time.perf_counter()
        engine = torch_tensorrt.ts.convert_method_to_trt_engine(
            module, "forward", inputs=inputs, enabled_precisions=precisions,
            workspace_size=job.workspace_mib << 20, disable_tf32=job.precision == "fp32",
        )
        seconds = round(time.perf_counter() - start, 3)
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(bytes(engine))
        return Built(tensorrt_version=self.tensorrt_version(), seconds=seconds, engine_io=self.ENGINE_IO)


def torchscript_frontend_refuses(job: BuildJob, tensorrt_version: str) -> str | None:
    """What torch-tensorrt's TorchScript frontend cannot honour in `job` (TorchTensorRTBuilder's doc)."""
    cannot = []
    if job.precision == "int8":
        cannot.append("INT8 (that needs the Q/DQ ONNX)")
    if job.precision == "fp16" and version_tuple(tensorrt_version)[0] >= 11:
        cannot.append(f"FP16 on TensorRT {tensorrt_version} (it would build FP32)")
    if job.opt_level != 3:
        cannot.append("--opt-level other than TensorRT's default 3")
    if job.version_compatible:
        cannot.append("--version-compatible")
    if job.hardware_compatibility != "none":
        cannot.append("--hardware-compatibility")
    if cannot:
        return f"its TorchScript frontend cannot honour {', '.join(cannot)}: use --builder trtexec, tensorrt or container"
    return None


def candidate_builders(release: Release, torchscript: Path | None) -> dict[str, Builder]:
    """In `auto` order: the container first (it matches the serving release by construction)."""
    builders = [ContainerBuilder(release), TrtexecBuilder(), TensorRTApiBuilder(), TorchTensorRTBuilder(torchscript)]
    return {b.name: b for b in builders}


def pick_builders(choice: str, builders: dict[str, Builder], job: BuildJob) -> tuple[list[Builder], str]:
    """The builders to try, in order (`auto`: each one that can run here and honour `job`), and a
    sentence saying why (or, with none, why nothing can build here). A builder asked for by name
    that can run but cannot honour `job` is an error."""
    names = list(builders) if choice == "auto" else [choice]
    usable, refused = [], []
    for name in names:
        reason = builders[name].why_not()
        if reason is None:
            reason = builders[name].refuses(job)
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
