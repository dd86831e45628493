"""The four ways to build the same engine, each a thin, exact call; `pick_builder` chooses one.

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
from dataclasses import dataclass
from pathlib import Path

from tritonize.convert.trtexec import (
    BuildJob, log_tail, parse_banner_version, probe_trtexec, run_trtexec, trtexec_argv, version_tuple,
)
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path

CONTAINER_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"  # where the Triton -py3 images keep trtexec
LOG_NAME = "convert.log"


@dataclass
class Built:
    tensorrt_version: str
    seconds: float
    log: str | None = None
    argv: list[str] | None = None


class Builder:
    name = ""

    def why_not(self) -> str | None:
        """None when this builder can run here, else the reason it cannot."""
        raise NotImplementedError

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
    """trtexec inside nvcr.io/nvidia/tritonserver:<release>-py3: the plan matches the server by construction."""

    name = "container"

    def __init__(self, image: str):
        self.image = image
        self._version: str | None = None

    def why_not(self):
        if not shutil.which("docker"):
            return "no docker client"
        try:
            info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return "docker engine did not answer"
        if info.returncode != 0:
            return "no reachable docker engine (`docker info` failed)"
        return None

    def tensorrt_version(self):
        if self._version is None:
            argv = container_argv(self.image, Path.cwd(), ["--help"])
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=900)  # may pull the image
            except (OSError, subprocess.TimeoutExpired):
                raise TritonizeError(f"cannot run trtexec in {self.image}") from None

            self._version = parse_banner_version(done.stdout + done.stderr)
            if not self._version:
                raise TritonizeError(f"trtexec in {self.image} did not report its TensorRT version")
        return self._version

    def build(self, job, out, timeout_s):
        version = self.tensorrt_version()
        args = trtexec_argv(job, version)[1:]
        return _run(container_argv(self.image, out, args), job, out, timeout_s, version)


def container_argv(image: str, workdir: Path | str, trtexec_args: list[str], user: str | None = None) -> list[str]:
    """docker run of the image's trtexec on `workdir` (mounted as /work), writing files as `user`."""
    user = user or f"{os.getuid()}:{os.getgid()}"
    return [
        "docker", "run", "--rm", "--gpus", "all", "--user", user,
        "-v", f"{workdir}:/work", "-w", "/work", "--entrypoint", CONTAINER_TRTEXEC, image, *trtexec_args,
    ]


def _run(argv, job, out, timeout_s, version) -> Built:
    run = run_trtexec(argv, out, job, LOG_NAME, timeout_s)
    if run.timed_out:
        raise TritonizeError(f"trtexec timed out after {timeout_s:.0f} s and was stopped; no plan written (log: {run.log})")
    if run.returncode != 0:
        raise TritonizeError(
            f"trtexec failed with exit code {run.returncode}: {log_tail(run.log)}; no plan written (log: {run.log})"
        )
    if not (out / job.plan_file).is_file():
        raise TritonizeError(f"trtexec exited 0 but wrote no engine; see {run.log}")
    return Built(tensorrt_version=version, seconds=run.seconds, log=run.log.name, argv=argv)


def _cuda_device() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class TensorRTApiBuilder(Builder):
    """The same build through the TensorRT Python API."""

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

        major, minor = version_tuple(trt.__version__)
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        if major >= 10:
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        else:
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(out / job.onnx_file)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise TritonizeError(f"TensorRT could not parse {job.onnx_file}: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, job.workspace_mib << 20)
        if major < 10:  # weakly typed: enable what the graph uses, pin its FP32 islands
            if job.precision == "fp16":
                config.set_flag(trt.BuilderFlag.FP16)
                if job.fp32_layers:
                    config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
                    pinned = set(job.fp32_layers)
                    for i in range(network.num_layers):
                        if network.get_layer(i).name in pinned:
                            network.get_layer(i).precision = trt.float32
            elif job.precision == "int8":
                config.set_flag(trt.BuilderFlag.INT8)
        if job.precision == "fp32" and major < 11:
            config.clear_flag(trt.BuilderFlag.TF32)
        if (major, minor) >= (8, 6):
            config.builder_optimization_level = job.opt_level
            if job.version_compatible:
                config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
            if job.hardware_compatibility == "ampere+":
                config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
        profile = builder.create_optimization_profile()
        p = job.profile
        profile.set_shape(job.input_name, *(tuple(int(s) for s in job.shape(p[k]).split("x")) for k in ("min", "opt", "max")))
        config.add_optimization_profile(profile)
        cache_path = out / job.timing_cache
        cache = config.create_timing_cache(cache_path.read_bytes() if cache_path.is_file() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
        start = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        seconds = round(time.perf_counter() - start, 3)
        if serialized is None:
            raise TritonizeError("TensorRT's builder returned no engine (see the TensorRT messages above); no plan written")
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(bytes(serialized))
        with atomic_path(cache_path) as tmp:
            tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
        return Built(tensorrt_version=trt.__version__, seconds=seconds)


class TorchTensorRTBuilder(Builder):
    """torch-tensorrt compiles the TorchScript export with Input(min, opt, max) into a serialized engine."""

    name = "torch-tensorrt"

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

    def tensorrt_version(self):
        import tensorrt as trt

        return trt.__version__

    def build(self, job, out, timeout_s):
        import torch
        import torch_tensorrt

        if job.precision == "int8":
            raise TritonizeError("torch-tensorrt builds fp32/fp16 here; INT8 needs the Q/DQ ONNX: use --builder trtexec, tensorrt or container")
        module = torch.jit.load(str(self.torchscript), map_location="cuda").eval()
        shapes = {k: (job.profile[k], *job.input_shape) for k in ("min", "opt", "max")}
        inputs = [torch_tensorrt.Input(min_shape=shapes["min"], opt_shape=shapes["opt"], max_shape=shapes["max"], dtype=torch.float32)]
        precisions = {torch.float32} | ({torch.float16} if job.precision == "fp16" else set())
        start = time.perf_counter()
        engine = torch_tensorrt.convert_method_to_trt_engine(
            module, "forward", inputs=inputs, enabled_precisions=precisions,
            workspace_size=job.workspace_mib << 20, optimization_level=job.opt_level,
            version_compatible=job.version_compatible,
        )
        seconds = round(time.perf_counter() - start, 3)
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(bytes(engine))
        return Built(tensorrt_version=self.tensorrt_version(), seconds=seconds)


def candidate_builders(image: str, torchscript: Path | None) -> dict[str, Builder]:
    """In `auto` order: the container first (it matches the serving release by construction)."""
    builders = [ContainerBuilder(image), TrtexecBuilder(), TensorRTApiBuilder(), TorchTensorRTBuilder(torchscript)]
    return {b.name: b for b in builders}


def pick_builder(choice: str, builders: dict[str, Builder]) -> tuple[Builder | None, str]:
    """The builder to use and a sentence saying why (or, with None, why nothing can build here)."""
    if choice != "auto":
        builder = builders[choice]
        reason = builder.why_not()
        return (None, f"{choice}: {reason}") if reason else (builder, f"{choice} (asked for)")
    refused = []
    for name, builder in builders.items():
        reason = builder.why_not()
        if reason is None:
            skipped = f" ({'; '.join(refused)})" if refused else ""
            return builder, f"{name}: the first of container, trtexec, tensorrt, torch-tensorrt that can run here{skipped}"
        refused.append(f"{name}: {reason}")
    return None, "; ".join(refused)
