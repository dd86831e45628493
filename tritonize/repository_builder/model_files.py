"""`repo check`'s rules about the real model files: the ONNX graph and the TorchScript module against the config."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from tritonize.repository_builder.findings import REBUILD, Severity

ONNX_TYPES = {1: "TYPE_FP32", 2: "TYPE_UINT8", 3: "TYPE_INT8", 6: "TYPE_INT32", 7: "TYPE_INT64", 9: "TYPE_BOOL",
              10: "TYPE_FP16", 11: "TYPE_FP64", 16: "TYPE_BF16"}


class ModelFileChecks:
    """Mixed into the checker of one model: `add` a finding, `_read` a file once for all of its configs."""

    def _check_onnx(self, cfg, path: Path) -> None:
        """The config against the graph as Triton's onnxruntime backend compares them when an instance loads
        (onnxruntime_backend src/onnxruntime.cc ValidateInputs, ValidateOutputs): every graph input declared, each
        declared tensor in the graph with its data type and dims (_compare_onnx_tensor)."""
        graph = self._read(path, "onnx", _onnx_graph)
        if isinstance(graph, Exception):
            self.add(Severity.error, f"cannot read {path.name}: {str(graph).splitlines()[0]}", REBUILD)
            return
        initializers = {t.name for t in graph.initializer}
        real = {
            "input": {v.name: v for v in graph.input if v.name not in initializers},
            "output": {v.name: v for v in graph.output},
        }
        for role, tensors in (("input", cfg.input), ("output", cfg.output)):
            declared = {t.name for t in tensors}
            for t in tensors:
                value = real[role].get(t.name)
                if value is None:
                    self.add(Severity.error, f"config {role} {t.name!r} is not an {role} of {path.name} "
                                      f"(graph {role}s: {', '.join(real[role]) or 'none'})",
                             f"name the config {role} after the graph ({REBUILD})")
                    continue
                self._compare_onnx_tensor(cfg, role, t, value)
            for name in real[role]:
                if name not in declared:
                    self.add(Severity.error, f"{path.name} {role} {name!r} is missing from the config",
                             f"declare it in config.pbtxt or {REBUILD}")

    def _compare_onnx_tensor(self, cfg, role: str, t, value) -> None:
        tensor_type = value.type.tensor_type
        onnx_type = ONNX_TYPES.get(tensor_type.elem_type, f"onnx elem_type {tensor_type.elem_type}")
        if onnx_type != pb.DataType.Name(t.data_type):
            self.add(Severity.error, f"{role} {t.name!r}: config says {pb.DataType.Name(t.data_type)}, the graph has {onnx_type}",
                     f"set data_type: {onnx_type}")
        dims = [(d.dim_value if d.HasField("dim_value") else None) for d in tensor_type.shape.dim]
        if cfg.max_batch_size > 0:
            if not dims:
                self.add(Severity.error, f"{role} {t.name!r}: the graph's tensor is a scalar (no batch axis), but "
                                         f"max_batch_size is {cfg.max_batch_size}", "set max_batch_size: 0")
                return
            batch, dims = dims[0], dims[1:]
            if batch is not None:
                self.add(Severity.error, f"{role} {t.name!r}: the graph's batch axis is fixed at {batch}, but max_batch_size "
                                  f"is {cfg.max_batch_size}",
                         "re-export with a symbolic batch axis (`tritonize export --force`) or set max_batch_size: 0")
        expected = list(t.dims)
        if not tensor_type.shape.dim and all(e == 1 for e in expected):
            return  # onnxruntime_backend takes a scalar for config dims of 1 (without batching: said above otherwise)
        # onnxruntime_backend (src/onnxruntime.cc ValidateInputs/ValidateOutputs, the backend library's
        # CompareDimsSupported): an input's variable graph dim takes any config dim, a fixed one only itself (not -1);
        # an output is compared exactly (a variable graph dim wants -1).
        exact = role == "output"
        same = len(dims) == len(expected) and all(
            e == (-1 if g is None else g) if exact else g is None or g == e for g, e in zip(dims, expected))
        if not same:
            shown = ["?" if d is None else d for d in dims]
            self.add(Severity.error, f"{role} {t.name!r}: config dims {expected} do not match the graph's {shown} "
                              "(batch axis excluded)",
                     f"set dims to {[-1 if d is None else d for d in dims]} or {REBUILD}")

    def _check_plan_tensors(self, cfg, path: Path) -> None:
        """The config's tensors against the ONNX the plan was built from, whose inputs and outputs the engine keeps, as
        tensorrt_backend compares them with the engine's when an instance loads (src/instance_state.cc ValidateIO and
        its CompareDimsSupported): the same data type, and the same dims where neither side is variable (-1)."""
        graph = self._read(path, "onnx", _onnx_graph)
        if isinstance(graph, Exception):
            return  # (the plan's own check read it: a file changed since is the hashes' finding)
        initializers = {t.name for t in graph.initializer}
        engine = {v.name: v.type.tensor_type for v in (*graph.input, *graph.output) if v.name not in initializers}
        for role, tensors in (("input", cfg.input), ("output", cfg.output)):
            for t in tensors:
                tensor_type = engine.get(t.name)
                if tensor_type is None:
                    continue  # (names: _check_plan)
                onnx_type = ONNX_TYPES.get(tensor_type.elem_type, f"onnx elem_type {tensor_type.elem_type}")
                if onnx_type != pb.DataType.Name(t.data_type):
                    self.add(Severity.error, f"{role} {t.name!r}: config says {pb.DataType.Name(t.data_type)}, the plan's "
                                             f"is {onnx_type}: Triton's tensorrt backend refuses the model",
                             f"set data_type: {onnx_type}")
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
                full = [-1, *t.dims] if cfg.max_batch_size > 0 else list(t.dims)
                if len(dims) != len(full) or any(-1 not in (g, c) and g != c for g, c in zip(dims, full)):
                    shown = dims[1:] if cfg.max_batch_size > 0 else dims
                    self.add(Severity.error, f"{role} {t.name!r}: config dims {list(t.dims)} do not match the plan's "
                                             f"{shown} (batch axis excluded): Triton's tensorrt backend refuses the model",
                             f"set dims to {shown} or {REBUILD}")

    def _check_torchscript(self, cfg, path: Path) -> None:
        """The config against the module as Triton's pytorch backend reads it when an instance loads (pytorch_backend
        ValidateInputs, ValidateOutputs): as many inputs as forward() takes, names by the `<name>__<index>` convention
        (an input may also name a forward() argument); then a batch-1 forward on zeros of the configured shapes, whose
        outputs must have the configured dims (what the backend finds only when a request runs)."""
        module = self._read(path, "torchscript", _torchscript_module)
        if isinstance(module, Exception):
            self.add(Severity.error, f"cannot load {path.name} with torch.jit.load: {str(module).splitlines()[0]}", REBUILD)
            return
        args = [a.name for a in module.forward.schema.arguments if a.name != "self"]
        if len(cfg.input) != len(args):
            self.add(Severity.error, f"config declares {len(cfg.input)} input(s); {path.name} forward({', '.join(args)}) "
                              f"takes {len(args)}",
                     f"declare {len(args)} input(s) named input__0 ... or {REBUILD}")
            return
        for role, tensors, count in (("input", cfg.input, len(args)), ("output", cfg.output, len(cfg.output))):
            for t in tensors:
                m = re.fullmatch(r".+__(\d+)", t.name)
                if not ((m and int(m.group(1)) < count) or (role == "input" and t.name in args)):
                    self.add(Severity.error, f"{role} {t.name!r} does not follow the libtorch naming rule "
                                      f"`<name>__<index>` (index < {count})" + (f" nor name a forward() argument ({', '.join(args)})" if role == "input" else ""),
                             f"rename it {role}__0 (and so on) or {REBUILD}")
        dims = [list(t.dims) for t in cfg.input]
        if any(d < 1 for shape in dims for d in shape):
            return  # variable dims: no single probe shape
        shapes = [[1] + shape if cfg.max_batch_size > 0 else shape for shape in dims]
        result = self._read(path, f"forward {shapes}", lambda _: _forward(module, shapes))
        if isinstance(result, Exception):  # the module rejects the configured input shape
            first = str(result).strip().splitlines()[-1] if str(result).strip() else type(result).__name__
            self.add(Severity.error, f"{path.name} fails on an input of the configured shape {shapes}: {first}",
                     f"set the input dims the model takes or {REBUILD}")
            return
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(cfg.output):
            self.add(Severity.error, f"{path.name} returns {len(results)} output(s); the config declares {len(cfg.output)}",
                     f"declare {len(results)} output(s) or {REBUILD}")
            return
        for t, r in zip(sorted(cfg.output, key=lambda t: t.name), results):
            got = list(r.shape[1:] if cfg.max_batch_size > 0 else r.shape)
            expected = list(t.dims)
            if len(got) != len(expected) or any(e not in (-1, g) for e, g in zip(expected, got)):
                self.add(Severity.error, f"output {t.name!r}: config dims {list(t.dims)}, {path.name} returns {got} "
                                  "(batch axis excluded)",
                         f"set dims to {got} or {REBUILD}")


def _onnx_graph(path: Path):
    """The graph of an ONNX file as onnxruntime's session has it, or the exception that says why it cannot be read
    (truncated, not ONNX). onnxruntime infers the outputs' shapes and merges them with what the exporter declared:
    an exporter may leave a size unknown or give it a symbolic name; the session (and Triton's backend) has the size."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any reason onnx cannot read it becomes a finding
        return e
    inferred = _inferred_outputs(model)
    for output in model.graph.output:
        _merge_shape(output.type.tensor_type, inferred.get(output.name))
    return model.graph


def _inferred_outputs(model) -> dict:
    """output name -> its shape as onnx's shape inference gives it from the graph alone (not what was declared), {} when
    inference fails. The weights' values are left out (their shapes are all it reads) so that it stays fast."""
    import onnx

    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    graph, light_graph = model.graph, light.graph
    light_graph.node.extend(graph.node)
    light_graph.input.extend(graph.input)
    for tensor in graph.initializer:  # shape-giving constants (Reshape's shape, ...) are small: they keep their values
        if len(tensor.dims) and _count(tensor.dims) > WEIGHT_VALUES:
            light_graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            light_graph.initializer.append(tensor)
    for output in graph.output:
        light_graph.output.add(name=output.name).type.tensor_type.elem_type = output.type.tensor_type.elem_type
    try:
        return {o.name: o.type.tensor_type for o in onnx.shape_inference.infer_shapes(light).graph.output
                if o.type.tensor_type.HasField("shape")}
    except Exception:  # noqa: BLE001 - an operator onnx cannot infer: the declared shapes stand, as in onnxruntime
        return {}


WEIGHT_VALUES = 1024


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _merge_shape(declared, inferred) -> None:
    """onnxruntime's merge of an inferred shape into a declared one (graph.cc MergeShapeInfo): a size wins over a
    symbolic or unknown dim, two different sizes leave the dim unknown, and two ranks the shape unknown."""
    if inferred is None:
        return
    if not declared.HasField("shape"):
        declared.shape.CopyFrom(inferred.shape)
        return
    if len(declared.shape.dim) != len(inferred.shape.dim):
        declared.ClearField("shape")
        return
    for mine, theirs in zip(declared.shape.dim, inferred.shape.dim):
        if theirs.HasField("dim_value") and not mine.HasField("dim_value"):
            mine.dim_value = theirs.dim_value
        elif theirs.HasField("dim_value") and mine.dim_value != theirs.dim_value:
            mine.Clear()


def _torchscript_module(path: Path):
    """The TorchScript module, or the exception that says why torch.jit.load refuses the file."""
    import torch

    try:
        with warnings.catch_warnings():  # torch.jit.* is deprecated, and still what Triton's libtorch loads
            warnings.simplefilter("ignore")
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any reason torch cannot load it becomes a finding
        return e


def _forward(module, shapes: list[list[int]]):
    """The module's outputs on zeros of these shapes, or the exception it raised."""
    import torch

    try:
        with torch.inference_mode():
            return module(*[torch.zeros(s) for s in shapes])
    except Exception as e:  # noqa: BLE001 - the model's own forward(): any error becomes a finding
        return e
