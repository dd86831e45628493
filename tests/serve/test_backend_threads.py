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
from tritonize.serve.backends.pytorch.model import TritonPythonModel

model = TritonPythonModel()
model.inputs = [TensorSpec("input__0", np.dtype("float32"), (3, 224, 224))]
model.outputs = [TensorSpec("output__0", np.dtype("float32"), (1000,))]
model.load(Path(sys.argv[1]), Placement("CPU", 0, 2))
model.run([np.zeros((2, 3, 224, 224), np.float32)])
idle = time.process_time()
time.sleep(0.5)
print(os.environ["OMP_WAIT_POLICY"], round(time.process_time() - idle, 3))
"""


@pytest.mark.parametrize("chosen", [None, "ACTIVE"])
def test_torch_threads_sleep_when_idle_unless_the_user_chose(small_artifacts, chosen):
    """OpenMP reads OMP_WAIT_POLICY when torch loads it: the backend sets it before. Its threads then use no CPU
    while the model waits for a request; with the user's ACTIVE they spin the whole time."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"PYTHONPATH": str(CHECKOUT), **({"OMP_WAIT_POLICY": chosen} if chosen else {})})
    env.pop("OMP_NUM_THREADS", None)  # the backend's two threads, not make test's one
    done = subprocess.run([sys.executable, "-c", TORCH_STUB, str(small_artifacts / "model.pt")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    policy, idle_cpu = done.stdout.split()
    assert policy == (chosen or "PASSIVE")
    if chosen:
        assert float(idle_cpu) > 0.1, idle_cpu  # a spinning thread: most of the half second
    else:
        assert float(idle_cpu) < 0.05, idle_cpu
