"""Python-based `tensorrt` backend: runs a TensorRT plan with the TensorRT runtime on the instance's
GPU. Where TensorRT or a GPU is missing, initialize() fails with a reason that says so: Triton then
reports the model UNAVAILABLE with that reason and keeps serving the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.serve.backends.batching import BatchingModel, Placement


class TritonPythonModel(BatchingModel):
    default_model_filename = "model.plan"

    def require(self) -> None:
        _require_tensorrt_and_gpu()

    def load(self, path: Path, placement: Placement) -> None:
        trt, torch = _require_tensorrt_and_gpu()
        self.torch = torch
        self.device = torch.device(f"cuda:{placement.device_id}")
        torch.cuda.set_device(self.device)
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        # A version-compatible plan embeds its lean runtime (host code), which TensorRT refuses unless
        # allowed (default false; Triton's tensorrt backend: --backend-config=tensorrt,version-compatible=true).
        # Plans in a repository this server serves are the user's own builds.
        runtime.engine_host_code_allowed = True
        self.engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise RuntimeError(f"TensorRT {trt.__version__} could not load {path}: a plan runs only with the "
                               "TensorRT version and GPU it was built for; rebuild it on this machine")
        self.context = self.engine.create_execution_context()
        self.stream = torch.cuda.Stream(self.device)
        engine_tensors = {self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)}
        missing = sorted({t.name for t in self.inputs + self.outputs} - engine_tensors)
        if missing:
            raise RuntimeError(f"config tensors {missing} are not in the plan, which has {sorted(engine_tensors)}")
        self.output_dtypes = {t.name: _torch_dtype(torch, trt.nptype(self.engine.get_tensor_dtype(t.name)))
                              for t in self.outputs}

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        with torch.cuda.stream(self.stream):
            # Keep the device tensors referenced until the stream is synchronized.
            device_inputs = [torch.from_numpy(np.ascontiguousarray(a)).to(self.device) for a in inputs]
            for spec, tensor in zip(self.inputs, device_inputs):
                self.context.set_input_shape(spec.name, tuple(tensor.shape))
                self.context.set_tensor_address(spec.name, tensor.data_ptr())
            device_outputs = []
            for spec in self.outputs:
                shape = tuple(self.context.get_tensor_shape(spec.name))
                tensor = torch.empty(shape, dtype=self.output_dtypes[spec.name], device=self.device)
                self.context.set_tensor_address(spec.name, tensor.data_ptr())
                device_outputs.append(tensor)
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT execution failed (see the server log)")
        self.stream.synchronize()
        return [t.cpu().numpy() for t in device_outputs]


def _require_tensorrt_and_gpu():
    missing = []
    try:
        import tensorrt as trt
    except ImportError:
        trt, missing = None, ["the `tensorrt` Python package is not installed"]
    try:
        import torch

        if not torch.cuda.is_available():
            missing.append("no CUDA GPU is visible")
    except ImportError:
        torch, missing = None, missing + ["torch (used for GPU buffers) is not installed"]
    if missing:
        raise RuntimeError(
            "TensorRT plans need TensorRT and an NVIDIA GPU, but " + " and ".join(missing)
            + "; serve this model on a GPU machine (`tritonize serve --engine docker`)"
        )
    return trt, torch


def _torch_dtype(torch, numpy_dtype) -> "torch.dtype":
    return torch.from_numpy(np.empty(0, dtype=numpy_dtype)).dtype
