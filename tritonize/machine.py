"""Probes of this machine that several stages need: is a GPU visible, can Docker give containers one,
which CUDA runtime library Polygraphy will load (the first that answers), and what the GPU is.

Cheap and side-effect free: nothing here imports torch or TensorRT, and a probe that cannot tell says
so instead of failing (a build is never refused because its GPU could not be named).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


def compute_threads() -> int:
    """Intra-op threads for onnxruntime's CPU sessions that verify and calibrate in this process: OMP_NUM_THREADS
    where it is set, as torch computes (onnxruntime does not read it, and its idle threads spin on a core another
    process may be using), else 0: onnxruntime's own choice, every core."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else 0


# Where Polygraphy 0.53.6 (polygraphy/cuda/cuda.py, _find_cuda_lib_dirs) looks for libcudart.so* on Linux:
# LD_LIBRARY_PATH, these, then <sys.path>/nvidia/cuda_runtime/lib (the CUDA 12 wheel); it loads the first file it
# finds and never asks whether it works. It never looks in <sys.path>/nvidia/cu13/lib, where the CUDA 13 runtime
# wheel (nvidia-cuda-runtime 13.x, brought by torch and TensorRT for CUDA 13) puts libcudart.so.13.
POLYGRAPHY_SYSTEM_DIRS = ("/usr/local/cuda/lib64", "/usr/lib", "/lib")
DOCKER_PROBE_TIMEOUT_S = 900  # a first `docker run` pulls the image


def gpu_visible(dev: Path = Path("/dev")) -> bool:
    """Whether an NVIDIA GPU is visible to processes started from here (cheap: no CUDA, no torch): the
    driver's /dev/nvidia<N> nodes, or WSL2's /dev/dxg."""
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    if devices is not None and devices.strip() in ("", "-1"):
        return False
    return any(dev.glob("nvidia[0-9]*")) or (dev / "dxg").exists()


def docker_gpu_problem(image: str | None = None) -> str | None:
    """Why Docker cannot give a container the GPU here, or None.

    A Docker engine that lists the `nvidia` runtime can. Without it, `--gpus all` may still work (the
    NVIDIA Container Toolkit's hook, CDI, WSL2): with an `image` to run, a real `docker run --gpus all`
    decides; without one, the missing runtime is the reason.
    """
    if shutil.which("docker") is None:
        return "no `docker` command"
    try:
        result = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"],
                                capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20 s"
    if result.returncode != 0:
        first = (result.stderr or result.stdout).strip().splitlines()[:1] or ["no output"]
        return f"no Docker engine answers (`docker info`: {first[0]})"
    try:
        runtimes = json.loads(result.stdout or "{}") or {}
    except json.JSONDecodeError:
        runtimes = {}
    if "nvidia" in runtimes:
        return None
    if image is None:
        return "the Docker engine lists no NVIDIA runtime (install the NVIDIA Container Toolkit)"
    try:
        probe = subprocess.run(["docker", "run", "--rm", "--gpus", "all", image, "true"], capture_output=True,
                               text=True, timeout=DOCKER_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"`docker run --gpus all {image}` did not finish within {DOCKER_PROBE_TIMEOUT_S} s"
    if probe.returncode != 0:
        last = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"`docker run --gpus all {image}` failed: {last[0]}"
    return None


@dataclass(frozen=True)
class CudaRuntime:
    """Which CUDA runtime library the plan check and the GPU probes use (`find_cudart`)."""

    path: Path | None  # the first one found that answered cudaGetDeviceCount; None: none did
    refused: tuple[str, ...] = ()  # "<library>: <code> (<name>)" for each one found that did not


def cudart_candidates() -> list[Path]:
    """The CUDA runtime libraries here, in the order they are tried: LD_LIBRARY_PATH, the pip wheels
    (nvidia/cu*/lib, newest first, then nvidia/cuda_runtime/lib on sys.path), the system's."""
    dirs = [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            dirs += sorted(nvidia.glob("cu[0-9]*/lib"), reverse=True) + [nvidia / "cuda_runtime" / "lib"]
    dirs += [Path(d) for d in POLYGRAPHY_SYSTEM_DIRS]
    found: dict[Path, Path] = {}
    for directory in dirs:
        libraries = sorted(directory.glob("libcudart.so*")) if directory.is_dir() else []
        if libraries:
            found.setdefault(libraries[0].resolve(), libraries[0])
    return list(found.values())


def _refusal(library: Path) -> str | None:
    """None when the runtime answers cudaGetDeviceCount, else why not: its error code and name (a CUDA 13
    runtime under a driver older than R580 answers 35, cudaErrorInsufficientDriver)."""
    try:
        lib = ctypes.CDLL(str(library))
        count = ctypes.c_int(0)
        status = lib.cudaGetDeviceCount(ctypes.byref(count))
    except (OSError, AttributeError) as e:
        return f"cannot be loaded ({e})"
    if status == 0:
        return None
    name = getattr(lib, "cudaGetErrorName", None)
    if name is not None:
        name.restype = ctypes.c_char_p
        return f"{status} ({(name(status) or b'?').decode(errors='replace')})"
    return str(status)


def find_cudart() -> CudaRuntime:
    """The first CUDA runtime (`cudart_candidates`) that answers cudaGetDeviceCount. A runtime the driver is too
    old for loads fine and then refuses every call, so finding the file is not enough: a venv that still holds the
    CUDA 13 wheel beside the CUDA 12 one must not hide a working GPU."""
    refused = []
    for library in cudart_candidates():
        why = _refusal(library)
        if why is None:
            return CudaRuntime(library, tuple(refused))
        refused.append(f"{library}: {why}")
    return CudaRuntime(None, tuple(refused))


def _no_runtime(found: CudaRuntime) -> str:
    if found.refused:
        return "no CUDA runtime answers cudaGetDeviceCount (" + "; ".join(found.refused) + ")"
    return ("no CUDA runtime library (libcudart.so*) on LD_LIBRARY_PATH, in the nvidia-cuda-runtime wheels or in "
            "/usr/local/cuda/lib64: pip install nvidia-cuda-runtime-cu12")


@contextlib.contextmanager
def _first_on_library_path(directory: Path) -> Iterator[None]:
    old = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(directory), old) if p)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = old


def cuda_runtime():
    """Polygraphy's CUDA wrapper (polygraphy.cuda.wrapper()), loaded from `find_cudart()`'s library: Polygraphy
    searches LD_LIBRARY_PATH first, so that directory goes there for the one moment the wrapper loads
    its library (it keeps it for the life of the process). Raises RuntimeError when no runtime answers."""
    from polygraphy import cuda

    found = find_cudart()
    if found.path is None:
        raise RuntimeError(_no_runtime(found))
    with _first_on_library_path(found.path.parent):
        return cuda.wrapper()


def cuda_gpu() -> dict:
    """The first CUDA GPU as the CUDA runtime reports it: {"name", "compute_capability", "count"}, or
    {"error": why} (no runtime, no driver, no GPU). Never raises."""
    try:
        lib = cuda_runtime().handle
    except RuntimeError as e:  # none found, or none answers (each named with its code)
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - Polygraphy's critical errors, OSError from the loader
        return {"error": f"no CUDA runtime: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"}
    count, value = ctypes.c_int(0), ctypes.c_int(0)
    status = lib.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0 or count.value < 1:
        return {"error": f"no CUDA GPU (cudaGetDeviceCount: error {status}, {count.value} devices)"}
    capability = []
    for attribute in (75, 76):  # cudaDevAttrComputeCapabilityMajor, ...Minor (driver_types.h)
        lib.cudaDeviceGetAttribute(ctypes.byref(value), attribute, 0)
        capability.append(value.value)
    name = None
    properties = ctypes.create_string_buffer(4096)  # cudaDeviceProp begins with char name[256] in every version
    for symbol in ("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"):  # _v2 from CUDA 12
        function = getattr(lib, symbol, None)
        if function is not None and function(properties, 0) == 0:
            name = properties.raw[:256].split(b"\0")[0].decode(errors="replace")
            break
    return {"name": name or "unknown", "compute_capability": f"{capability[0]}.{capability[1]}", "count": count.value}


def nvidia_smi_gpu() -> dict:
    """The first GPU as nvidia-smi names it (when the CUDA runtime cannot), or {"error": why}."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "no nvidia-smi"}
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"nvidia-smi: {e}"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return {"error": f"nvidia-smi exited {done.returncode}"}
    name, _, capability = lines[0].partition(",")
    return {"name": name.strip(), "compute_capability": capability.strip() or "unknown", "count": len(lines)}


def gpu_facts() -> dict:
    """What the manifest records about the GPU a plan was built on: the CUDA runtime's answer, else
    nvidia-smi's, else why neither could tell."""
    facts = cuda_gpu()
    if "error" in facts:
        smi = nvidia_smi_gpu()
        facts = smi if "error" not in smi else {"error": f"{facts['error']}; {smi['error']}"}
    return facts
