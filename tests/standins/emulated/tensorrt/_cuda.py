"""The emulated TensorRT's view of the CUDA runtime STAND-IN (tests/standins/cudart.c): it asks whether
the addresses it is given are live device memory and streams, and reads and writes that memory (which is
host memory behind the stand-in). The library is the one in $TRITONIZE_EMULATED_CUDART: the same file
Polygraphy's CUDA wrapper loads, so both see one registry."""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache

ENV = "TRITONIZE_EMULATED_CUDART"


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    path = os.environ.get(ENV)
    if not path:
        raise RuntimeError(f"the emulated TensorRT needs the CUDA runtime stand-in: {ENV} is not set")
    lib = ctypes.CDLL(path)
    lib.emu_cuda_is_device_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.emu_cuda_is_stream.argtypes = [ctypes.c_void_p]
    lib.emu_cuda_live.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(ctypes.c_int)]
    lib.emu_cuda_live.restype = ctypes.c_size_t
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.cudaDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    return lib


def is_device_range(ptr: int, nbytes: int) -> bool:
    return bool(ptr) and bool(library().emu_cuda_is_device_range(ptr, nbytes))


def is_stream(stream: int) -> bool:
    return bool(library().emu_cuda_is_stream(stream or None))


def read(ptr: int, nbytes: int) -> bytes:
    return ctypes.string_at(ptr, nbytes)


def write(ptr: int, data: bytes) -> None:
    ctypes.memmove(ptr, data, len(data))


def compute_capability() -> tuple[int, int]:
    lib, value = library(), ctypes.c_int()
    found = []
    for attribute in (75, 76):  # cudaDevAttrComputeCapabilityMajor / Minor
        lib.cudaDeviceGetAttribute(ctypes.byref(value), attribute, 0)
        found.append(value.value)
    return found[0], found[1]


def live() -> tuple[int, int, int, int]:
    """(allocations, bytes, streams, errors) the stand-in holds now."""
    nbytes, streams, errors = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_int()
    count = library().emu_cuda_live(ctypes.byref(nbytes), ctypes.byref(streams), ctypes.byref(errors))
    return count, nbytes.value, streams.value, errors.value


class DeviceBuffer:
    """cudaMalloc'd memory, as trtexec holds it (for the trtexec stand-in's --loadEngine runs)."""

    def __init__(self, nbytes: int):
        self.ptr_holder = ctypes.c_void_p()
        if library().cudaMalloc(ctypes.byref(self.ptr_holder), nbytes) != 0:
            raise MemoryError(f"cudaMalloc({nbytes}) failed")
        self.nbytes = nbytes

    @property
    def ptr(self) -> int:
        return self.ptr_holder.value

    def upload(self, data: bytes) -> None:
        buffer = ctypes.create_string_buffer(data, len(data))
        if library().cudaMemcpy(self.ptr, buffer, len(data), 1) != 0:  # cudaMemcpyHostToDevice
            raise RuntimeError("cudaMemcpy HostToDevice failed")

    def download(self, nbytes: int) -> bytes:
        buffer = ctypes.create_string_buffer(nbytes)
        if library().cudaMemcpy(buffer, self.ptr, nbytes, 2) != 0:  # cudaMemcpyDeviceToHost
            raise RuntimeError("cudaMemcpy DeviceToHost failed")
        return buffer.raw

    def free(self) -> None:
        library().cudaFree(self.ptr)
