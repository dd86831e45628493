"""The TensorRT Python API tritonize uses, checked against the real bindings of each supported major,
and the torch-tensorrt and Polygraphy APIs it calls, checked against their sources.

tests/data/tensorrt_api/ holds name inventories read from NVIDIA's own wheels (8.6.1, 10.0.1,
10.16.1.11, 11.0.0.114, 11.4.0.106; see its README). This catches a class, method, property, enum
member or constant that the code (or Polygraphy, for the flags tritonize asks it for) would need and
a TensorRT version lacks, e.g. BuilderFlag.FP16 on 11, and a read-only property assigned. It cannot
catch behaviour (TF32 on by default, STRONGLY_TYPED ignored on 11, a version-compatible plan needing
host code allowed), argument types, what only the GPU decides, or versions not inventoried (8.6.2/8.6.3,
11.1-11.3). The tensorrt-stubs package (10.13 only) does not parse under mypy, so no type check here.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from tests.convert import build_job
from tritonize.convert.builders import plan_from_onnx

DATA = Path(__file__).parent.parent / "data"
INVENTORIES = {json.loads(p.read_text())["version"]: json.loads(p.read_text())
               for p in sorted((DATA / "tensorrt_api").glob("*.json"))}
PACKAGE = Path(__file__).parent.parent.parent / "tritonize"


class Names:
    """A name-only view of one TensorRT version's bindings: what exists, with its real enum values and
    property kinds. Nothing can be called; a name that version lacks is an AttributeError."""

    def __init__(self, label: str, members: dict):
        self._label, self._members = label, members

    def __getattr__(self, name):
        try:
            return self._members[name]
        except KeyError:
            raise AttributeError(f"{self._label} has no {name!r}") from None


def bindings(version: str) -> Names:
    inv = INVENTORIES[version]
    top: dict = {"__version__": version}
    top.update({c: Names(f"TensorRT {version} {c}", members) for c, members in inv["classes"].items()})
    top.update({e: Names(f"TensorRT {version} {e}", {m: f"{e}.{m}" for m in members}) for e, members in inv["enums"].items()})
    top.update({c: f"trt.{c}" for c in inv["constants"]})
    top.update({f: "function" for f in inv["functions"]})
    return Names(f"TensorRT {version}", top)


def test_inventories_are_the_real_wheels():
    assert set(INVENTORIES) == {"8.6.1", "10.0.1", "10.16.1.11", "11.0.0.114", "11.4.0.106"}
    for inv in INVENTORIES.values():
        assert inv["source"]["wheel"].startswith(("tensorrt_bindings-", "tensorrt_cu12_bindings-"))
        assert len(inv["source"]["sha256"]) == 64 and len(inv["classes"]) > 100
    # the facts the issue names, as the real 11.x bindings have them
    for version in ("11.0.0.114", "11.4.0.106"):
        flags = INVENTORIES[version]["enums"]["BuilderFlag"]
        assert not {"FP16", "BF16", "INT8", "FP8"} & set(flags) and "TF32" in flags
        assert "EXPLICIT_BATCH" not in INVENTORIES[version]["enums"]["NetworkDefinitionCreationFlag"]


@pytest.mark.parametrize("version", sorted(INVENTORIES))
@pytest.mark.parametrize("precision,fp32_layers", [("fp32", ()), ("fp16", ("node_conv1", "node_add3")), ("int8", ())])
def test_tensorrt_builder_asks_only_for_what_each_version_has(version, precision, fp32_layers, tmp_path):
    """plan_from_onnx is built with each version's real names; every flag Polygraphy will set by name
    for this configuration exists there; TF32 is cleared for FP32 on every version (11 included) and kept
    for FP16 and INT8, as trtexec and torch-tensorrt builds do."""
    job = build_job(onnx_file="model.onnx", plan_file="model.plan", input_name="input", output_name="output",
                   input_shape=(3, 224, 224), profile={"min": 1, "opt": 4, "max": 8}, precision=precision,
                   workspace_mib=4096, timing_cache="timing.cache", version_compatible=True,
                   hardware_compatibility="ampere+", fp32_layers=fp32_layers)
    trt = bindings(version)
    build = plan_from_onnx(job, tmp_path, trt)  # constructs Polygraphy's loaders: their argument names are checked
    config = build._config
    major = int(version.split(".")[0])
    assert config.tf32 is (precision != "fp32")  # the one TF32 rule of every builder (BuildJob.tf32)
    assert config.fp16 == (precision == "fp16" and major < 10) and config.int8 == (precision == "int8" and major < 10)
    assert config.memory_pool_limits == {"MemoryPoolType.WORKSPACE": 4096 << 20}
    assert config.hardware_compatibility_level == "HardwareCompatibilityLevel.AMPERE_PLUS"
    flags = {"TF32": True, "FP16": config.fp16, "INT8": config.int8, "VERSION_COMPATIBLE": config.version_compatible,
             "OBEY_PRECISION_CONSTRAINTS": config.precision_constraints == "obey"}
    for flag in (f for f, wanted in flags.items() if wanted):
        getattr(trt.BuilderFlag, flag)
    network = build._network
    if major < 10 and fp32_layers:
        assert config.precision_constraints == "obey"
        network = network._network  # SetLayerPrecisions around the parsed network
        assert trt.ILayer.precision == "property+w"
    assert network.strongly_typed == (major >= 10)
    if network.strongly_typed:
        assert hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    assert trt.IBuilderConfig.builder_optimization_level == "property+w"
    assert trt.IBuilderConfig.hardware_compatibility_level == "property+w"


def _attribute_uses(source: str, receivers: dict[str, str]):
    """(receiver class, attribute, assigned?) for every `<receiver>.<attribute>` in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            receiver = ast.unparse(node.value)
            if receiver in receivers:
                found.append((receivers[receiver], node.attr, isinstance(node.ctx, ast.Store), node.lineno))
    return found


def test_embedded_tensorrt_backend_uses_names_every_version_has():
    """serve/backends/tensorrt/model.py runs on whatever TensorRT the serving machine has: no version
    guards, so every name it uses must exist in 8.6, 10 and 11; and it must allow host code before
    deserializing, or version-compatible plans never load."""
    source = (PACKAGE / "serve" / "backends" / "tensorrt" / "model.py").read_text()
    receivers = {"trt": "", "trt.Logger": "Logger", "runtime": "Runtime", "self.engine": "ICudaEngine",
                 "self.context": "IExecutionContext"}
    uses = _attribute_uses(source, receivers)
    assert {"deserialize_cuda_engine", "execute_async_v3", "set_tensor_address"} <= {u[1] for u in uses}
    for version in INVENTORIES:
        trt = bindings(version)
        for cls, attr, assigned, _ in uses:
            kind = getattr(getattr(trt, cls) if cls else trt, attr)
            if assigned:
                assert kind == "property+w", f"TensorRT {version}: {cls}.{attr} is {kind}, not a writable property"
    allowed = [line for cls, attr, assigned, line in uses if (cls, attr, assigned) == ("Runtime", "engine_host_code_allowed", True)]
    deserialize = [line for cls, attr, _, line in uses if (cls, attr) == ("Runtime", "deserialize_cuda_engine")]
    assert allowed and deserialize and allowed[0] < deserialize[0]


def test_torch_tensorrt_gets_only_arguments_its_torchscript_frontend_has():
    """The TorchScript frontend has no **kwargs: an unknown keyword (optimization_level) is a TypeError,
    also through the top-level dispatcher, which passes a ScriptModule's keywords on to it."""
    spec = json.loads((DATA / "torch_tensorrt_ts_signature.json").read_text())
    dispatcher = spec["function"].replace(".ts.", ".")
    calls = [node for node in ast.walk(ast.parse((PACKAGE / "convert" / "torch_trt.py").read_text()))
             if isinstance(node, ast.Call) and ast.unparse(node.func) in (spec["function"], dispatcher)]
    assert len(calls) == 1
    call = calls[0]
    allowed = spec["parameters"] + (spec["dispatcher_only"] if ast.unparse(call.func) == dispatcher else [])
    named = [k.arg for k in call.keywords] + spec["parameters"][:len(call.args)]
    assert set(named) <= set(allowed) and len(named) == len(set(named))
    assert "disable_tf32" in named  # FP32 builds stay strict FP32 (TF32 is on by default)


def test_polygraphy_does_what_tritonize_relies_on():
    """Polygraphy (pinned <0.60) lets the runtime load version-compatible plans and copies inputs and
    executes on one stream it owns; plan_check.py has no stream or runtime code of its own."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    assert "runtime.engine_host_code_allowed = True" in inspect.getsource(EngineFromBytes.call_impl)
    runner = inspect.getsource(TrtRunner)
    assert "_get_array_on_gpu(\n                    underlying_array, name, self.device_input_buffers, self.stream" in runner
    assert "execute_async_v3(self.stream.ptr)" in runner and "self.stream.synchronize()" in runner
    plan_check = (PACKAGE / "convert" / "plan_check.py").read_text()
    assert "Stream(" not in plan_check and "deserialize_cuda_engine" not in plan_check
