"""Runs a built plan where its TensorRT is and compares it with onnxruntime FP32: with this Python's
TensorRT through Polygraphy (`verify_plan`: the plans of the `tensorrt` and `torch-tensorrt` builders), or
with the trtexec that built it, on the host or in the container (`verify_with_trtexec`), which loads the
plan, runs each batch and exports the outputs.

The engine runs through Polygraphy's TrtRunner (NVIDIA/TensorRT tools/Polygraphy 0.53.6): its loader lets
the runtime deserialize version-compatible plans (`engine_host_code_allowed`), and it copies the inputs
and executes on the one CUDA stream it owns. The verdict is tritonize's own (`verify_runner`: error
relative to the output scale, top-1 agreement, batch invariance). Four things Polygraphy 0.53.6 does
that this module works around, each found by running it on the emulated TensorRT (tests/standins/):
- TrtRunner has no output metadata: the engine's own tensor list says what is an input and an output;
- infer() returns views of host buffers it reuses and resizes: verify_runner copies each result;
- EngineFromPath reads through trt.IStreamReader(V2), which 8.6 lacks: the plan's bytes are read here;
- deactivate() leaves the output allocator's device buffers allocated: they are freed here;
- an activate() that fails after making its stream leaves the runner inactive, and deactivate() frees nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonize.convert.trtexec import trtexec_run_argv
from tritonize.errors import TritonizeError
from tritonize.releases import tensorrt_loads, tensorrt_pip
from tritonize.verify import Tolerance, VerificationReport, verify_runner


@dataclass(frozen=True)
class PlanCheck:
    """What a built plan is checked on, and against (onnxruntime on the FP32 ONNX)."""

    inputs: np.ndarray
    reference: np.ndarray
    tolerance: Tolerance
    batches: list[int]
    described: str


def verify_plan(plan: Path, engine_io: tuple[str, str], inputs: np.ndarray, reference: np.ndarray, tol: Tolerance,
                batches: list[int], described: str, built_with: str | None = None,
                version_compatible: bool = False, profile: int = 0) -> VerificationReport:
    """Run the engine in optimization profile `profile` (selected as TrtRunner does: set_optimization_profile_async
    on its stream) on inputs[:b] for each batch b and compare with `reference` (onnxruntime FP32).

    The engine must have exactly the input and output `engine_io`: the names the repository serves.
    `built_with`: the TensorRT that built the plan; refused at once when this Python's cannot load it.
    """
    try:
        import tensorrt as trt
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner
        from polygraphy.exception import PolygraphyException
    except ImportError as e:
        raise TritonizeError(f"cannot verify the plan: {e.name} is not installed (install your target release's TensorRT: "
                             "`tritonize convert releases` prints the pins)") from None
    if built_with and not tensorrt_loads(built_with, trt.__version__, version_compatible):
        pin = tensorrt_pip(built_with)
        remedy = (f"pip install '{pin}' to check it here" if pin else
                  "tritonize knows no pip wheel of that TensorRT: check it with the trtexec or container that built it")
        raise TritonizeError(f"the plan check runs plans with this Python's TensorRT {trt.__version__}, which cannot "
                             f"load a plan of TensorRT {built_with}: {remedy}")
    from tritonize.machine import cuda_runtime

    try:
        cuda_runtime()  # Polygraphy's CUDA wrapper, from the CUDA runtime the Python packages brought
    except RuntimeError as e:
        raise TritonizeError(f"cannot verify the plan: {e}") from None
    runner = TrtRunner(EngineFromBytes(Path(plan).read_bytes()), optimization_profile=profile)
    try:
        runner.activate()
        check_engine_io(*engine_tensors(runner.engine, trt), engine_io)
        name_in, name_out = engine_io
        return verify_runner(lambda x: runner.infer({name_in: x})[name_out], inputs, reference, tol,
                             batches=batches, described=described)
    except PolygraphyException as e:  # raised after Polygraphy logged TensorRT's own error
        raise TritonizeError(f"TensorRT could not run {Path(plan).name}: {last_line(e)} (TensorRT's messages are above)") from None
    finally:
        _deactivate(runner)


def engine_tensors(engine, trt) -> tuple[list[str], list[str]]:
    """The engine's input and output tensor names, from the engine itself."""
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    return ([n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT],
            [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT])


def _deactivate(runner) -> None:
    """End the runner's session and free the output buffers Polygraphy 0.53.6 leaves allocated. An activate() that
    failed part-way (a profile the engine refuses: it is selected after the stream is made) left the runner
    inactive, and deactivate() then frees nothing: its stream is freed here."""
    if not runner.is_active:
        stream = getattr(runner, "stream", None)
        if stream is not None:
            stream.free()
            runner.stream = None
        return
    leftover = list(runner.output_allocator.buffers.values())
    runner.deactivate()
    for buffer in leftover:
        buffer.free()


def last_line(error: Exception) -> str:
    """The last non-empty line of an error's message (where Polygraphy and TensorRT put the cause)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


def check_engine_io(inputs: list[str], outputs: list[str], expected: tuple[str, str]) -> None:
    """The engine has one input and one output, named as the builder said (and the manifest will record)."""
    if inputs != [expected[0]] or outputs != [expected[1]]:
        raise TritonizeError(
            f"the plan has inputs {inputs} and outputs {outputs}, but its builder names input {expected[0]!r} and "
            f"output {expected[1]!r}; the plan was removed (report this: the builder's engine names are wrong)"
        )


def verify_with_trtexec(command: list[str], workdir: Path, plan_file: str, engine_io: tuple[str, str], check: PlanCheck,
                        version_compatible: bool, timeout_s: float, kill: list[str] | None = None,
                        profile: int = 0) -> VerificationReport:
    """The check through trtexec: `command` (the trtexec executable, or a `docker run` of the image's, working
    in `workdir`) loads the plan and runs each batch of the check inputs once (raw input file, JSON output
    file, both in `workdir` and removed after); the comparison is tritonize's, as with Polygraphy."""
    name_in, name_out = engine_io

    def run(batch: np.ndarray) -> np.ndarray:
        tag = uuid.uuid4().hex[:12]
        inputs, outputs = Path(workdir) / f".check-{tag}.bin", Path(workdir) / f".check-{tag}.json"
        try:
            np.ascontiguousarray(batch, dtype=np.float32).tofile(inputs)
            argv = [*command, *trtexec_run_argv(plan_file, name_in, batch.shape, inputs.name, outputs.name,
                                                version_compatible, profile)]
            try:
                done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                if kill:
                    subprocess.run(kill, capture_output=True, timeout=60)
                raise TritonizeError(f"trtexec did not run the plan within {timeout_s:.0f} s") from None
            if done.returncode != 0:
                lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
                errors = [line for line in lines if "error" in line.lower()] or lines
                raise TritonizeError(f"trtexec could not run the plan (exit code {done.returncode}): "
                                     f"{' | '.join(errors[-2:]) or 'no output'}")
            return exported_output(outputs.read_text(), name_out)
        finally:
            inputs.unlink(missing_ok=True)
            outputs.unlink(missing_ok=True)

    return verify_runner(run, check.inputs, check.reference, check.tolerance, batches=check.batches,
                         described=check.described)


# trtexec prints each value with `os << v` (samples/common/sampleUtils.cpp), so NaN and infinity reach the file as
# nan, -nan, inf, -inf: not JSON. Python's json reads NaN, Infinity and -Infinity.
_NON_FINITE = re.compile(r"(?<=[\[,\s])(-?)(nan|inf)(?=[\s,\]])")


def exported_output(text: str, name: str) -> np.ndarray:
    """One output of trtexec's --exportOutput file: a JSON list of {"name", "dimensions": "2x1000",
    "values": [...]} (NVIDIA/TensorRT samples/common/sampleReporting.cpp, exportJSONOutput), NaN and infinity
    included (the comparison then fails on them)."""
    text = _NON_FINITE.sub(lambda m: "NaN" if m[2] == "nan" else f"{m[1]}Infinity", text)
    try:
        tensors = {t["name"]: t for t in json.loads(text)}
        tensor = tensors[name]
        shape = [int(d) for d in str(tensor["dimensions"]).split("x")]
        return np.asarray(tensor["values"], dtype=np.float32).reshape(shape)
    except (ValueError, KeyError, TypeError) as e:
        raise TritonizeError(f"trtexec's exported output has no readable tensor {name!r} ({type(e).__name__}: {e})") from None

