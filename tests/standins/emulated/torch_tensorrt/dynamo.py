"""STAND-IN for `torch_tensorrt.dynamo`: from 2.5, `convert_exported_program_to_serialized_trt_engine` with the
signature of the stand-in's version, as recorded in tests/data/torch_tensorrt_dynamo_signature.json (2.5.0,
2.9.0, 2.13.0; another version from 2.5 has no recorded signature and does not import).

What it enforces, from that file's sources (py/torch_tensorrt/dynamo/_compiler.py, conversion/_TRTInterpreter.py):
- the parameters of that version, bound as Python binds them (a missing or doubled argument is a TypeError);
- **kwargs: the real function takes any keyword and ignores the ones it does not read, so an option spelled
  for another version would silently do nothing. Here such a keyword is a TypeError; the ones it reads keep
  their real meaning (deprecated spellings warn, a true enable_cross_compile_for_windows is a ValueError);
- use_explicit_typing=True with enabled_precisions other than {float32} is an AssertionError;
- a torch.export ExportedProgram and one torch_tensorrt.Input; the engine names its input after the program's
  placeholder (`x`) and its output `output0`;
- the builder config the interpreter writes: version_compatible sets VERSION_COMPATIBLE and EXCLUDE_LEAN_RUNTIME,
  hardware_compatible AMPERE_PLUS, optimization_level, workspace_size, disable_tf32, the FP16 flag from
  enabled_precisions unless explicitly typed, profiling verbosity LAYER_NAMES_ONLY (the layers' precisions
  cannot be read back), network flags by version, and the timing cache read from and saved to timing_cache_path;
- a conversion that fails is logged and then surfaces as the real function's UnboundLocalError (to 2.11), or is
  re-raised as a RuntimeError (from 2.12).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import tempfile
import warnings

import tensorrt as _trt

from torch_tensorrt import DATA, VERSION, __version__, build_engine, one_input

_LOG = logging.getLogger("torch_tensorrt.dynamo._compiler")
_RECORDED = json.loads((DATA / "torch_tensorrt_dynamo_signature.json").read_text())
# The defaults of py/torch_tensorrt/dynamo/_defaults.py (v2.9.0) for the parameters the stand-in reads.
_DEFAULTS = {"disable_tf32": False, "workspace_size": 0, "version_compatible": False, "optimization_level": None,
             "hardware_compatible": False, "use_explicit_typing": False,
             "timing_cache_path": os.path.join(tempfile.gettempdir(), "torch_tensorrt_engine_cache", "timing_cache.bin")}


def _signature(recorded: dict) -> inspect.Signature:
    P = inspect.Parameter
    first, *rest = recorded["positional"]
    params = [P(first, P.POSITIONAL_OR_KEYWORD), *(P(n, P.POSITIONAL_OR_KEYWORD, default=None) for n in rest)]
    params += [P(n, P.KEYWORD_ONLY, default=_DEFAULTS.get(n)) for n in recorded["keyword_only"]]
    return inspect.Signature([*params, P(recorded["var_keyword"], P.VAR_KEYWORD)])


def _kwargs(recorded: dict, extra: dict) -> None:
    for key, value in extra.items():
        if key not in recorded["kwargs_read"]:
            raise TypeError(f"convert_exported_program_to_serialized_trt_engine() got an unexpected keyword argument "
                            f"'{key}' (stand-in: torch-tensorrt {__version__} would take it into **kwargs and ignore it)")
        if key == "enable_cross_compile_for_windows" and value:
            raise ValueError("Please use torch_tensorrt.dynamo.cross_compile_for_windows() if you want to cross compile "
                             "the module in Linux for inferencing in Windows.")
        if key != "enable_cross_compile_for_windows":
            warnings.warn(f"`{key}` is deprecated", DeprecationWarning, stacklevel=3)


def _convert(recorded: dict, args: dict) -> bytes:
    import torch

    _kwargs(recorded, args.pop(recorded["var_keyword"]))
    program = args["exported_program"]
    if not isinstance(program, torch.export.ExportedProgram):
        raise TypeError("stand-in: exported_program must be a torch.export.ExportedProgram")
    if args["inputs"] and args.get("arg_inputs"):
        raise AssertionError("'arg_inputs' and 'inputs' should not be used at the same time.")
    spec = one_input(args["inputs"] or args.get("arg_inputs"), "convert_exported_program_to_serialized_trt_engine")
    typed = "use_explicit_typing" in args
    explicit = bool(args.get("use_explicit_typing"))
    precisions = set(args.get("enabled_precisions") or {torch.float32})
    if explicit and precisions != {torch.float32}:
        raise AssertionError(f"use_explicit_typing was set to True, however found that enabled_precisions was also "
                             f"specified (saw: {precisions}, expected: dtype.f32, dtype.f4). enabled_precisions should "
                             "not be used when use_explicit_typing=True")
    flag = _trt.NetworkDefinitionCreationFlag
    if VERSION < (2, 6):
        flags = 1 << int(flag.EXPLICIT_BATCH)
    elif explicit or not typed:  # from 2.13 there is no use_explicit_typing: always strongly typed
        flags = 1 << int(flag.STRONGLY_TYPED)
    else:
        flags = 0

    def configure(config):
        if args["workspace_size"]:
            config.set_memory_pool_limit(_trt.MemoryPoolType.WORKSPACE, args["workspace_size"])
        config.profiling_verbosity = _trt.ProfilingVerbosity.LAYER_NAMES_ONLY
        if args["version_compatible"]:
            config.set_flag(_trt.BuilderFlag.VERSION_COMPATIBLE)
            config.set_flag(_trt.BuilderFlag.EXCLUDE_LEAN_RUNTIME)
        if args.get("hardware_compatible"):
            config.hardware_compatibility_level = _trt.HardwareCompatibilityLevel.AMPERE_PLUS
        if args["optimization_level"] is not None:
            config.builder_optimization_level = args["optimization_level"]
        if "enabled_precisions" in args and not explicit and torch.float16 in precisions:
            config.set_flag(_trt.BuilderFlag.FP16)
        if args["disable_tf32"]:
            config.clear_flag(_trt.BuilderFlag.TF32)
        cache = args["timing_cache_path"]
        blob = open(cache, "rb").read() if os.path.isfile(cache) else b""
        config.set_timing_cache(config.create_timing_cache(blob), False)
        configured.append(config)

    configured = []
    try:
        if os.environ.get("STANDIN_TORCH_TENSORRT_MODE") == "raise":
            raise RuntimeError("stand-in: Conversion of function torch._ops.aten.stand_in not currently supported!")
        engine = build_engine(_onnx(program), program.graph_signature.user_inputs[0], spec, flags, configure)
        assert engine
        cache = args["timing_cache_path"]  # saved by the interpreter's run(), inside the try below
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache, "wb") as f:
            f.write(memoryview(configured[0].get_timing_cache().serialize()))
    except Exception as e:
        _LOG.error(f"While interpreting the module got an error: {e}")
        if VERSION >= (2, 12):  # re-raised (v2.12.0 _compiler.py:1626, v2.13.0:1558)
            raise RuntimeError(f"While interpreting the module got an error: {e}") from e
        # it carries on to its unbound interpreter_result (v2.9.0 _compiler.py:1330-1343, v2.11.0:1466-1479)
        raise UnboundLocalError("cannot access local variable 'interpreter_result' where it is not associated with a "
                                "value") from None
    return bytes(engine)


def _onnx(program) -> bytes:
    """The program as ONNX (torch's dynamo exporter), tensors named as the real engine names them."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = torch.onnx.export(program, (), dynamo=True, input_names=list(program.graph_signature.user_inputs[:1]),
                                     output_names=["output0"], verbose=False)
    return exported.model_proto.SerializeToString()


def _frontend(recorded: dict):
    signature = _signature(recorded)

    def convert_exported_program_to_serialized_trt_engine(*args, **kwargs) -> bytes:
        bound = signature.bind(*args, **kwargs)  # a TypeError as Python gives for a missing or doubled argument
        bound.apply_defaults()
        return _convert(recorded, dict(bound.arguments))

    convert_exported_program_to_serialized_trt_engine.__signature__ = signature
    return convert_exported_program_to_serialized_trt_engine


if VERSION >= (2, 5):
    _version = next((v for v in _RECORDED["versions"] if tuple(map(int, v.split(".")[:2])) == VERSION), None)
    if _version is None:
        raise ImportError(f"stand-in: no dynamo signature recorded for torch-tensorrt {__version__} (recorded: "
                          f"{', '.join(_RECORDED['versions'])}; tests/data/torch_tensorrt_dynamo_signature.json)")
    convert_exported_program_to_serialized_trt_engine = _frontend(_RECORDED["versions"][_version])
