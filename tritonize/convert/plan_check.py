"""Checks of a built plan; they need TensorRT and a CUDA GPU, so they run only on the GPU box."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.convert import precision as prec
from tritonize.convert.trtexec import BuildJob
from tritonize.errors import TritonizeError
from tritonize.spec import ModelSpec
from tritonize.verify import Tolerance, VerificationReport, verification_inputs, verify_runner


def verify_plan(plan: Path, fp32_onnx: Path, spec: ModelSpec, job: BuildJob, tol: Tolerance) -> VerificationReport:
    """Run the engine at batch min, an odd size and max; compare with onnxruntime on the FP32 ONNX."""
    try:
        import tensorrt as trt
        import torch
    except ImportError as e:
        raise TritonizeError(f"cannot verify the plan: {e.name} is not installed (pip install tensorrt torch)") from None
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        raise TritonizeError(f"TensorRT could not deserialize {plan}")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    if len(inputs) != 1 or len(outputs) != 1:
        raise TritonizeError(f"the plan has inputs {inputs} and outputs {outputs}; expected one of each")
    context = engine.create_execution_context()

    def run(batch: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(batch)).cuda()
        context.set_input_shape(inputs[0], tuple(x.shape))
        y = torch.empty(tuple(context.get_tensor_shape(outputs[0])), dtype=torch.float32, device="cuda")
        context.set_tensor_address(inputs[0], x.data_ptr())
        context.set_tensor_address(outputs[0], y.data_ptr())
        stream = torch.cuda.Stream()
        if not context.execute_async_v3(stream.cuda_stream):
            raise TritonizeError("TensorRT execution failed")
        stream.synchronize()
        return y.cpu().numpy()

    pre = spec.preprocessing
    p = job.profile
    data = verification_inputs(spec.input_shape, p["max"], pre.mean, pre.std, seed=0)
    fp32 = prec.ort_session(fp32_onnx)
    reference = prec.run_onnx(fp32, data, spec.input_name, spec.output_name)
    odd = next((b for b in range(p["min"] + 1, p["max"]) if b % 2), p["min"])
    return verify_runner(run, data, reference, tol, batches=sorted({p["min"], odd, p["max"]}))


def gpu_facts() -> dict:
    import tensorrt as trt
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}", "tensorrt": trt.__version__}
