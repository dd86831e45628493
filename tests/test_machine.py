"""The machine probes (tritonize/machine.py): GPU visibility, Docker's GPU, which CUDA runtime the plan
check loads, and what the GPU is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tritonize import machine


def test_gpu_visible_reads_the_driver_nodes_and_wsl2s(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert not machine.gpu_visible(tmp_path)
    (tmp_path / "dxg").touch()  # WSL2 exposes the GPU as /dev/dxg, with no /dev/nvidia* (N12)
    assert machine.gpu_visible(tmp_path)
    (tmp_path / "dxg").unlink()
    (tmp_path / "nvidia0").touch()
    assert machine.gpu_visible(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not machine.gpu_visible(tmp_path)


def test_docker_without_a_runtime_named_nvidia_is_probed_for_real(standins, monkeypatch):
    """The NVIDIA Container Toolkit's hook, CDI and WSL2 give `--gpus all` with no runtime named nvidia (N12)."""
    image = "nvcr.io/nvidia/tritonserver:24.10-py3"
    monkeypatch.setenv("STANDIN_DOCKER_RUNTIMES", json.dumps({"runc": {}}))
    assert "lists no NVIDIA runtime" in machine.docker_gpu_problem()
    assert machine.docker_gpu_problem(image) is None  # `docker run --gpus all IMAGE true` worked
    monkeypatch.setenv("STANDIN_DOCKER_GPU", "0")
    assert "could not select device driver" in machine.docker_gpu_problem(image)
    monkeypatch.setenv("STANDIN_DOCKER_RUNTIMES", json.dumps({"nvidia": {}, "runc": {}}))
    assert machine.docker_gpu_problem(image) is None  # a listed runtime needs no probe


def test_gpu_facts_come_from_the_cuda_runtime_not_torch(emulated_tensorrt, monkeypatch):
    """torch here has no CUDA; the CUDA runtime (the stand-in) names the GPU (N11)."""
    assert machine.gpu_facts() == {"name": "Emulated GPU (tritonize tests, sm_86)", "compute_capability": "8.6",
                                   "count": 1}
    monkeypatch.setenv("TRITONIZE_EMULATED_GPU_CC", "9.0")
    assert machine.gpu_facts()["compute_capability"] == "9.0"


def test_gpu_facts_never_fail(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "find_cudart", lambda: machine.CudaRuntime(None))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    facts = machine.gpu_facts()
    assert set(facts) == {"error"} and "no CUDA runtime" in facts["error"] and "no nvidia-smi" in facts["error"]


@pytest.mark.emulated_tensorrt
def test_the_cuda_13_wheels_runtime_is_the_one_polygraphy_loads(emulated_cudart, tmp_path):
    """The CUDA 13 runtime wheel puts libcudart.so.13 in nvidia/cu13/lib, where Polygraphy 0.53.6 does not
    look (N7): the plan check finds it there and loads it, here the CUDA stand-in in that place."""
    from tests.emulation import EMULATED, ROOT, environment

    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    cudart = shutil.copy(emulated_cudart, site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    env = {**os.environ, **environment("10.5.0.18", cudart)}
    env["LD_LIBRARY_PATH"] = os.environ.get("LD_LIBRARY_PATH", "")  # nothing of ours on the search path
    env["PYTHONPATH"] = os.pathsep.join([str(EMULATED), str(ROOT), str(site)])
    script = f"""
import numpy as np, onnxruntime as ort
from pathlib import Path
from tritonize import machine
from tritonize.convert.plan_check import verify_plan
from tritonize.verify import Tolerance
from tests.convert.test_plan_check import _emulated_plan
out = Path({str(tmp_path)!r})
assert machine.find_cudart().path == Path({str(cudart)!r}), machine.find_cudart()
plan = _emulated_plan(out)
x = np.ones((2, 3, 16, 16), np.float32)
ref = ort.InferenceSession(str(out / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {{"images": x}})[0]
print(verify_plan(plan, ("images", "logits"), x, ref, Tolerance(), [1, 2], "ones").passed)
"""
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("True"), done.stdout + done.stderr


@pytest.mark.emulated_tensorrt
def test_n22_a_cuda_13_runtime_the_driver_refuses_does_not_hide_the_working_cuda_12_one(emulated_cudart, tmp_path):
    """N22: a venv that still holds the CUDA 13 runtime wheel (nvidia/cu13/lib) beside the CUDA 12 one
    (nvidia/cuda_runtime/lib), under a driver older than R580: the CUDA 13 runtime answers every call with 35
    (cudaErrorInsufficientDriver). The GPU probe (`machine.cuda_gpu`, which the builders' gpu_problem, the
    embedded tensorrt backend and `repo check` ask) and the plan check use the CUDA 12 runtime, which answers;
    with the CUDA 13 one alone, the probe names it and its code."""
    from tests.emulation import EMULATED, ROOT, build_cudart, environment

    site = tmp_path / "site"
    cu13, cu12 = site / "nvidia" / "cu13" / "lib", site / "nvidia" / "cuda_runtime" / "lib"
    cu12.mkdir(parents=True)
    refusing = build_cudart(tmp_path / "old-driver", device_count_error=35).rename(tmp_path / "libcudart.so.13")
    working = Path(shutil.copy(emulated_cudart, cu12 / "libcudart.so.12"))
    env = {**os.environ, **environment("10.5.0.18", working)}
    env["LD_LIBRARY_PATH"] = os.environ.get("LD_LIBRARY_PATH", "")  # nothing of ours on the search path
    env["PYTHONPATH"] = os.pathsep.join([str(EMULATED), str(ROOT), str(site)])

    def run(script: str) -> str:
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    cu13.mkdir(parents=True)
    shutil.move(refusing, cu13 / "libcudart.so.13")
    both = run(f"""
import numpy as np, onnxruntime as ort
from pathlib import Path
from tritonize.convert.builders import gpu_problem
from tritonize.convert.plan_check import verify_plan
from tritonize.machine import cuda_gpu
from tritonize.verify import Tolerance
from tests.convert.test_plan_check import _emulated_plan
assert gpu_problem() is None, gpu_problem()
assert cuda_gpu()["count"] == 1, cuda_gpu()
out = Path({str(tmp_path)!r})
plan = _emulated_plan(out)
x = np.ones((2, 3, 16, 16), np.float32)
ref = ort.InferenceSession(str(out / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {{"images": x}})[0]
print(verify_plan(plan, ("images", "logits"), x, ref, Tolerance(), [1, 2], "ones").passed)
""")
    assert both.endswith("True"), both

    (cu12 / "libcudart.so.12").unlink()
    alone = run("from tritonize.convert.builders import gpu_problem; print(gpu_problem())")
    assert f"{cu13 / 'libcudart.so.13'}: 35 (cudaErrorInsufficientDriver)" in alone, alone


@pytest.mark.parametrize("value, threads", [("1", 1), ("3", 3), (None, 0), ("", 0), ("two", 0)])
def test_onnxruntime_computes_on_the_threads_torch_does(value, threads, tmp_path, monkeypatch):
    """The verifying and calibrating onnxruntime sessions take OMP_NUM_THREADS as torch does (two test workers on
    two cores: one thread each, not two that spin); unset, onnxruntime's own choice (0)."""
    import onnx
    from onnx import TensorProto, helper

    from tritonize.convert.precision import ort_session
    from tritonize.machine import compute_threads

    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "relu.onnx")
    assert compute_threads() == threads
    assert ort_session(tmp_path / "relu.onnx").get_session_options().intra_op_num_threads == threads
