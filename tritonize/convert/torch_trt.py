"""The torch-tensorrt builder: its dynamo frontend where the installed torch-tensorrt has it (2.5 and newer),
its TorchScript frontend only for older versions. Both compile the export (not the precision-prepared ONNX)
with one Input(min, opt, max) and return a serialized engine, which is checked like every plan.

The dynamo frontend, `torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine` (pytorch/TensorRT
py/torch_tensorrt/dynamo/_compiler.py; its signature at 2.5.0, 2.9.0 and 2.13.0 is recorded in
tests/data/torch_tensorrt_dynamo_signature.json), compiles torch.export's program (`export --format
exported_program`). Its parameters change between versions, and its **kwargs swallows, without a word, any
keyword a version does not know: so the options are passed only where the installed function names them
(inspect.signature), and what it cannot honour is refused before the build. It honours the optimization
level, the timing cache (timing_cache_path), the workspace, TF32 (disable_tf32), FP16 through
enabled_precisions (2.5 to 2.12: weakly typed, so not for a mixed-precision graph whose FP32 nodes must stay
FP32; 2.13 dropped enabled_precisions and builds the program's FP32 types), and --hardware-compatibility
from 2.9 (hardware_compatible). It refuses --version-compatible: with it, torch-tensorrt also sets
EXCLUDE_LEAN_RUNTIME (conversion/_TRTInterpreter.py), so a later TensorRT runs the plan only through
IRuntime::loadRuntime, which Triton's TensorRT backend never calls (tensorrt_backend src/loader.cc).

The TorchScript frontend (`torch_tensorrt.ts.convert_method_to_trt_engine`, ts/_compiler.py, 1.4 to 2.14; no
**kwargs) takes no optimization level, version or hardware compatibility, or timing cache, and ignores FP16
from 2.13 (TensorRT 11). Its engine names the tensors input_0 / output_0; dynamo's names them after the
program's placeholder and `output{i}` (x / output0). Either way the names recorded are read from the built
engine. The program or module is loaded on the CPU: the converters copy the weights into the engine
themselves (pytorch/TensorRT tests/py/dynamo/runtime/test_000_convert_module_to_trt_engine.py converts a CPU
program), and neither is used again. torch-tensorrt pins torch (torch==X.Y): an export the manifest says was
saved under another torch than this one is refused before the build.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import re
import time
from pathlib import Path

from tritonize.convert.builders import Builder, Built, gpu_problem
from tritonize.convert.layers import read_engine
from tritonize.convert.plan_check import engine_tensors, last_line
from tritonize.convert.trtexec import BuildJob, version_tuple
from tritonize.errors import TritonizeError
from tritonize.files import atomic_path
from tritonize.manifest import Manifest
from tritonize.progress import say

DYNAMO = "convert_exported_program_to_serialized_trt_engine"
ELSEWHERE = "use --builder trtexec, tensorrt or container"


class TorchTensorRTBuilder(Builder):
    name = "torch-tensorrt"
    one_profile = "its Input(min_shape, opt_shape, max_shape) makes one optimization profile"

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self._module = None

    def _torch_tensorrt(self):
        if self._module is None:
            import torch_tensorrt

            self._module = torch_tensorrt
        return self._module

    def dynamo(self):
        """The dynamo frontend's entry point, or None where this torch-tensorrt lacks it (before 2.5)."""
        return getattr(getattr(self._torch_tensorrt(), "dynamo", None), DYNAMO, None)

    def _export(self, key: str):
        """The export `key` from the manifest's verified entries, or None."""
        entry = self.manifest.artifacts.get(key)
        return entry if entry is not None and self.manifest.file_problem(entry) is None else None

    def why_not(self):
        if importlib.util.find_spec("torch_tensorrt") is None:
            return "torch-tensorrt is not installed"
        problem = gpu_problem()
        if problem:
            return problem
        try:
            self._torch_tensorrt()
        except Exception as e:  # noqa: BLE001 - a torch-tensorrt built for another torch or TensorRT fails in many ways
            return f"torch-tensorrt does not import ({type(e).__name__}: {last_line(e)})"
        if self.dynamo() is not None:
            if self._export("exported_program") is None:
                return (f"torch-tensorrt {self.version()} compiles torch.export's program (model.pt2), which is not "
                        f"exported: run `tritonize export --format exported_program --artifacts {self.manifest.directory}`")
        elif self._export("torchscript") is None:
            return "no TorchScript export (model.pt) to compile"
        return None

    def version(self) -> str:
        return str(getattr(self._torch_tensorrt(), "__version__", "?"))

    def refuses(self, job):
        problem = self._other_torch() or super().refuses(job)  # super: a setting its TensorRT lacks (settings.NEEDS)
        if problem:
            return problem
        if self.dynamo() is not None:
            return dynamo_frontend_refuses(job, self.version(), inspect.signature(self.dynamo()).parameters)
        return torchscript_frontend_refuses(job, self.tensorrt_version())

    def _other_torch(self) -> str | None:
        """Why the export cannot be compiled here: it was saved under another torch than this one, which torch-tensorrt
        pins (torch==X.Y), and a program or module of another torch fails to load or convert with no useful message."""
        import torch

        key = "exported_program" if self.dynamo() is not None else "torchscript"
        source = self._export(key)
        saved = source.tools.get("torch") if source is not None else None
        if not saved or _minor(saved) == _minor(torch.__version__):
            return None
        return (f"{source.file} was exported under torch {saved}, and torch-tensorrt {self.version()} runs under torch "
                f"{torch.__version__} here: export it again on this machine (`tritonize export --format {key} "
                f"--artifacts {self.manifest.directory}`)")

    def tensorrt_version(self):
        import tensorrt as trt

        return trt.__version__

    def build(self, job, out, timeout_s):
        import tensorrt as trt

        frontend = "dynamo" if self.dynamo() is not None else "torchscript"
        source = self._export("exported_program" if frontend == "dynamo" else "torchscript")
        say(f"  torch-tensorrt {self.version()}: its {frontend} frontend compiles {source.file}")
        start = time.perf_counter()
        engine = bytes(self._dynamo(job, out, source.file) if frontend == "dynamo" else self._torchscript(job, source.file))
        seconds = round(time.perf_counter() - start, 3)
        with atomic_path(out / job.plan_file) as tmp:
            tmp.write_bytes(engine)
        return Built(tensorrt_version=self.tensorrt_version(), seconds=seconds, engine_io=engine_io(engine, trt),
                     layer_info=read_engine(engine, trt),
                     details={"torch_tensorrt": {"version": self.version(), "frontend": frontend, "source": source.file}})

    def _dynamo(self, job: BuildJob, out: Path, file: str) -> bytes:
        import torch
        import torch_tensorrt

        with open(self.manifest.directory / file, "rb") as f:
            program = torch.export.load(f)
        params = inspect.signature(self.dynamo()).parameters
        options = {"inputs": [_input(job)], "workspace_size": job.settings.workspace_mib << 20, "disable_tf32": not job.tf32,
                   "optimization_level": job.settings.opt_level, "timing_cache_path": str(out / job.settings.timing_cache)}
        if "enabled_precisions" in params:
            options["enabled_precisions"] = {torch.float32} | ({torch.float16} if job.precision == "fp16" else set())
        if "use_explicit_typing" in params:  # strongly typed where it can be (an FP16 build needs the flag instead)
            options["use_explicit_typing"] = job.precision == "fp32"
        if job.settings.hardware_compatibility != "none":  # refused before the build where there is no such parameter
            options["hardware_compatible"] = True
        errors = _LoggedErrors()
        logging.getLogger("torch_tensorrt").addHandler(errors)
        try:
            return torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(program, **options)
        except (UnboundLocalError, RuntimeError) as e:
            # It logs the conversion error, then fails on its unbound interpreter_result (2.5-2.11) or re-raises the
            # error as a RuntimeError (2.12+, _compiler.py): the logged error says why either way.
            said = (errors.messages[-1] if errors.messages else str(e)).strip()
            why = said.splitlines()[0] if said else "it logged no error"
            raise TritonizeError(f"torch-tensorrt {self.version()} could not convert {file}: {why}; no plan written") from None
        finally:
            logging.getLogger("torch_tensorrt").removeHandler(errors)

    def _torchscript(self, job: BuildJob, file: str) -> bytes:
        import torch
        import torch_tensorrt

        module = torch.jit.load(str(self.manifest.directory / file), map_location="cpu").eval()
        precisions = {torch.float32} | ({torch.float16} if job.precision == "fp16" else set())
        return torch_tensorrt.ts.convert_method_to_trt_engine(
            module, "forward", inputs=[_input(job)], enabled_precisions=precisions,
            workspace_size=job.settings.workspace_mib << 20, disable_tf32=not job.tf32,
        )


class _LoggedErrors(logging.Handler):
    """The errors torch-tensorrt logs during one conversion (its own loggers propagate to `torch_tensorrt`)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _minor(version: str) -> tuple[int, ...]:
    """torch's "2.9.1+cu128" -> (2, 9)."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def _input(job: BuildJob):
    import torch
    import torch_tensorrt

    shapes = {k: (job.profile[k], *job.input_shape) for k in ("min", "opt", "max")}
    return torch_tensorrt.Input(min_shape=shapes["min"], opt_shape=shapes["opt"], max_shape=shapes["max"],
                                dtype=torch.float32)


def engine_io(plan: bytes, trt) -> tuple[str, str]:
    """The one input and one output tensor the engine has, read from the engine itself."""
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise TritonizeError(f"TensorRT {trt.__version__} could not load the plan torch-tensorrt built; no plan kept")
    inputs, outputs = engine_tensors(engine, trt)
    if len(inputs) != 1 or len(outputs) != 1:
        raise TritonizeError(f"the plan torch-tensorrt built has inputs {inputs} and outputs {outputs}; tritonize serves "
                             "one input and one output")
    return inputs[0], outputs[0]


INT8 = "INT8 (that needs the Q/DQ ONNX)"


def _islands(job: BuildJob) -> str:
    return (f"the {len(job.fp32_layers)} FP32 nodes of the mixed-precision graph (it would run them in FP16, where "
            "they overflow)")


def dynamo_frontend_refuses(job: BuildJob, version: str, params) -> str | None:
    """What the dynamo frontend of torch-tensorrt `version`, whose entry point has `params`, cannot honour in `job`."""
    cannot = [INT8] if job.precision == "int8" else []
    if job.precision == "fp16" and "enabled_precisions" not in params:
        cannot.append("FP16 (it has no enabled_precisions: it builds the program's FP32 types)")
    elif job.precision == "fp16" and job.fp32_layers:
        cannot.append(_islands(job))
    if job.settings.version_compatible:
        cannot.append("--version-compatible (it excludes the lean runtime from the plan: Triton's TensorRT backend "
                      "could not run it in a later TensorRT)")
    if job.settings.hardware_compatibility != "none" and "hardware_compatible" not in params:
        cannot.append("--hardware-compatibility (hardware_compatible is new in 2.9)")
    if cannot:
        return f"its dynamo frontend (torch-tensorrt {version}) cannot honour {', '.join(cannot)}: {ELSEWHERE}"
    return None


def torchscript_frontend_refuses(job: BuildJob, tensorrt_version: str) -> str | None:
    """What torch-tensorrt's TorchScript frontend cannot honour in `job` (the module's doc)."""
    cannot = [INT8] if job.precision == "int8" else []
    if job.precision == "fp16" and version_tuple(tensorrt_version)[0] >= 11:
        cannot.append(f"FP16 on TensorRT {tensorrt_version} (it would build FP32)")
    elif job.precision == "fp16" and job.fp32_layers:
        cannot.append(_islands(job))
    if job.settings.opt_level != 3:
        cannot.append("--opt-level other than TensorRT's default 3")
    if job.settings.version_compatible:
        cannot.append("--version-compatible")
    if job.settings.hardware_compatibility != "none":
        cannot.append("--hardware-compatibility")
    if cannot:
        return f"its TorchScript frontend cannot honour {', '.join(cannot)}: {ELSEWHERE}"
    return None
