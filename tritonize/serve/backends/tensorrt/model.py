"""Python-based `tensorrt` backend: runs a TensorRT plan with the TensorRT runtime on the instance's
GPU. Where TensorRT or a GPU is missing, initialize() fails with a reason that says so: Triton then
reports the model UNAVAILABLE with that reason and keeps serving the others.

Device memory and the stream come from the CUDA runtime through Polygraphy's CUDA layer (`polygraphy.cuda`,
loaded from the CUDA runtime tritonize.machine finds), as the plan check's do: no torch, and one layer
that a CUDA runtime stand-in can stand behind (the tests run this backend on the emulated TensorRT).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from tritonize.serve.backends.batching import BatchingModel, Placement


class TritonPythonModel(BatchingModel):
    default_model_filename = "model.plan"

    def require(self) -> None:
        _require_tensorrt_and_gpu()

    def model_path(self, version_dir: Path, config: dict, placement: Placement) -> Path:
        """As Triton's tensorrt backend picks it (src/model_state.cc): the file `cc_model_filenames` maps the
        instance GPU's compute capability ("major.minor") to, else default_model_filename, else model.plan."""
        plans = config.get("cc_model_filenames") or {}
        cc = _compute_capability(placement.device_id)
        if cc in plans:
            return version_dir / plans[cc]
        default = super().model_path(version_dir, config, placement)
        if plans and not default.is_file():
            raise RuntimeError(f"no plan for this GPU's compute capability {cc} (cc_model_filenames has "
                               f"{', '.join(sorted(plans))}) and no {default.name}: build a plan on this GPU kind "
                               "and gather it with `tritonize repo build --plans DIR`")
        return default

    def load(self, path: Path, placement: Placement) -> None:
        strategy = ((self.config.get("parameters") or {}).get("execution_context_allocation_strategy") or {}).get("string_value")
        if strategy is not None and strategy not in ("STATIC", "ON_PROFILE_CHANGE"):  # as tensorrt_backend refuses it
            raise RuntimeError(f"Invalid value for 'execution_context_allocation_strategy': '{strategy}' for model "
                               f"instance '{self.model_name}'. Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'.")
        from polygraphy import cuda
        from polygraphy.datatype import DataType

        trt = _require_tensorrt_and_gpu()
        if cuda.wrapper().handle.cudaSetDevice(ctypes.c_int(placement.device_id)) != 0:
            raise RuntimeError(f"cannot use CUDA device {placement.device_id} (cudaSetDevice failed)")
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        # A version-compatible plan embeds its lean runtime (host code), which TensorRT refuses unless
        # allowed (default false; Triton's tensorrt backend: --backend-config=tensorrt,version-compatible=true).
        # Plans in a repository this server serves are the user's own builds.
        runtime.engine_host_code_allowed = True
        self.engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise RuntimeError(f"TensorRT {trt.__version__} could not load {path}: a plan runs only with the "
                               "TensorRT version and GPU it was built for; rebuild it on this machine")
        engine_tensors = {self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)}
        missing = sorted({t.name for t in self.inputs + self.outputs} - engine_tensors)
        if missing:
            raise RuntimeError(f"config tensors {missing} are not in the plan, which has {sorted(engine_tensors)}")
        self.stream = cuda.Stream()
        try:
            self.contexts = self._contexts(instance_profiles(self.config, self.instance_name))
        except Exception:  # a profile the plan lacks: no stream outlives the failed load (no finalize() may follow)
            self.finalize()
            raise
        self.context = self.contexts[0][1]
        self.ran: set[tuple[int, int]] = set()
        self.buffers = {t.name: cuda.DeviceArray(dtype=DataType.from_dtype(t.dtype)) for t in self.inputs}
        self.output_dtypes = {t.name: np.dtype(trt.nptype(self.engine.get_tensor_dtype(t.name))) for t in self.outputs}
        for name, dtype in self.output_dtypes.items():
            self.buffers[name] = cuda.DeviceArray(dtype=DataType.from_dtype(dtype))

    def _contexts(self, indices: list[int]) -> list[tuple[int, object, tuple[int, int, int]]]:
        """As Triton's tensorrt backend (src/instance_state.cc InitOptimizationProfiles): one execution context per
        profile of the instance's group, selected with set_optimization_profile_async on the instance's stream
        for every index but 0; with each profile's batch (min, opt, max) of the first input."""
        count, contexts = self.engine.num_optimization_profiles, []
        for index in indices:
            context = self.engine.create_execution_context()
            if index != 0 and not context.set_optimization_profile_async(index, self.stream.ptr):
                raise RuntimeError(f"Can not set the specified optimization profile {index} for {self.instance_name}. "
                                   f"Expected optimization profile index range 0-{count - 1}")
            shapes = self.engine.get_tensor_profile_shape(self.inputs[0].name, index)
            contexts.append((index, context, tuple(int(s[0]) for s in shapes)))
        self.stream.synchronize()
        return contexts

    def _select(self, batch: int):
        """The context whose profile takes `batch` with the opt nearest to it, the lowest index on a tie
        (GetMostOptimizedProfile); the first when none takes it (its set_input_shape then refuses the batch)."""
        taking = [(abs(opt - batch), index, context) for index, context, (lo, opt, hi) in self.contexts if lo <= batch <= hi]
        index, context = min(taking, key=lambda t: t[:2])[1:] if taking else self.contexts[0][:2]
        if (index, batch) not in self.ran:  # said once per profile and batch size: which profile served what
            self.ran.add((index, batch))
            import triton_python_backend_utils as pb_utils

            pb_utils.Logger.log_info(f"{self.instance_name}: batch {batch} runs in optimization profile {index}")
        return context

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self.context = self._select(int(inputs[0].shape[0])) if self.max_batch_size > 0 else self.context
        for spec, array in zip(self.inputs, inputs):
            array = np.ascontiguousarray(array)
            buffer = self.buffers[spec.name].resize(array.shape)
            buffer.copy_from(array, self.stream)
            if not self.context.set_input_shape(spec.name, tuple(array.shape)):
                raise RuntimeError(f"the plan does not take {spec.name} of shape {list(array.shape)} "
                                   "(outside its optimization profile)")
            self.context.set_tensor_address(spec.name, buffer.ptr)
        hosts = []
        for spec in self.outputs:
            host = np.empty(tuple(self.context.get_tensor_shape(spec.name)), dtype=self.output_dtypes[spec.name])
            self.context.set_tensor_address(spec.name, self.buffers[spec.name].resize(host.shape).ptr)
            hosts.append(host)
        if not self.context.execute_async_v3(self.stream.ptr):
            raise RuntimeError("TensorRT execution failed (see the server log)")
        for spec, host in zip(self.outputs, hosts):
            self.buffers[spec.name].copy_to(host, self.stream)
        self.stream.synchronize()
        return hosts

    def finalize(self) -> None:
        for buffer in getattr(self, "buffers", {}).values():
            buffer.free()
        if getattr(self, "stream", None) is not None:
            self.stream.free()
            self.stream = None


def instance_profiles(config: dict, instance_name: str) -> list[int]:
    """The profile indices of the instance's group (instance_group.profile; Triton names an instance after its group,
    `<group>_<n>`), else profile 0; each name read as tensorrt_backend reads it (GetProfileIndex: its leading integer),
    and one that is not an integer fails the load there too."""
    from tritonize.model_repository import profile_index

    for group in config.get("instance_group") or []:
        if group.get("profile") and instance_name.startswith(f"{group.get('name')}_"):
            indices = [profile_index(p) for p in group["profile"]]
            if None in indices:
                raise RuntimeError(f"unable to parse the profile names {group['profile']} of {instance_name}")
            return indices
    return [0]


def _compute_capability(device_id: int) -> str:
    """The compute capability "major.minor" of CUDA device `device_id`, from the CUDA runtime."""
    from polygraphy import cuda

    lib, value, parts = cuda.wrapper().handle, ctypes.c_int(0), []
    for attribute in (75, 76):  # cudaDevAttrComputeCapabilityMajor, ...Minor (driver_types.h)
        if lib.cudaDeviceGetAttribute(ctypes.byref(value), attribute, ctypes.c_int(device_id)) != 0:
            raise RuntimeError(f"cannot read the compute capability of CUDA device {device_id}")
        parts.append(value.value)
    return f"{parts[0]}.{parts[1]}"


def _require_tensorrt_and_gpu():
    """TensorRT's `tensorrt` module, after checking that the CUDA runtime sees a GPU."""
    from tritonize.machine import cuda_gpu

    missing = []
    try:
        import tensorrt as trt
    except ImportError:
        trt, missing = None, ["the `tensorrt` Python package is not installed"]
    gpu = cuda_gpu()  # loads Polygraphy's CUDA wrapper from the CUDA runtime the packages brought
    if "error" in gpu:
        missing.append(gpu["error"])
    if missing:
        raise RuntimeError(
            "TensorRT plans need TensorRT and an NVIDIA GPU, but " + " and ".join(missing)
            + "; serve this model on a GPU machine (`tritonize serve --engine docker`)"
        )
    return trt
