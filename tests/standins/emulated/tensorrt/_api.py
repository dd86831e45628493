"""The emulated TensorRT API: the classes, enums and functions of the real bindings that tritonize,
Polygraphy 0.53.6 and the stand-ins use, on top of the real inventory of the emulated version.

How a name resolves (module `lookup`, and `_Object` for instances):
- not in this version's inventory: AttributeError, as on the real bindings;
- in the inventory and emulated here: the emulation;
- in the inventory and not emulated: NotImplementedError naming it (a test that meets one has found
  code that reaches past what the emulation covers: emulate it, from the documentation).
Enums and dtype constants are data: every one the inventory lists is emulated, with its real values.

Behaviour follows tests/data/tensorrt_emulation_rules.json (through tests/emulation/rules.py). Errors
go to the ILogger given to the Builder/Runtime, and the call returns None/False, as TensorRT's do.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

from tests.emulation import rules

from . import _cuda, _plan

ENV = "TRITONIZE_EMULATED_TENSORRT"
VERSION = os.environ[ENV]
MAJOR = rules.parts(VERSION)[0]
INVENTORY_DIR = rules.DATA.parent / "tensorrt_api"


def _load_inventory() -> dict:
    files = {json.loads(p.read_text())["version"]: p for p in INVENTORY_DIR.glob("*.json")}
    chosen = rules.inventory_versions(VERSION, list(files))
    if not chosen:
        raise ImportError(f"TensorRT {VERSION} is not emulated: no bindings inventory of its major in {INVENTORY_DIR} "
                          f"(have {', '.join(sorted(files))})")
    parts = [json.loads(files[v].read_text()) for v in chosen]
    merged = {"versions": chosen, "classes": {}, "enums": {}, "constants": set(), "functions": set()}
    first = parts[0]
    for name, members in first["classes"].items():
        if all(name in p["classes"] for p in parts):
            merged["classes"][name] = {m: k for m, k in members.items() if all(m in p["classes"][name] for p in parts)}
    for name, members in first["enums"].items():
        if all(name in p["enums"] for p in parts):
            merged["enums"][name] = {m: v for m, v in members.items() if all(m in p["enums"][name] for p in parts)}
    merged["constants"] = set.intersection(*(set(p["constants"]) for p in parts))
    merged["functions"] = set.intersection(*(set(p["functions"]) for p in parts))
    return merged


INVENTORY = _load_inventory()


def names() -> list[str]:
    return sorted({"__version__", *INVENTORY["classes"], *INVENTORY["enums"], *INVENTORY["constants"],
                   *INVENTORY["functions"]})


def _not_emulated(what: str) -> NotImplementedError:
    return NotImplementedError(f"emulated TensorRT {VERSION}: {what} exists in the real bindings but is not emulated "
                               "(tests/standins/emulated/tensorrt)")


# ---------------------------------------------------------------------------------------- enums


class _Enum:
    """A pybind11 enum: members are instances of their enum class, with .name, int() and __members__."""

    __members__: dict = {}

    def __new__(cls, value):
        for member in cls.__members__.values():
            if member.value == int(value):
                return member
        raise ValueError(f"{value} is not a valid {cls.__name__}")

    def __int__(self):
        return self.value

    __index__ = __int__

    def __repr__(self):
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self):
        return type(self), (self.value,)


def _make_enum(name: str, members: dict) -> type:
    cls = type(name, (_Enum,), {"__module__": "tensorrt"})
    cls.__members__ = {}
    for member, value in sorted(members.items(), key=lambda kv: kv[1]):
        instance = object.__new__(cls)
        instance.name, instance.value = member, value
        setattr(cls, member, instance)
        cls.__members__[member] = instance
    return cls


ENUMS = {name: _make_enum(name, members) for name, members in INVENTORY["enums"].items()}
DataType = ENUMS["DataType"]
TensorIOMode = ENUMS["TensorIOMode"]
LayerInformationFormat = ENUMS["LayerInformationFormat"]
TensorFormat = ENUMS["TensorFormat"]
LayerType = ENUMS["LayerType"]
BuilderFlag = ENUMS["BuilderFlag"]
NetworkDefinitionCreationFlag = ENUMS["NetworkDefinitionCreationFlag"]
HardwareCompatibilityLevel = ENUMS["HardwareCompatibilityLevel"]
Severity = _make_enum("Severity", {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4})

# trt.float32 and friends are the DataType members (tensorrt/__init__.py of the real package)
CONSTANT_DTYPES = {"float32": "FLOAT", "float16": "HALF", "int32": "INT32", "int8": "INT8", "int64": "INT64",
                   "uint8": "UINT8", "bool": "BOOL", "bfloat16": "BF16", "fp8": "FP8", "int4": "INT4", "fp4": "FP4",
                   "e8m0": "E8M0"}
NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT8": np.int8, "INT64": np.int64,
         "UINT8": np.uint8, "BOOL": np.bool_}
ONNX_DTYPES = {1: "FLOAT", 10: "HALF", 6: "INT32", 7: "INT64", 3: "INT8", 2: "UINT8", 9: "BOOL"}


def nptype(dtype):
    try:
        return NUMPY[dtype.name]
    except (KeyError, AttributeError):
        raise TypeError(f"emulated TensorRT: no numpy type for {dtype}") from None


def volume(shape) -> int:
    return int(np.prod(list(shape), dtype=np.int64))


def init_libnvinfer_plugins(logger, namespace) -> bool:
    return True


# ------------------------------------------------------------------------------- gated objects


def _members(cls) -> dict:
    return INVENTORY["classes"].get(cls._trt_name, {})


class _Object:
    """An object of the real bindings: its public attributes are gated by the inventory (module doc)."""

    _trt_name = ""

    def __getattribute__(self, name):
        if name.startswith("_"):
            return object.__getattribute__(self, name)
        cls = type(self)
        if name not in _members(cls):
            raise AttributeError(f"'tensorrt.{cls._trt_name}' object has no attribute '{name}' (TensorRT {VERSION})")
        try:
            return object.__getattribute__(self, name)
        except AttributeError:
            raise _not_emulated(f"{cls._trt_name}.{name}") from None

    def __setattr__(self, name, value):
        if name.startswith("_"):
            return object.__setattr__(self, name, value)
        cls = type(self)
        kind = _members(cls).get(name)
        if kind is None:
            raise AttributeError(f"'tensorrt.{cls._trt_name}' object has no attribute '{name}' (TensorRT {VERSION})")
        if kind != "property+w":
            raise AttributeError(f"property '{name}' of 'tensorrt.{cls._trt_name}' is read-only in TensorRT {VERSION}")
        prop = getattr(cls, name, None)
        if not isinstance(prop, property) or prop.fset is None:
            raise _not_emulated(f"setting {cls._trt_name}.{name}")
        prop.fset(self, value)

    def __enter__(self):  # the bindings' common_enter: context managers are deprecated and do nothing
        return self

    def __exit__(self, *exc):
        return False


def _log(logger, severity, message: str) -> None:
    if logger is not None:
        logger.log(severity, message)
    else:
        print(f"[emulated TensorRT {VERSION}] {message}", file=sys.stderr)


def _error(logger, message: str) -> None:
    _log(logger, Severity.ERROR, message)


class Dims(tuple):
    """trt.Dims: the real one also iterates, indexes and compares with tuples."""


# ------------------------------------------------------------------------------ interfaces
# Classes that user code subclasses (pybind11 trampolines): plain classes, members not gated.


class ILogger:
    Severity = Severity
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = (Severity.INTERNAL_ERROR, Severity.ERROR, Severity.WARNING,
                                                     Severity.INFO, Severity.VERBOSE)

    def __init__(self):
        pass

    def log(self, severity, msg):
        raise NotImplementedError


class Logger(ILogger):
    def __init__(self, min_severity=Severity.WARNING):
        super().__init__()
        self.min_severity = min_severity

    def log(self, severity, msg):
        if int(severity) <= int(self.min_severity):
            print(f"[emulated TensorRT {VERSION}] [{severity.name}] {msg}", file=sys.stderr)


class IOutputAllocator:
    """Execution asks the allocator for output memory, then tells it the shape (rules.output_allocator_calls)."""

    def __init__(self):
        pass

    if MAJOR >= 10:
        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):
            # IOutputAllocator::reallocateOutputAsync's default implementation (NvInferRuntime.h, 10.x/11.x)
            return self.reallocate_output(tensor_name, memory, size, alignment)


class IDebugListener:
    def __init__(self):
        pass


class IStreamReader:
    def __init__(self):
        pass


class IStreamReaderV2:
    def __init__(self):
        pass


class IProgressMonitor:
    def __init__(self):
        pass


# ---------------------------------------------------------------------------------- memory


class IHostMemory(bytes, _Object):
    """Serialized data (a plan, a timing cache): bytes-like, as the real one exposes the buffer protocol."""

    _trt_name = "IHostMemory"

    @property
    def nbytes(self):
        return len(self)

    @property
    def dtype(self):
        return DataType.UINT8 if hasattr(DataType, "UINT8") else DataType.INT8


# ------------------------------------------------------------------------------- the network


class ITensor(_Object):
    _trt_name = "ITensor"

    def __init__(self, name: str, dtype, shape, is_input: bool):
        self._name, self._dtype, self._shape, self._input = name, dtype, Dims(shape), is_input

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: self._shape)
    is_shape_tensor = property(lambda self: False)
    is_execution_tensor = property(lambda self: True)
    is_network_input = property(lambda self: self._input)
    is_network_output = property(lambda self: not self._input)


LAYER_TYPES = {"Conv": "CONVOLUTION", "ConvTranspose": "DECONVOLUTION", "Relu": "ACTIVATION", "Sigmoid": "ACTIVATION",
               "Clip": "ACTIVATION", "Add": "ELEMENTWISE", "Sub": "ELEMENTWISE", "Mul": "ELEMENTWISE", "Div": "ELEMENTWISE",
               "MaxPool": "POOLING", "AveragePool": "POOLING", "GlobalAveragePool": "REDUCE", "ReduceMean": "REDUCE",
               "Reshape": "SHUFFLE", "Flatten": "SHUFFLE", "Transpose": "SHUFFLE", "Gemm": "MATRIX_MULTIPLY",
               "MatMul": "MATRIX_MULTIPLY", "QuantizeLinear": "QUANTIZE", "DequantizeLinear": "DEQUANTIZE",
               "Cast": "CAST", "Shape": "SHAPE", "Constant": "CONSTANT", "Concat": "CONCATENATION",
               "Softmax": "SOFTMAX", "Identity": "IDENTITY", "BatchNormalization": "SCALE"}


class ILayer(_Object):
    """One layer per ONNX node, named as the ONNX parser names it (the node's name, else node_of_<output>)."""

    _trt_name = "ILayer"

    def __init__(self, network, node, index: int):
        self._network = network
        self._name = node.name or f"node_of_{node.output[0] if node.output else index}"
        kind = LAYER_TYPES.get(node.op_type, "ELEMENTWISE")
        self._type = getattr(LayerType, kind, None) or LayerType.ELEMENTWISE
        self._precision = None

    name = property(lambda self: self._name)
    type = property(lambda self: self._type)
    precision_is_set = property(lambda self: self._precision is not None)

    @property
    def precision(self):
        return self._precision or DataType.FLOAT

    @precision.setter
    def precision(self, value):
        if self._network._strongly_typed:
            _error(self._network._logger, f"ILayer::setPrecision: Error Code 3: API Usage Error ({self._name}: setting layer "
                   "precision is not allowed in a strongly typed network)")
            return
        self._precision = value

    def reset_precision(self):
        self._precision = None


class INetworkDefinition(_Object):
    _trt_name = "INetworkDefinition"

    def __init__(self, builder, flags: int):
        self._builder, self._flags, self._logger = builder, flags, builder._logger
        strongly = getattr(NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        self._strongly_typed = rules.always_strongly_typed(VERSION) or (
            strongly is not None and bool(flags & (1 << int(strongly))))
        self._inputs: list[ITensor] = []
        self._outputs: list[ITensor] = []
        self._layers: list[ILayer] = []
        self._onnx: bytes | None = None
        self._name = "emulated network"

    num_inputs = property(lambda self: len(self._inputs))
    num_outputs = property(lambda self: len(self._outputs))
    num_layers = property(lambda self: len(self._layers))
    builder = property(lambda self: self._builder)
    flags = property(lambda self: self._flags)
    name = property(lambda self: self._name)

    def get_input(self, index):
        return self._inputs[index]

    def get_output(self, index):
        return self._outputs[index]

    def get_layer(self, index):
        return self._layers[index]

    def get_flag(self, flag) -> bool:
        return bool(self._flags & (1 << int(flag)))

    def __iter__(self):  # `for layer in network`, as the bindings allow
        return iter(list(self._layers))

    def __len__(self):
        return len(self._layers)

    def __getitem__(self, index):
        return self._layers[index]


class IParserError:
    def __init__(self, desc: str):
        self._desc = desc

    def desc(self):
        return self._desc

    def __str__(self):
        return f"In node -1 (parseGraph): {self._desc}"


REDUCE_AXES_IGNORED = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")


class OnnxParser(_Object):
    """Reads an ONNX model into a network: tensors and layers from the graph, and the model itself, which
    the plan carries for onnxruntime to execute."""

    _trt_name = "OnnxParser"

    def __init__(self, network, logger):
        self._network, self._logger, self._errors, self._flags = network, logger, [], 0

    num_errors = property(lambda self: len(self._errors))

    @property
    def flags(self):
        return self._flags

    @flags.setter
    def flags(self, value):
        self._flags = int(value)

    def clear_flag(self, flag):
        self._flags &= ~(1 << int(flag))

    def set_flag(self, flag):
        self._flags |= 1 << int(flag)

    def get_flag(self, flag):
        return bool(self._flags & (1 << int(flag)))

    def get_error(self, index):
        return self._errors[index]

    def clear_errors(self):
        self._errors.clear()

    def set_builder_config(self, config) -> bool:
        return True

    def parse_from_file(self, path: str) -> bool:
        import onnx

        try:
            model = onnx.load(str(path))
        except Exception as e:  # noqa: BLE001 - the parser reports, it does not raise
            self._errors.append(IParserError(f"Failed to parse ONNX model from file {path}: {e}"))
            return False
        return self._import(model)

    def parse(self, model: bytes, path: str | None = None) -> bool:
        import onnx

        try:
            return self._import(onnx.load_from_string(bytes(model)))
        except Exception as e:  # noqa: BLE001
            self._errors.append(IParserError(f"Failed to parse ONNX model: {e}"))
            return False

    def _import(self, model) -> bool:
        network = self._network
        explicit = getattr(NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
        if rules.needs_explicit_batch(VERSION) and not (explicit is not None and network._flags & (1 << int(explicit))):
            self._errors.append(IParserError("the ONNX parser only supports networks created with the EXPLICIT_BATCH flag"))
            return False
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        limit = rules.max_onnx_opset(VERSION)
        if limit is not None and opset > limit:
            _log(self._logger, Severity.WARNING, f"ONNX opset {opset} is newer than this parser supports ({limit})")
            if limit < 18:
                self._drop_reduce_axes_inputs(model)
        graph = model.graph
        weights = {i.name for i in graph.initializer}
        for value, is_input in [(v, True) for v in graph.input if v.name not in weights] + [(v, False) for v in graph.output]:
            tensor_type = value.type.tensor_type
            dtype_name = ONNX_DTYPES.get(tensor_type.elem_type)
            if dtype_name is None or not hasattr(DataType, dtype_name):
                self._errors.append(IParserError(f"tensor {value.name}: ONNX type {tensor_type.elem_type} is not supported"))
                return False
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
            tensor = ITensor(value.name, getattr(DataType, dtype_name), shape, is_input)
            (network._inputs if is_input else network._outputs).append(tensor)
        network._layers = [ILayer(network, node, i) for i, node in enumerate(graph.node)]
        network._onnx = model.SerializeToString()
        return True

    def _drop_reduce_axes_inputs(self, model) -> None:
        """TensorRT 8.6's importers of these ops read only their first input (onnx-tensorrt 8.6-GA
        builtin_op_importers.cpp:3681-3696, onnx2trt_utils.cpp:1599-1620): opset 18's `axes` input is
        ignored and they reduce over every axis."""
        for node in model.graph.node:
            if node.op_type in REDUCE_AXES_IGNORED and len(node.input) > 1:
                _log(self._logger, Severity.VERBOSE, f"{node.name}: axes input ignored, reducing over every axis")
                del node.input[1:]


# ------------------------------------------------------------------------------ build config


class IOptimizationProfile(_Object):
    _trt_name = "IOptimizationProfile"

    def __init__(self, logger):
        self._logger, self._shapes = logger, {}

    def set_shape(self, input, min, opt, max) -> bool:
        shapes = [tuple(int(d) for d in s) for s in (min, opt, max)]
        if len({len(s) for s in shapes}) != 1 or not all(a <= b <= c for a, b, c in zip(*shapes)):
            _error(self._logger, f"IOptimizationProfile::setDimensions: {input}: need min <= opt <= max of one rank, got {shapes}")
            return False
        self._shapes[input] = shapes
        return True

    def get_shape(self, input):
        return [Dims(s) for s in self._shapes.get(input, [(), (), ()])]


class ITimingCache(_Object):
    """A timing cache holds entries of one TensorRT version and one GPU (NvInfer.h, ITimingCache::combine,
    IBuilderConfig::setTimingCache)."""

    _trt_name = "ITimingCache"

    def __init__(self, version: str, cc: list[int], entries: dict):
        self._version, self._cc, self._entries = version, list(cc), dict(entries)

    def serialize(self):
        return IHostMemory(json.dumps({"emulated_timing_cache": True, "tensorrt": self._version,
                                       "compute_capability": self._cc, "entries": self._entries}).encode())

    def combine(self, input_cache, ignore_mismatch: bool) -> bool:
        if input_cache._version != self._version:
            return False  # "must be generated by a TensorRT build of exact same version, otherwise combine will be skipped"
        if input_cache._cc != self._cc and not ignore_mismatch:
            return False
        for key, value in input_cache._entries.items():
            self._entries.setdefault(key, value)
        return True

    def reset(self) -> bool:
        self._entries.clear()
        return True


def _device_cc() -> list[int]:
    return list(_cuda.compute_capability())


class IBuilderConfig(_Object):
    _trt_name = "IBuilderConfig"

    def __init__(self, builder):
        self._builder, self._logger = builder, builder._logger
        self._flags = 1 << int(BuilderFlag.TF32)  # "kTF32 ... Enabled by default" (NvInfer.h BuilderFlag)
        self._pools = {}
        self._profiles: list[IOptimizationProfile] = []
        self._cache: ITimingCache | None = None
        self._opt_level = 3
        self._hw_level = HardwareCompatibilityLevel.NONE
        self._profiling = ENUMS["ProfilingVerbosity"].__members__.get("LAYER_NAMES_ONLY")
        capability = ENUMS["EngineCapability"]
        self._capability = getattr(capability, "STANDARD", None) or list(capability.__members__.values())[0]
        self._tactic_sources = sum(1 << int(v) for v in ENUMS["TacticSource"].__members__.values())
        self._dla_core = -1
        self._device = ENUMS["DeviceType"].GPU

    def set_flag(self, flag):
        self._flags |= 1 << int(flag)

    def clear_flag(self, flag):
        self._flags &= ~(1 << int(flag))

    def get_flag(self, flag) -> bool:
        return bool(self._flags & (1 << int(flag)))

    @property
    def flags(self):
        return self._flags

    @flags.setter
    def flags(self, value):
        self._flags = int(value)

    def set_memory_pool_limit(self, pool, size):
        self._pools[int(pool)] = int(size)

    def get_memory_pool_limit(self, pool):
        return self._pools.get(int(pool), 1 << 40)  # unset: the device's memory

    def add_optimization_profile(self, profile) -> int:
        self._profiles.append(profile)
        return len(self._profiles) - 1

    num_optimization_profiles = property(lambda self: len(self._profiles))

    def get_preview_feature(self, feature) -> bool:
        return False

    def set_preview_feature(self, feature, enable) -> None:
        pass

    def get_quantization_flag(self, flag) -> bool:
        return False

    def get_tactic_sources(self) -> int:
        return self._tactic_sources

    def set_tactic_sources(self, sources) -> bool:
        self._tactic_sources = int(sources)
        return True

    int8_calibrator = property(lambda self: None)

    @property
    def profiling_verbosity(self):
        return self._profiling

    @profiling_verbosity.setter
    def profiling_verbosity(self, value):
        self._profiling = value

    @property
    def engine_capability(self):
        return self._capability

    @engine_capability.setter
    def engine_capability(self, value):
        self._capability = value

    @property
    def builder_optimization_level(self):
        return self._opt_level

    @builder_optimization_level.setter
    def builder_optimization_level(self, value):
        self._opt_level = int(value)

    @property
    def hardware_compatibility_level(self):
        return self._hw_level

    @hardware_compatibility_level.setter
    def hardware_compatibility_level(self, value):
        self._hw_level = value

    @property
    def DLA_core(self):
        return self._dla_core

    @property
    def default_device_type(self):
        return self._device

    def create_timing_cache(self, serialized) -> ITimingCache | None:
        blob = bytes(serialized)
        if not blob:
            return ITimingCache(VERSION, _device_cc(), {})
        try:
            data = json.loads(blob)
            assert data["emulated_timing_cache"]
            return ITimingCache(data["tensorrt"], data["compute_capability"], data["entries"])
        except (ValueError, KeyError, AssertionError, TypeError):
            _error(self._logger, "IBuilderConfig::createTimingCache: the data is not a timing cache")
            return None

    def set_timing_cache(self, cache, ignore_mismatch: bool) -> bool:
        if cache._version != VERSION:
            _error(self._logger, f"IBuilderConfig::setTimingCache: the cache is of TensorRT {cache._version}, this is {VERSION}")
            return False
        if cache._cc != _device_cc() and not ignore_mismatch:
            _error(self._logger, "IBuilderConfig::setTimingCache: the cache was made on a GPU with other device "
                                 "properties (ignoreMismatch is false)")
            return False
        self._cache = cache
        return True

    def get_timing_cache(self):
        return self._cache


# ----------------------------------------------------------------------------------- builder


def _member_name(enum, value) -> str:
    """The canonical name of an enum value (8.6's ProfilingVerbosity has aliases: DEFAULT = LAYER_NAMES_ONLY)."""
    names = [n for n, m in enum.__members__.items() if int(m) == int(value)]
    return next((n for n in ("LAYER_NAMES_ONLY", "DETAILED", "NONE") if n in names), names[0])


def _built_layers(network, flags: set[str]) -> list[dict]:
    """Each layer of the built engine and the precision it runs in (rules.layer_precision), with its
    input and output tensors as the engine inspector names them."""
    import onnx

    model = onnx.load_from_string(network._onnx)
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    weights = {i.name for i in model.graph.initializer}
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    fp32 = {n.strip() for n in os.environ.get("STANDIN_TRT_FP32_KERNELS", "").split(",") if n.strip()}
    layers, precision_of = [], {t.name: t.dtype.name for t in network._inputs}
    for layer, node in zip(network._layers, model.graph.node):
        inputs = [i for i in node.input if i and i not in weights]
        precision = rules.layer_precision(
            node.op_type, ONNX_DTYPES.get(types.get(node.output[0], 1), "FLOAT"), network._strongly_typed, flags,
            layer._precision.name if layer._precision is not None else None,
            any(producers.get(i) == "DequantizeLinear" for i in node.input), "*" in fp32 or layer._name in fp32)
        for name in node.output:
            precision_of[name] = precision
        layers.append({"name": layer._name, "type": layer._type.name, "precision": precision,
                       "inputs": [[i, precision_of.get(i, "FLOAT")] for i in inputs], "outputs": list(node.output)})
    return layers


def _engine_layers(records: list[dict], io: dict[str, str], profiles: int) -> list[dict]:
    """The built engine's layers as the inspector lists them (rules 'inspector'), from the network's layers
    (`_built_layers`): fused, with the reformats TensorRT inserts, once per profile on 8.x. Each layer: name, type
    (the inspector's LayerType), precision (what it computes in), inputs and outputs as [tensor, precision]."""
    inspector = rules.inspector()
    kind = lambda record: inspector["layer_types"].get(record["type"], record["type"].title().replace("_", ""))  # noqa: E731
    readers: dict[str, int] = {}
    for record in records:
        for name, _ in record["inputs"]:
            readers[name] = readers.get(name, 0) + 1
    producer = {o: r for r in records for o in r["outputs"]}
    position = {r["name"]: i for i, r in enumerate(records)}
    quantizing = ("QUANTIZE", "DEQUANTIZE")
    # A DequantizeLinear is fused into each layer that reads it, but for one that a Q/DQ or the engine's output reads.
    fused_dq = {r["name"] for r in records if r["type"] == "DEQUANTIZE" and r["outputs"][0] not in io
                and not any(o["type"] in quantizing for o in records if any(n == r["outputs"][0] for n, _ in o["inputs"]))}
    chains, absorbed = {}, set(fused_dq)
    for record in records:
        if record["type"] not in ("CONVOLUTION", "MATRIX_MULTIPLY"):
            continue
        chain, tensor = [], record["outputs"][0]
        while readers.get(tensor) == 1 and tensor not in io:
            follower = next(r for r in records if any(n == tensor for n, _ in r["inputs"]))
            later = [n for n, _ in follower["inputs"] if n in producer and position[producer[n]["name"]] > position[record["name"]]
                     and n != tensor and producer[n] not in chain]
            if follower["type"] not in ("ELEMENTWISE", "ACTIVATION", *quantizing) or later:  # an add joins its later conv
                break
            chain.append(follower)
            tensor = follower["outputs"][0]
        while chain and chain[-1]["type"] == "DEQUANTIZE":  # a last DequantizeLinear goes with its readers
            chain.pop()
        chains[record["name"]] = chain
        absorbed.update(r["name"] for r in chain)
    fused = []
    for record in records:
        if record["name"] in absorbed:
            continue
        members = [record, *chains.get(record["name"], [])]
        written_inside = {o for r in members for o in r["outputs"]}
        names, inputs = [], []
        for member in members:
            for name, precision in member["inputs"]:
                dq = producer.get(name)
                if name in written_inside:
                    continue
                if dq is not None and dq["name"] in fused_dq:
                    names += [dq["name"]] if member is record else []
                    inputs += dq["inputs"]
                else:
                    inputs.append([name, precision])
        first = record["inputs"][0][0] if record["inputs"] else None
        through_dq = first in producer and producer[first]["name"] in fused_dq and producer[first]["inputs"]
        last = members[-1]
        fused.append({"name": " + ".join(names + [r["name"] for r in members]), "type": kind(record),
                      "precision": "INT8" if through_dq else record["precision"], "inputs": inputs,
                      "outputs": [[o, last["precision"]] for o in last["outputs"]]})
    written, layers = dict(io), []
    for layer in fused:
        if layer["type"] not in ("Reformat", "Constant"):
            for i, (name, _) in enumerate(layer["inputs"]):
                have = written.get(name, layer["precision"])
                want = layer["precision"] if i == 0 or layer["precision"] != "INT8" else have
                if have != want:
                    copy = f"Reformatted Input Tensor {i} to {layer['name']}"
                    layers.append({"name": f"Reformatting CopyNode for Input Tensor {i} to {layer['name']}", "type": "Reformat",
                                   "precision": have, "inputs": [[name, have]], "outputs": [[copy, want]]})
                    name = copy
                layer["inputs"][i] = [name, want]
        layers.append(layer)
        for name, precision in layer["outputs"]:
            if name in io and io[name] != precision:
                copy = f"Reformatted Output Tensor 0 to {layer['name']}"
                layer["outputs"] = [[copy if n == name else n, p] for n, p in layer["outputs"]]
                layers.append({"name": f"Reformatting CopyNode for Output Tensor 0 to {layer['name']}", "type": "Reformat",
                               "precision": precision, "inputs": [[copy, precision]], "outputs": [[name, io[name]]]})
            written[name] = precision
    if MAJOR >= 10 or profiles < 2:
        return layers
    suffixed = lambda tensors, n: [[f"{t} [profile {n}]", p] for t, p in tensors]  # noqa: E731
    return layers + [{**layer, "name": f"{layer['name']} [profile {n}]", "inputs": suffixed(layer["inputs"], n),
                      "outputs": suffixed(layer["outputs"], n)} for n in range(1, profiles) for layer in layers]


def _flag_names(flags: int) -> set[str]:
    return {name for name, member in BuilderFlag.__members__.items() if flags & (1 << int(member))}


class Builder(_Object):
    _trt_name = "Builder"

    def __init__(self, logger):
        self._logger = logger

    logger = property(lambda self: self._logger)

    def create_network(self, flags=0):
        return INetworkDefinition(self, int(flags))

    def create_builder_config(self):
        return IBuilderConfig(self)

    def create_optimization_profile(self):
        return IOptimizationProfile(self._logger)

    def build_serialized_network(self, network, config):
        try:
            return self._build(network, config)
        except _BuildError as e:
            _error(self._logger, f"Builder::buildSerializedNetwork: Error Code 4: {e}")
            return None

    def _build(self, network, config):
        if network._onnx is None:
            raise _BuildError("the network is empty (nothing was parsed into it)")
        flags = _flag_names(config._flags)
        problem = rules.precision_flag_problem(network._strongly_typed, flags)
        if problem:
            raise _BuildError(problem)
        profiles = []
        for index, profile in enumerate(config._profiles):
            shapes = {}
            for tensor in network._inputs:
                if tensor.name not in profile._shapes:
                    raise _BuildError(f"optimization profile {index} has no shapes for input {tensor.name}")
                lo, opt, hi = profile._shapes[tensor.name]
                for shape in (lo, opt, hi):
                    why = rules.input_shape_problem(shape, tuple(tensor.shape), lo, hi)
                    if why:
                        raise _BuildError(f"optimization profile {index}, input {tensor.name}: {why}")
                shapes[tensor.name] = [list(lo), list(opt), list(hi)]
            profiles.append(shapes)
        if not profiles and any(-1 in t.shape for t in network._inputs):
            raise _BuildError("Network has dynamic or shape inputs, but no optimization profile has been defined.")
        cc = _device_cc()
        level = config._hw_level.name
        if level == "AMPERE_PLUS":
            why = rules.hardware_problem(level, tuple(cc), tuple(cc))
            if why:
                raise _BuildError(why)
        onnx_bytes = network._onnx
        self._check_runs(onnx_bytes, network, profiles)
        cache_key = hashlib.sha256(onnx_bytes + json.dumps(profiles).encode()).hexdigest()
        cache = config._cache
        reused = bool(cache is not None and cache_key in cache._entries)
        if cache is not None:
            cache._entries[cache_key] = {"layers": len(network._layers)}
        header = _plan.Header(
            tensorrt_version=VERSION,
            version_compatible="VERSION_COMPATIBLE" in flags,
            hardware_compatibility=level,
            compute_capability=cc,
            profiles=profiles,
            inputs=[_plan.Tensor(t.name, t.dtype.name, list(t.shape)) for t in network._inputs],
            outputs=[_plan.Tensor(t.name, t.dtype.name, list(t.shape)) for t in network._outputs],
            precision={"flags": sorted(flags), "strongly_typed": network._strongly_typed,
                       "layer_precisions": {layer._name: layer._precision.name for layer in network._layers if layer._precision},
                       "layers": _engine_layers(_built_layers(network, flags),
                                                {t.name: t.dtype.name for t in [*network._inputs, *network._outputs]},
                                                len(profiles))},
            builder={"optimization_level": config._opt_level,
                     "profiling_verbosity": _member_name(ENUMS["ProfilingVerbosity"], config._profiling),
                     "workspace_bytes": config._pools.get(int(ENUMS["MemoryPoolType"].WORKSPACE)),
                     "timing_cache_reused": reused},
        )
        return IHostMemory(_plan.write(header, onnx_bytes))

    def _check_runs(self, onnx_bytes: bytes, network, profiles) -> None:
        """Where TensorRT would fail to build a network whose shapes do not work out, the emulation runs it
        once at the first profile's min shapes."""
        feeds = {}
        for tensor in network._inputs:
            shape = profiles[0][tensor.name][0] if profiles else list(tensor.shape)
            feeds[tensor.name] = np.zeros(shape, dtype=NUMPY[tensor.dtype.name])
        try:
            _session(onnx_bytes).run(None, feeds)
        except Exception as e:  # noqa: BLE001 - onnxruntime's Fail / InvalidArgument / RuntimeException
            raise _BuildError(f"the network does not build at the profile's min shapes: {str(e).strip().splitlines()[0]}") from None


class _BuildError(Exception):
    pass


_SESSIONS: dict[str, object] = {}


def _session(onnx_bytes: bytes):
    key = hashlib.sha256(onnx_bytes).hexdigest()
    if key not in _SESSIONS:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        _SESSIONS[key] = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


# ----------------------------------------------------------------------------------- runtime


class Runtime(_Object):
    _trt_name = "Runtime"

    def __init__(self, logger):
        self._logger, self._host_code = logger, False

    logger = property(lambda self: self._logger)

    @property
    def engine_host_code_allowed(self):
        return self._host_code

    @engine_host_code_allowed.setter
    def engine_host_code_allowed(self, value):
        self._host_code = bool(value)

    def deserialize_cuda_engine(self, serialized):
        if isinstance(serialized, (IStreamReader, IStreamReaderV2)):
            blob = self._read_stream(serialized)
        elif isinstance(serialized, (bytes, bytearray, memoryview)):
            blob = bytes(serialized)
        else:
            raise TypeError("deserialize_cuda_engine(): incompatible function arguments (a buffer or an IStreamReader)")
        try:
            header, onnx_bytes = _plan.read(blob)
        except ValueError as e:
            _error(self._logger, f"IRuntime::deserializeCudaEngine: Error Code 1: Serialization ({e})")
            return None
        problem = rules.deserialize_problem(header.tensorrt_version, VERSION, header.version_compatible, self._host_code)
        if problem is None:
            problem = rules.hardware_problem(header.hardware_compatibility, tuple(header.compute_capability),
                                             tuple(_device_cc()))
        if problem:
            _error(self._logger, f"IRuntime::deserializeCudaEngine: Error Code 1: Serialization ({problem})")
            return None
        return ICudaEngine(header, onnx_bytes, self._logger)

    @staticmethod
    def _read_stream(reader) -> bytes:
        chunks = []
        while True:
            chunk = reader.read(1 << 20, 0) if isinstance(reader, IStreamReaderV2) else reader.read(1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(bytes(chunk))


class ICudaEngine(_Object):
    _trt_name = "ICudaEngine"

    def __init__(self, header: _plan.Header, onnx_bytes: bytes, logger):
        self._header, self._onnx, self._logger = header, onnx_bytes, logger
        self._tensors = {t.name: (t, TensorIOMode.INPUT) for t in header.inputs}
        self._tensors.update({t.name: (t, TensorIOMode.OUTPUT) for t in header.outputs})
        self._names = list(self._tensors)

    num_io_tensors = property(lambda self: len(self._names))
    num_optimization_profiles = property(lambda self: max(1, len(self._header.profiles)))
    name = property(lambda self: "emulated engine")
    hardware_compatibility_level = property(lambda self: getattr(HardwareCompatibilityLevel,
                                                                 self._header.hardware_compatibility))

    def get_tensor_name(self, index):
        return self._names[index]

    def get_tensor_mode(self, name):
        return self._tensors[name][1] if name in self._tensors else TensorIOMode.NONE

    def get_tensor_shape(self, name):
        return Dims(self._tensors[name][0].shape)

    def get_tensor_dtype(self, name):
        return getattr(DataType, self._tensors[name][0].dtype)

    def get_tensor_format(self, name, profile_index=0):
        return TensorFormat.LINEAR

    def get_tensor_location(self, name):
        return ENUMS["TensorLocation"].DEVICE

    def is_shape_inference_io(self, name) -> bool:
        return False

    def is_debug_tensor(self, name) -> bool:
        return False

    def get_aliased_input_tensor(self, name):
        return None

    def get_tensor_profile_shape(self, name, profile_index):
        return [Dims(s) for s in self._header.profiles[profile_index][name]]

    num_layers = property(lambda self: len(self._header.precision.get("layers", [])))
    profiling_verbosity = property(lambda self: getattr(ENUMS["ProfilingVerbosity"],
                                                        self._header.builder.get("profiling_verbosity", "LAYER_NAMES_ONLY")))

    def create_execution_context(self, strategy=None):
        return IExecutionContext(self)

    def create_engine_inspector(self):
        return EngineInspector(self)

    def serialize(self):
        return IHostMemory(_plan.write(self._header, self._onnx))


class EngineInspector(_Object):
    """IEngineInspector: the built engine's layers (`_engine_layers`) as its profiling verbosity allows (rules
    'layer_precision', 'inspector'). DETAILED: per layer Name, LayerType, Inputs/Outputs (Name, Location, Dimensions,
    and "Format/Datatype" on 8.x/10.x, "Datatype" and "Format" on 11.x), TacticValue, StreamId, Metadata;
    LAYER_NAMES_ONLY: the name; NONE: nothing. The emulation has no intermediate shapes: Dimensions is []."""

    _trt_name = "EngineInspector"

    def __init__(self, engine: ICudaEngine):
        self._engine, self._context = engine, None

    @property
    def execution_context(self):
        return self._context

    @execution_context.setter
    def execution_context(self, value):
        self._context = value

    def _layer(self, record: dict):
        verbosity = self._engine._header.builder.get("profiling_verbosity", "LAYER_NAMES_ONLY")
        if verbosity == "NONE":
            return None
        if verbosity != "DETAILED":
            return record["name"]
        inspector = rules.inspector()

        def tensor(name: str, precision: str) -> dict:
            if MAJOR >= 11:
                typed = {"Datatype": inspector["datatypes"][precision], "Format": inspector["formats"][precision]}
            else:
                typed = {"Format/Datatype": inspector["formats"][precision]}
            return {"Name": name, "Location": "Device", "Dimensions": [], **typed}

        reformat = {"ParameterType": "Reformat", "Origin": "REFORMAT"} if record["type"] == "Reformat" else {}
        return {"Name": record["name"], "LayerType": record["type"],
                "Inputs": [tensor(n, p) for n, p in record["inputs"]],
                "Outputs": [tensor(n, p) for n, p in record["outputs"]],
                **reformat, "TacticValue": "0x0000000000000000", "StreamId": 0, "Metadata": ""}

    def _io_tensors(self) -> dict:
        """The engine's I/O: 8.x/10.x "Bindings" (names, each profile's on 8.x); 11.x "I/O Tensors" (objects)."""
        header = self._engine._header
        if MAJOR < 11:
            copies = len(header.profiles) if MAJOR < 10 else 1
            names = list(self._engine._names)
            return {"Bindings": names + [f"{n} [profile {i}]" for i in range(1, copies) for n in names]}
        tensors = []
        for t, mode in self._engine._tensors.values():
            linear = "Row major linear FP32 format (kLINEAR)" if t.dtype == "FLOAT" else rules.inspector()["formats"][t.dtype]
            shapes = [dict(zip(("MinShape", "OptShape", "MaxShape"), p[t.name])) for p in header.profiles if t.name in p]
            tensors.append({"Name": t.name, "IOMode": "Input" if mode == TensorIOMode.INPUT else "Output",
                            "DataType": rules.inspector()["datatypes"][t.dtype], "Dimensions": list(t.shape),
                            "Location": "Device", "IsShapeInferenceIO": False,
                            "ProfileInfo": [{**s, "Format": linear} for s in shapes] or [{"Format": linear}]})
        return {"I/O Tensors": tensors}

    def get_layer_information(self, layer_index, format):
        layers = self._engine._header.precision.get("layers", [])
        if not 0 <= layer_index < len(layers):
            return None
        info = self._layer(layers[layer_index])
        if format == LayerInformationFormat.JSON:
            return json.dumps(info) if info is not None else ""
        return info if isinstance(info, str) else json.dumps(info) if info else ""

    def get_engine_information(self, format):
        layers = [layer for layer in (self._layer(r) for r in self._engine._header.precision.get("layers", [])) if layer is not None]
        if format == LayerInformationFormat.JSON:
            return json.dumps({"Layers": layers, **self._io_tensors()})
        return "\n".join(layer if isinstance(layer, str) else json.dumps(layer) for layer in layers) + "\n"


class IExecutionContext(_Object):
    _trt_name = "IExecutionContext"

    def __init__(self, engine: ICudaEngine):
        self._engine = engine
        self._shapes = {t.name: tuple(t.shape) for t in engine._header.inputs}
        self._addresses: dict[str, int] = {}
        self._allocators: dict[str, object] = {}
        self._debug_listener = None
        self._profile = 0

    engine = property(lambda self: self._engine)

    def _select_profile(self, index) -> bool:
        """Rule 'optimization_profile': an index of the engine's profiles; the inputs' shapes are set again after."""
        engine = self._engine
        problem = rules.profile_index_problem(int(index), engine.num_optimization_profiles)
        if problem:
            _error(engine._logger, f"IExecutionContext::setOptimizationProfileAsync: Error Code 3: API Usage Error ({problem})")
            return False
        self._profile = int(index)
        self._shapes = {t.name: tuple(t.shape) for t in engine._header.inputs}
        return True

    def _set_active_profile(self, index) -> None:  # 8.6's writable property (synchronous)
        self._select_profile(index)

    active_optimization_profile = property(lambda self: self._profile, _set_active_profile)

    def set_optimization_profile_async(self, profile_index, stream) -> bool:
        if not _cuda.is_stream(int(stream)):
            _error(self._engine._logger, f"IExecutionContext::setOptimizationProfileAsync: {int(stream):#x} is not a live CUDA stream")
            return False
        return self._select_profile(profile_index)

    def set_input_shape(self, name, shape) -> bool:
        engine = self._engine
        if engine.get_tensor_mode(name) != TensorIOMode.INPUT:
            _error(engine._logger, f"IExecutionContext::setInputShape: Error Code 3: {name} is not an input tensor")
            return False
        lo, _, hi = engine._header.profiles[self._profile][name] if engine._header.profiles else (shape, shape, shape)
        problem = rules.input_shape_problem(tuple(int(d) for d in shape), tuple(engine._tensors[name][0].shape),
                                            tuple(lo), tuple(hi))
        if problem:
            _error(engine._logger, f"IExecutionContext::setInputShape: Error Code 3: API Usage Error ({name}: {problem})")
            return False
        self._shapes[name] = tuple(int(d) for d in shape)
        return True

    def get_tensor_shape(self, name):
        engine = self._engine
        tensor, mode = engine._tensors[name]
        if mode == TensorIOMode.INPUT:
            return Dims(self._shapes[name])
        batch = next((s[0] for s in self._shapes.values() if s and s[0] >= 0), -1)
        return Dims(batch if d == -1 else d for d in tensor.shape)

    def set_tensor_address(self, name, memory) -> bool:
        if name not in self._engine._tensors:
            _error(self._engine._logger, f"IExecutionContext::setTensorAddress: Error Code 3: no tensor named {name}")
            return False
        self._addresses[name] = int(memory)
        return True

    def get_tensor_address(self, name):
        return self._addresses.get(name, 0)

    def set_output_allocator(self, name, output_allocator) -> bool:
        if self._engine.get_tensor_mode(name) != TensorIOMode.OUTPUT:
            return False
        self._allocators[name] = output_allocator
        return True

    def get_output_allocator(self, name):
        return self._allocators.get(name)

    def set_all_tensors_debug_state(self, flag) -> bool:
        return True

    def set_debug_listener(self, listener) -> bool:
        self._debug_listener = listener
        return True

    def get_debug_listener(self):
        return self._debug_listener

    def execute_async_v3(self, stream_handle) -> bool:
        try:
            self._execute(int(stream_handle))
        except _ExecutionError as e:
            _error(self._engine._logger, f"IExecutionContext::enqueueV3: Error Code 1: {e}")
            return False
        return True

    def _execute(self, stream: int) -> None:
        engine = self._engine
        if not _cuda.is_stream(stream):
            raise _ExecutionError(f"{stream:#x} is not a live CUDA stream")
        feeds = {}
        for tensor in engine._header.inputs:
            shape = self._shapes[tensor.name]
            if any(d < 0 for d in shape):
                raise _ExecutionError(f"the shape of input {tensor.name} is not set (set_input_shape)")
            dtype = np.dtype(NUMPY[tensor.dtype])
            nbytes = volume(shape) * dtype.itemsize
            address = self._addresses.get(tensor.name, 0)
            if not _cuda.is_device_range(address, nbytes):
                raise _ExecutionError(f"input {tensor.name}: address {address:#x} is not {nbytes} bytes of device memory")
            feeds[tensor.name] = np.frombuffer(_cuda.read(address, nbytes), dtype=dtype).reshape(shape)
        try:
            results = _session(engine._onnx).run([t.name for t in engine._header.outputs], feeds)
        except Exception as e:  # noqa: BLE001
            raise _ExecutionError(f"execution failed: {str(e).strip().splitlines()[0]}") from None
        if str(self._profile) in os.environ.get("STANDIN_TRT_WRONG_PROFILE", "").split(","):  # a test's fault: wrong kernels
            results = [np.flip(result, axis=-1) for result in results]
        for tensor, result in zip(engine._header.outputs, results):
            data = np.ascontiguousarray(result, dtype=NUMPY[tensor.dtype])
            allocator = self._allocators.get(tensor.name)
            address = self._addresses.get(tensor.name, 0)
            reallocate, notify = rules.output_allocator_calls(VERSION)
            if allocator is not None:
                args = (tensor.name, address, data.nbytes, 256) + ((stream,) if reallocate.endswith("_async") else ())
                address = int(getattr(allocator, reallocate)(*args) or 0)
                if not address:
                    raise _ExecutionError(f"the output allocator returned no memory for {tensor.name}")
                self._addresses[tensor.name] = address
            if not _cuda.is_device_range(address, data.nbytes):
                raise _ExecutionError(f"output {tensor.name}: address {address:#x} is not {data.nbytes} bytes of device memory")
            _cuda.write(address, data.tobytes())
            if allocator is not None:
                getattr(allocator, notify)(tensor.name, Dims(data.shape))


class _ExecutionError(Exception):
    pass


# ------------------------------------------------------------------------------------ lookup

EMULATED = {
    "Logger": Logger, "ILogger": ILogger, "Runtime": Runtime, "Builder": Builder, "OnnxParser": OnnxParser,
    "ICudaEngine": ICudaEngine, "IExecutionContext": IExecutionContext, "IOutputAllocator": IOutputAllocator,
    "IDebugListener": IDebugListener, "IStreamReader": IStreamReader, "IStreamReaderV2": IStreamReaderV2,
    "IProgressMonitor": IProgressMonitor, "IBuilderConfig": IBuilderConfig, "INetworkDefinition": INetworkDefinition,
    "ITensor": ITensor, "ILayer": ILayer, "IOptimizationProfile": IOptimizationProfile, "ITimingCache": ITimingCache,
    "IHostMemory": IHostMemory, "Dims": Dims, "nptype": nptype, "volume": volume,
    "init_libnvinfer_plugins": init_libnvinfer_plugins,
}


def lookup(name: str):
    inv = INVENTORY
    if name in inv["enums"]:
        return ENUMS[name]
    if name in inv["constants"]:
        member = CONSTANT_DTYPES.get(name)
        if member is None or not hasattr(DataType, member):
            raise _not_emulated(f"tensorrt.{name}")
        return getattr(DataType, member)
    if name in inv["classes"] or name in inv["functions"]:
        if name in EMULATED:
            return EMULATED[name]
        raise _not_emulated(f"tensorrt.{name}")
    raise AttributeError(f"module 'tensorrt' has no attribute '{name}' (TensorRT {VERSION})")


for _cls in (ITensor, ILayer, INetworkDefinition, OnnxParser, IOptimizationProfile, ITimingCache, IBuilderConfig,
             Builder, Runtime, ICudaEngine, IExecutionContext, IHostMemory):
    _cls.__module__ = "tensorrt"
