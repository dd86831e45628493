"""Checks of a built plan; they need TensorRT and a CUDA GPU, so they run only on the GPU box.

The engine runs through Polygraphy's TrtRunner (NVIDIA/TensorRT tools/Polygraphy): its loader lets
the runtime deserialize version-compatible plans (`engine_host_code_allowed`), and it copies the
inputs and executes on the one CUDA stream it owns. The verdict is tritonize's own
(`verify_runner`: error relative to the output scale, top-1 agreement, batch invariance).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.verify import Tolerance, VerificationReport, verify_runner


def verify_plan(plan: Path, engine_io: tuple[str, str], inputs: np.ndarray, reference: np.ndarray, tol: Tolerance,
                batches: list[int], described: str) -> VerificationReport:
    """Run the engine on inputs[:b] for each batch b and compare with `reference` (onnxruntime FP32).

    The engine must have exactly the input and output `engine_io`: the names the repository serves.
    """
    try:
        import tensorrt  # noqa: F401  (Polygraphy imports it only when it runs; say so before)
        from polygraphy.backend.trt import EngineFromPath, TrtRunner
    except ImportError as e:
        raise TritonizeError(f"cannot verify the plan: {e.name} is not installed (pip install 'tritonize[gpu]')") from None
    with TrtRunner(EngineFromPath(str(plan))) as runner:
        check_engine_io(list(runner.get_input_metadata()), list(runner.get_output_metadata()), engine_io)
        name_in, name_out = engine_io
        return verify_runner(lambda x: runner.infer({name_in: x})[name_out], inputs, reference, tol,
                             batches=batches, described=described)


def check_engine_io(inputs: list[str], outputs: list[str], expected: tuple[str, str]) -> None:
    """The engine has one input and one output, named as the builder said (and the manifest will record)."""
    if inputs != [expected[0]] or outputs != [expected[1]]:
        raise TritonizeError(
            f"the plan has inputs {inputs} and outputs {outputs}, but its builder names input {expected[0]!r} and "
            f"output {expected[1]!r}; the plan was removed (report this: the builder's engine names are wrong)"
        )


def gpu_facts() -> dict:
    import tensorrt as trt
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}", "tensorrt": trt.__version__}
