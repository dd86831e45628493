"""The emulated TensorRT and CUDA runtime themselves: they load only in the tests, gate every name by the
real inventory of their version, enforce the documented rules, and carry the real, unmodified
Polygraphy 0.53.6 from build to inference."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.emulation import EMULATED, ROOT, VERSION_ENV, environment, purge, tiny_classifier


def _switch(version: str, monkeypatch):
    """The emulation of another TensorRT version in this process (as a second machine would have it)."""
    monkeypatch.setenv(VERSION_ENV, version)
    purge()
    return importlib.import_module("tensorrt")


def _build(trt, onnx, profile=((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16)), **config) -> bytes:
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile

    network = NetworkFromOnnxPath(str(onnx), strongly_typed=int(trt.__version__.split(".")[0]) >= 10)
    return bytes(EngineBytesFromNetwork(network, CreateConfig(profiles=[Profile().add("images", *profile)], **config))())


@pytest.mark.emulated_tensorrt
def test_refuses_to_load_outside_the_tests(emulated_cudart):
    env = {k: v for k, v in environment("10.5.0.18", emulated_cudart).items() if k != VERSION_ENV}
    env = {**{k: v for k, v in os.environ.items() if k != VERSION_ENV}, **env}
    refused = subprocess.run([sys.executable, "-c", "import tensorrt"], env=env, capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
    assert refused.returncode != 0 and "test emulation" in refused.stderr and "not NVIDIA TensorRT" in refused.stderr
    env[VERSION_ENV] = "10.5.0.18"
    loaded = subprocess.run([sys.executable, "-c", "import tensorrt; print(tensorrt.__version__)"], env=env,
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert loaded.stdout.strip() == "10.5.0.18", loaded.stderr
    env[VERSION_ENV] = "12.0.0.1"
    unknown = subprocess.run([sys.executable, "-c", "import tensorrt"], env=env, capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
    assert unknown.returncode != 0 and "TensorRT 12.0.0.1 is not emulated" in unknown.stderr
    assert str(EMULATED) in env["PYTHONPATH"]


def test_names_are_gated_by_the_real_inventory(emulated_tensorrt):
    import tensorrt as trt

    major = int(emulated_tensorrt.version.split(".")[0])
    assert hasattr(trt.BuilderFlag, "FP16") == (major < 11)  # 11 removed the precision flags
    assert hasattr(trt, "IStreamReader") == (major == 10) and hasattr(trt, "IStreamReaderV2") == (major == 11)
    assert hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") == (major >= 10)
    assert not hasattr(trt, "NoSuchClass")
    with pytest.raises(NotImplementedError, match="Refitter exists in the real bindings but is not emulated"):
        trt.Refitter  # noqa: B018 - in every inventory, not emulated
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    assert not hasattr(runtime, "no_such_attribute")
    with pytest.raises(NotImplementedError, match="Runtime.max_threads"):
        runtime.max_threads  # noqa: B018
    with pytest.raises(AttributeError, match="read-only"):
        runtime.logger = None
    runtime.engine_host_code_allowed = True  # writable, as the inventory says
    assert runtime.engine_host_code_allowed is True
    assert int(trt.TensorIOMode.OUTPUT) == 2 and str(trt.DataType.FLOAT) == "DataType.FLOAT"
    assert trt.float32 is trt.DataType.FLOAT and trt.nptype(trt.float16) is np.float16


def test_real_polygraphy_builds_and_runs_a_plan(emulated_tensorrt, tmp_path):
    """Plans built and run by the real Polygraphy give onnxruntime's outputs; each session of its TrtRunner
    leaves one device buffer per output behind (Polygraphy 0.53.6 frees them nowhere)."""
    import onnxruntime as ort
    import tensorrt as trt
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    from tests.emulation import live_cuda

    onnx = tiny_classifier(tmp_path / "tiny.onnx")
    plan = _build(trt, onnx)
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    reference = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    before = live_cuda()[0]
    runner = TrtRunner(EngineFromBytes(plan))
    with runner:
        for batch in (1, 3, 4):
            assert np.array_equal(runner.infer({"images": x[:batch]})["logits"].copy(), reference[:batch])
        leaked = list(runner.output_allocator.buffers.values())
    assert live_cuda()[0] == before + 1 == before + len(leaked)
    for buffer in leaked:
        buffer.free()


def test_deserialize_follows_the_version_rules(emulated_tensorrt, tmp_path, monkeypatch):
    import tensorrt as trt

    onnx = tiny_classifier(tmp_path / "tiny.onnx")
    compatible = _build(trt, onnx, version_compatible=True)
    plain = _build(trt, onnx)
    errors = []

    class Logger(trt.ILogger):
        def log(self, severity, msg):
            errors.append(msg)

    def load(blob, host_code=True):
        runtime = trt.Runtime(Logger())
        runtime.engine_host_code_allowed = host_code
        return runtime.deserialize_cuda_engine(blob)

    assert load(plain) is not None and load(compatible) is not None
    assert load(compatible, host_code=False) is None and "engine_host_code_allowed" in errors[-1]
    assert load(b"STAND-IN BYTES, NOT AN ENGINE") is None and "magic tag" in errors[-1]
    later = {"8.6.3.1": "10.5.0.18", "10.5.0.18": "11.4.0.106", "11.4.0.106": "11.4.0.107"}[emulated_tensorrt.version]
    trt = _switch(later, monkeypatch)
    assert load(plain) is None and f"this runtime is {later}" in errors[-1]
    assert load(compatible) is not None  # 8 -> 10, 10 -> 11, and within 11
    if emulated_tensorrt.version.startswith("8."):
        trt = _switch("11.4.0.106", monkeypatch)
        assert load(compatible) is None and "of TensorRT 8 does not load in TensorRT 11" in errors[-1]


def test_set_input_shape_outside_the_profile_fails(emulated_tensorrt, tmp_path):
    import tensorrt as trt
    from polygraphy.backend.trt import EngineFromBytes

    engine = EngineFromBytes(_build(trt, tiny_classifier(tmp_path / "tiny.onnx")))()
    context = engine.create_execution_context()
    assert context.set_input_shape("images", (4, 3, 16, 16)) and tuple(context.get_tensor_shape("logits")) == (4, 10)
    assert not context.set_input_shape("images", (5, 3, 16, 16))  # profile max is 4
    assert not context.set_input_shape("images", (2, 3, 16, 17))  # a fixed dimension
    assert tuple(context.get_tensor_shape("images")) == (4, 3, 16, 16)  # the last good shape stays


def test_each_context_runs_in_the_profile_selected_for_it(emulated_tensorrt, tmp_path):
    """Rule 'optimization_profile': a two-profile plan, each profile selected as Polygraphy's TrtRunner does
    (optimization_profile=, set_optimization_profile_async on its stream), shapes checked against the selected
    profile only; an index the engine lacks is refused."""
    import onnxruntime as ort
    import tensorrt as trt
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineBytesFromNetwork,
        EngineFromBytes,
        NetworkFromOnnxPath,
        Profile,
        TrtRunner,
    )

    onnx = tiny_classifier(tmp_path / "tiny.onnx")
    network = NetworkFromOnnxPath(str(onnx), strongly_typed=int(trt.__version__.split(".")[0]) >= 10)
    shapes = lambda *batches: [(b, 3, 16, 16) for b in batches]  # noqa: E731
    profiles = [Profile().add("images", *shapes(1, 4, 8)), Profile().add("images", *shapes(1, 1, 2))]
    plan = bytes(EngineBytesFromNetwork(network, CreateConfig(profiles=profiles))())
    engine = EngineFromBytes(plan)()
    assert engine.num_optimization_profiles == 2
    assert [tuple(d) for d in engine.get_tensor_profile_shape("images", 1)] == shapes(1, 1, 2)
    x = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
    reference = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    with TrtRunner(engine, optimization_profile=1) as runner:
        assert runner.context.active_optimization_profile == 1
        assert np.array_equal(runner.infer({"images": x[:2]})["logits"].copy(), reference[:2])
        assert not runner.context.set_input_shape("images", (3, 3, 16, 16))  # profile 1's max is 2
        runner.set_profile(0)
        assert runner.context.set_input_shape("images", (8, 3, 16, 16))
        assert not runner.context.set_optimization_profile_async(2, runner.stream.ptr)
        assert runner.context.active_optimization_profile == 0
        leaked = list(runner.output_allocator.buffers.values())
    for buffer in leaked:
        buffer.free()


def test_output_allocator_callbacks_come_in_each_versions_order(emulated_tensorrt, tmp_path):
    """8.x calls reallocate_output; 10 and 11 reallocate_output_async, whose default calls reallocate_output;
    then notify_shape (NvInferRuntime.h of each version)."""
    import tensorrt as trt
    from polygraphy import cuda
    from polygraphy.backend.trt import EngineFromBytes

    engine = EngineFromBytes(_build(trt, tiny_classifier(tmp_path / "tiny.onnx")))()
    calls, buffers = [], []

    class Recording(trt.IOutputAllocator):
        def reallocate_output(self, name, memory, size, alignment):
            calls.append("reallocate_output")
            buffers.append(cuda.DeviceArray.raw((size,)))
            return buffers[-1].ptr

        def notify_shape(self, name, shape):
            calls.append(f"notify_shape {tuple(shape)}")

    context = engine.create_execution_context()
    stream, inputs = cuda.Stream(), cuda.DeviceArray.raw((2 * 3 * 16 * 16 * 4,))
    try:
        context.set_input_shape("images", (2, 3, 16, 16))
        context.set_tensor_address("images", inputs.ptr)
        context.set_output_allocator("logits", Recording())
        assert context.execute_async_v3(stream.ptr)
        assert calls == ["reallocate_output", "notify_shape (2, 10)"]

        class Async(Recording):
            def reallocate_output_async(self, name, memory, size, alignment, stream):
                calls.append("reallocate_output_async")
                return super().reallocate_output(name, memory, size, alignment)

        calls.clear()
        context.set_output_allocator("logits", Async())
        assert context.execute_async_v3(stream.ptr)
        expected = ["reallocate_output"] if trt.__version__.startswith("8.") else ["reallocate_output_async",
                                                                                    "reallocate_output"]
        assert calls == [*expected, "notify_shape (2, 10)"]
    finally:
        for buffer in [inputs, *buffers]:
            buffer.free()
        stream.free()


def test_strong_typing_refuses_precision_flags(emulated_tensorrt, tmp_path):
    import tensorrt as trt

    if not hasattr(trt.BuilderFlag, "FP16"):  # 11.x: nothing to refuse, the flag is gone
        assert trt.__version__.startswith("11.")
        return
    builder = trt.Builder(trt.Logger(trt.Logger.INTERNAL_ERROR))
    strongly = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    flags = 1 << int(strongly if strongly is not None else trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    assert trt.OnnxParser(network, builder.logger).parse_from_file(str(tiny_classifier(tmp_path / "tiny.onnx")))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("images", (1, 3, 16, 16), (1, 3, 16, 16), (2, 3, 16, 16))
    config.add_optimization_profile(profile)
    config.set_flag(trt.BuilderFlag.FP16)
    assert (builder.build_serialized_network(network, config) is None) == (strongly is not None)


def test_cuda_stand_in_checks_copy_directions_and_handles(emulated_tensorrt):
    import tensorrt  # noqa: F401 - loads the stand-in's registry for live_cuda
    from polygraphy import cuda
    from polygraphy.exception import PolygraphyException

    from tests.emulation import live_cuda

    wrapper = cuda.wrapper()
    host = np.zeros(16, np.uint8)
    device = cuda.DeviceArray.raw((16,))
    errors = live_cuda()[3]
    try:
        with pytest.raises(PolygraphyException, match="CUDA Error: 1"):  # a host pointer given as device memory
            wrapper.memcpy(host.ctypes.data, host.ctypes.data, 16, cuda.MemcpyKind.DeviceToHost)
        with pytest.raises(PolygraphyException, match="CUDA Error: 1"):  # 17 bytes out of a 16-byte allocation
            wrapper.memcpy(device.ptr, host.ctypes.data, 17, cuda.MemcpyKind.HostToDevice)
        wrapper.memcpy(device.ptr, host.ctypes.data, 16, cuda.MemcpyKind.HostToDevice)
        with pytest.raises(PolygraphyException, match="CUDA Error: 400"):
            wrapper.stream_synchronize(12345)
    finally:
        device.free()
    with pytest.raises(PolygraphyException, match="CUDA Error: 1"):
        wrapper.free(host.ctypes.data)  # host memory: never allocated
    assert live_cuda()[3] == errors + 4
