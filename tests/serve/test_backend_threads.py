"""The Python-based backends' threads, loaded here as a stub loads them (Triton's triton_python_backend_utils is the
stub's own; the backends use it only per request, so an empty module stands for it at import): the served model
shares the cores with tritonserver and often the client, so its idle threads sleep instead of spin-waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tritonize.manifest import Manifest
from tritonize.model_repository import AOTI_MODEL, TORCH_MODEL
from tritonize.serve.embedded import python_backend_of

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub_modules(monkeypatch):
    """This process as a stub imports the backends; what they imported goes with the test."""
    before = set(sys.modules)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    yield
    for name in set(sys.modules) - before:
        if name.startswith("tritonize.serve.backends."):
            del sys.modules[name]


def test_onnxruntime_sessions_threads_sleep_when_idle(small_artifacts, stub_modules):
    from tritonize.serve.backends.batching import Placement, TensorSpec
    from tritonize.serve.backends.onnxruntime.model import TritonPythonModel

    model = TritonPythonModel()
    model.inputs = [TensorSpec("input", np.dtype("float32"), (3, 224, 224))]
    model.outputs = [TensorSpec("output", np.dtype("float32"), (1000,))]
    model.load(small_artifacts / "model.onnx", Placement("CPU", 0, 2))
    options = model.session.get_session_options()
    assert options.intra_op_num_threads == 2 and options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"


TORCH_STUB = """
import os, sys, time, types
from pathlib import Path

import numpy as np

sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
assert "torch" not in sys.modules
from tritonize.serve.backends.batching import Placement, TensorSpec
backend, path, input_name, output_name, idle_s = sys.argv[1:]
TritonPythonModel = __import__(f"tritonize.serve.backends.{backend}.model", fromlist=["x"]).TritonPythonModel

model = TritonPythonModel()
model.inputs = [TensorSpec(input_name, np.dtype("float32"), (3, 224, 224))]
model.outputs = [TensorSpec(output_name, np.dtype("float32"), (1000,))]
model.load(Path(path), Placement("CPU", 0, 2))
model.run([np.zeros((2, 3, 224, 224), np.float32)])
idle = time.process_time()
time.sleep(float(idle_s))
print(os.environ["OMP_WAIT_POLICY"], round(time.process_time() - idle, 3))
"""


@pytest.mark.parametrize("chosen", [None, "ACTIVE"])
@pytest.mark.parametrize("backend", [TORCH_MODEL, AOTI_MODEL], ids=lambda b: b.name)
def test_torch_threads_sleep_when_idle_unless_the_user_chose(backend, chosen, request, tmp_path):
    """OpenMP reads OMP_WAIT_POLICY when torch loads it: the backend sets it before. Its threads then use no CPU
    while the model waits for a request; with the user's ACTIVE they spin the whole time. The same for TorchScript
    (pytorch) and an AOTInductor package (torch_aoti, compiled once per run: `aoti_artifacts`), whose kernels are
    OpenMP parallel regions as well."""
    fixture = "aoti_artifacts" if backend is AOTI_MODEL else "small_artifacts"
    artifacts = request.getfixturevalue(fixture)
    package = artifacts / Manifest.load(artifacts).artifacts[backend.artifact].file
    python_backend = python_backend_of(backend)
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"PYTHONPATH": str(CHECKOUT), **({"OMP_WAIT_POLICY": chosen} if chosen else {})})
    env.pop("OMP_NUM_THREADS", None)  # the backend's two threads, not make test's one
    env["TRITONIZE_SCRATCH"] = str(tmp_path)  # where torch_aoti unpacks the package (the server's workdir when served)
    # idle for half a second; a spinning thread, given the time a busy machine leaves it, is clearer over two
    idle_s = 2.0 if chosen else 0.5
    done = subprocess.run([sys.executable, "-c", TORCH_STUB, python_backend, str(package), backend.default_input,
                           backend.default_output, str(idle_s)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    policy, idle_cpu = done.stdout.split()
    assert policy == (chosen or "PASSIVE")
    if chosen:
        assert float(idle_cpu) > 0.2, idle_cpu  # a spinning thread: most of the 2 s on a quiet machine
    else:
        assert float(idle_cpu) < 0.05, idle_cpu
