"""The embedded engine against the real bundled tritonserver, with the project's Python-based backends."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tritonize.errors import TritonizeError
from tritonize.serve.embedded import embedded_server
from tritonize.verify import Tolerance, compare

SAME = Tolerance(max_rel_to_scale=1e-5, min_top1_agreement=1.0)
INPUT_SHAPE = (3, 224, 224)


def _inputs(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, *INPUT_SHAPE), dtype=np.float32)


def _infer(client, model: str, input_name: str, output_name: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput(input_name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy(output_name)


def _infer_concurrently(client, model: str, inputs: list[np.ndarray]) -> list:
    """Send every input at once (async gRPC); returns each result's output array or its error."""
    import queue

    import tritonclient.grpc as grpcclient

    done: queue.Queue = queue.Queue()
    for i, x in enumerate(inputs):
        tensor = grpcclient.InferInput("input", list(x.shape), grpcclient.np_to_triton_dtype(x.dtype))
        tensor.set_data_from_numpy(x)
        client.async_infer(model, [tensor], callback=lambda result, error, i=i: done.put((i, result, error)))
    results = [None] * len(inputs)
    for _ in inputs:
        i, result, error = done.get(timeout=120)
        results[i] = error if error is not None else result.as_numpy("output")
    return results


@pytest.fixture(scope="module")
def local_onnx(small_artifacts):
    return _onnx_runner(small_artifacts)


def _onnx_runner(artifacts):
    import onnxruntime as ort

    session = ort.InferenceSession(str(artifacts / "model.onnx"), providers=["CPUExecutionProvider"])
    return lambda x: session.run(["output"], {"input": x})[0]


@pytest.fixture(scope="module")
def client(small_server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(small_server.grpc_url) as c:
        yield c


def _group_members(pgid: int) -> dict[int, str]:
    """pid -> command line of the live (non-zombie) processes in process group `pgid`."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members[int(entry.name)] = cmdline
    return members


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# ------------------------------------------------------------------ the shared small server


def test_models_ready_and_endpoints(small_server):
    served = ["onnx_model", "torch_model", "preprocess", "preprocess_uint8", "onnx_classifier", "onnx_classifier_uint8",
              "torch_classifier", "torch_classifier_uint8"]
    assert small_server.models == {name: ("READY", "") for name in served}
    assert small_server.grpc_url.startswith("127.0.0.1:")
    with urllib.request.urlopen(f"{small_server.http_url}/v2/health/ready", timeout=5) as r:
        assert r.status == 200


@pytest.mark.parametrize("batch", [1, 5])
def test_onnx_results_equal_local_onnxruntime(small_server, client, local_onnx, batch):
    x = _inputs(batch, seed=batch)
    served = _infer(client, "onnx_model", "input", "output", x)
    assert served.shape == (batch, 1000)
    assert compare(local_onnx(x), served, SAME).passed


def test_torch_results_equal_local_torchscript(small_server, client, small_artifacts):
    import torch

    module = torch.jit.load(str(small_artifacts / "model.pt")).eval()
    x = _inputs(3, seed=7)
    with torch.inference_mode():
        local = module(torch.from_numpy(x)).numpy()
    served = _infer(client, "torch_model", "input__0", "output__0", x)
    assert compare(local, served, SAME).passed


def test_bad_request_fails_alone(small_server, client, local_onnx):
    good = [_inputs(1, seed=s) for s in (1, 2)]
    wrong_shape = np.zeros((1, 3, 100, 100), np.float32)
    wrong_dtype = _inputs(1).astype(np.float64)
    results = _infer_concurrently(client, "onnx_model", [good[0], wrong_shape, good[1], wrong_dtype])
    from tritonclient.utils import InferenceServerException

    assert isinstance(results[1], InferenceServerException) and "shape" in str(results[1])
    assert isinstance(results[3], InferenceServerException) and "FP64" in str(results[3])
    for x, served in zip(good, (results[0], results[2])):
        assert compare(local_onnx(x), served, SAME).passed
    assert compare(local_onnx(good[0]), _infer(client, "onnx_model", "input", "output", good[0]), SAME).passed


def _onnx_model_counters(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        text = r.read().decode()
    counters = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in ("nv_inference_count", "nv_inference_exec_count", "nv_inference_request_success") \
                and 'model="onnx_model"' in rest:
            counters[name] = float(line.rsplit(" ", 1)[1])
    return counters


def _settled_counters(metrics_url: str) -> dict[str, float]:
    """The counters once two reads 0.3 s apart agree: the backend reports a batch's statistics after its
    responses left, so an earlier test's last request may still be landing (once, a half-reported one made
    the difference 1 image instead of 3)."""
    deadline = time.monotonic() + 10
    previous = _onnx_model_counters(metrics_url)
    while True:
        time.sleep(0.3)
        current = _onnx_model_counters(metrics_url)
        if current == previous:
            return current
        assert time.monotonic() < deadline, f"the counters keep moving: {previous} -> {current}"
        previous = current


def test_metrics_count_inferences(small_server, client):
    """The counters move by exactly one request of three images run as one execution (earlier tests used
    the same server: only the difference says what this request did)."""
    before = _settled_counters(small_server.metrics_url)
    _infer(client, "onnx_model", "input", "output", _inputs(3))
    _wait_for(lambda: all(v > before[k] for k, v in _onnx_model_counters(small_server.metrics_url).items()),
              "the counters", timeout=10)
    after = _settled_counters(small_server.metrics_url)
    assert set(before) == set(after) == {"nv_inference_count", "nv_inference_exec_count", "nv_inference_request_success"}
    assert {name: after[name] - before[name] for name in after} == {
        "nv_inference_count": 3, "nv_inference_exec_count": 1, "nv_inference_request_success": 1}


# ------------------------------------------------------------------ batching and instances


@pytest.fixture(scope="module")
def batching_server(resnet18_artifacts, tmp_path_factory):
    """onnx_model with a 20 ms queue delay (dynamic batching is invisible at 100 us on CPU) and two instances.
    resnet18, not the suite's classifier: requests queue, and so batch, only behind instances that are busy (the
    suite's classifier answers a request in about the time it takes to send one)."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("batching") / "models"
    build_repository(resnet18_artifacts, repo,
                            RepoOptions(kind="cpu", queue_delay_us=20_000, instances=2, models=("onnx_model",), warmup=False,
                                        ensembles=False))
    with embedded_server(repo) as info:
        yield info


def _onnx_stats(client) -> tuple[int, int]:
    stats = client.get_inference_statistics("onnx_model", as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def test_dynamic_batching_under_concurrency(batching_server, resnet18_artifacts):
    import tritonclient.grpc as grpcclient

    local_onnx = _onnx_runner(resnet18_artifacts)

    inputs = [_inputs(1, seed=100 + i) for i in range(48)]
    with grpcclient.InferenceServerClient(batching_server.grpc_url) as client:
        for _ in range(3):  # a busy machine may send one round's requests too far apart to queue: then another round
            inferences_before, executions_before = _onnx_stats(client)
            results = _infer_concurrently(client, "onnx_model", inputs)
            deadline = time.monotonic() + 10  # the backend reports a batch's statistics after its responses left
            while _onnx_stats(client)[0] - inferences_before < len(inputs) and time.monotonic() < deadline:
                time.sleep(0.05)
            inferences, executions = _onnx_stats(client)
            # Every response belongs to its own request after the batch was split back.
            for x, served in zip(inputs, results):
                assert compare(local_onnx(x), served, SAME).passed
            assert inferences - inferences_before == len(inputs)
            if executions - executions_before <= len(inputs) // 3:
                break
    assert executions - executions_before <= len(inputs) // 3, "requests were not batched together in 3 rounds"


def test_two_instances_both_execute(batching_server):
    import tritonclient.grpc as grpcclient

    stubs = {pid: cmd for pid, cmd in _group_members(batching_server.pid).items() if "triton_python_backend_stub" in cmd}
    instances = {name: pid for name in ("onnx_model_0_0", "onnx_model_0_1") for pid, cmd in stubs.items() if f" {name} " in cmd}
    assert len(instances) == 2, stubs
    before = {name: _cpu_seconds(pid) for name, pid in instances.items()}
    with grpcclient.InferenceServerClient(batching_server.grpc_url) as client:
        _infer_concurrently(client, "onnx_model", [_inputs(1, seed=i) for i in range(48)])
    used = {name: _cpu_seconds(pid) - before[name] for name, pid in instances.items()}
    assert all(seconds > 0.05 for seconds in used.values()), used
    # Each instance gets its share of the cores, not all of them.
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    log = Path(batching_server.log_path).read_text()
    for name in instances:
        assert f"{name}: onnxruntime backend on CPU 0, {threads} intra-op thread(s)" in log


# ------------------------------------------------------------------ what cannot run here


def _derive_model(repo: Path, source: str, name: str, platform: str, config_file: str = "config.pbtxt") -> None:
    """A model directory whose config is `source`'s with another name and platform, and an empty
    version directory: the backend must refuse it before it looks for a model file."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((repo / source / config_file).read_text(), model_config_pb2.ModelConfig())
    config.name, config.platform = name, platform
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    shutil.copy2(repo / source / "labels.txt", repo / name / "labels.txt")


def test_gpu_repository_served_unchanged_without_gpu(small_artifacts, tmp_path):
    """A repository built for the GPU (KIND_GPU configs, a trt_model) on this GPU-less machine: the
    cpu variants are chosen automatically, trt_model (no cpu variant) is UNAVAILABLE with Triton's
    reason, the others serve."""
    from tritonize.machine import gpu_visible
    from tritonize.repository_builder import RepoOptions, build_repository

    if gpu_visible():
        pytest.skip("a GPU is visible: the automatic cpu variant is not chosen here")
    repo = tmp_path / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="gpu", models=("onnx_model",), warmup=False, ensembles=False))
    _derive_model(repo, "onnx_model", "trt_model", "tensorrt_plan")  # KIND_GPU, like the builder's trt_model
    with embedded_server(repo) as info:
        assert info.model_config_name == "cpu"
        assert info.models["onnx_model"] == ("READY", "")
        state, reason = info.models["trt_model"]
        assert state == "UNAVAILABLE" and "KIND_GPU" in reason and "no GPUs" in reason
    with embedded_server(repo, model_config_name="config") as info:
        assert info.model_config_name is None
        assert info.models["onnx_model"][0] == "UNAVAILABLE" and "no GPUs" in info.models["onnx_model"][1]


def test_tensorrt_backend_says_what_is_missing(small_artifacts, tmp_path, local_onnx):
    """The tensorrt backend itself refuses at initialize, naming what is missing; the others serve."""
    import importlib.util

    from tritonize.machine import gpu_visible
    from tritonize.repository_builder import RepoOptions, build_repository

    if importlib.util.find_spec("tensorrt") is not None and gpu_visible():
        pytest.skip("TensorRT and a GPU are present: the tensorrt backend can run here")
    repo = tmp_path / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    # KIND_CPU so Triton hands the model to the backend instead of refusing it for lack of a GPU.
    _derive_model(repo, "onnx_model", "trt_model", "tensorrt_plan")
    with embedded_server(repo) as info:
        state, reason = info.models["trt_model"]
        assert state == "UNAVAILABLE"
        assert "TensorRT plans need TensorRT and an NVIDIA GPU" in reason
        if importlib.util.find_spec("tensorrt") is None:
            assert "`tensorrt` Python package is not installed" in reason
        assert info.models["onnx_model"] == ("READY", "")
        import tritonclient.grpc as grpcclient

        with grpcclient.InferenceServerClient(info.grpc_url) as client:
            x = _inputs(2)
            assert compare(local_onnx(x), _infer(client, "onnx_model", "input", "output", x), SAME).passed


# ------------------------------------------------------------------ life cycle and errors


@pytest.fixture(scope="module")
def onnx_repo(small_artifacts, tmp_path_factory) -> Path:
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("onnx_only") / "models"
    build_repository(small_artifacts, repo,
                            RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    return repo


def test_stop_leaves_no_process_no_temp_files_and_no_shared_memory(onnx_repo):
    """Also when a stub died under a request: Triton then never finishes unloading its instance, so
    neither removes the stub's shared-memory region (unsupervised here: the supervisor would reload it)."""
    import signal

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from tests.serve.helpers import stub_regions
    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.supervisor import stub_processes

    with EmbeddedServer(onnx_repo, supervise=False) as info:
        members = _group_members(info.pid)
        assert info.pid in members
        assert any("triton_python_backend_stub" in cmd for cmd in members.values())
        workdir = Path(info.log_path).parent
        assert workdir.is_dir()
        regions = [Path("/dev/shm") / r for r in stub_regions(info.pid).values()]
        assert regions and all(r.exists() for r in regions)
        os.kill(stub_processes(info.pid)["onnx_model_0_0"], signal.SIGKILL)
        with grpcclient.InferenceServerClient(info.grpc_url) as client, pytest.raises(InferenceServerException):
            _infer(client, "onnx_model", "input", "output", _inputs(1))
    assert _group_members(info.pid) == {}
    assert not workdir.exists()
    assert not [r for r in regions if r.exists()]


def test_a_killed_server_leaves_no_python_backend_folder_in_tmp(onnx_repo):
    """Triton's Python backend makes /tmp/python_env_XXXXXX at its start and removes it only when it is finalized:
    a tritonserver killed (SIGKILL, the OOM killer) left one per start (216 on this machine after a day of tests).
    The server marks the one it made as its own while it runs, and its stop removes it; one made beside it, by
    another server, stays."""
    import signal

    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.leftovers import MARK, python_envs

    before = python_envs()
    with EmbeddedServer(onnx_repo, supervise=False) as info:
        marked = [f for f in python_envs() - before if (f / MARK).is_file()]
        assert len(marked) == 1 and os.listdir(marked[0]) == [MARK]  # onnx_repo's one backend: one folder
        assert (marked[0] / MARK).read_text().startswith(f"tritonserver {info.pid} ")
        assert f"owner {os.getpid()} " in (marked[0] / MARK).read_text()
        other = Path("/tmp/python_env_" + os.urandom(3).hex())  # another server's, in use: not empty
        other.mkdir()
        (other / "env").mkdir()
        os.kill(info.pid, signal.SIGKILL)
    try:
        assert not marked[0].exists() and other.exists()
    finally:
        shutil.rmtree(other)


def test_a_stop_removes_only_its_own_servers_folders_beside_a_foreign_server(onnx_repo):
    """A server started beside ours (another user's, another session's) makes its own /tmp/python_env_XXXXXX while
    ours runs: ours, killed and stopped, removes its own and leaves the foreign server's, which serves on and
    removes it itself when it stops (Triton's Python backend removes the folder it made at its finalize, and aborts
    when it is gone). Which folder is whose is told by that: the folders the foreign server's clean stop removes are
    its own. The machine is shared: other servers' folders come and go meanwhile, and an older tritonize's stop beside
    may take the foreign server's folder too (issue 43), which shows as its abort: then the test is run again."""
    import signal

    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.leftovers import python_envs

    for _ in range(3):
        before = python_envs()
        ours, foreign = EmbeddedServer(onnx_repo, supervise=False), EmbeddedServer(onnx_repo, supervise=False)
        try:
            info = ours.start()
            made_by_ours = python_envs() - before  # its one (onnx_repo has one backend), and any made beside meanwhile
            started = python_envs()
            foreign.start()
            made_by_foreign = python_envs() - started  # its one, and any made beside meanwhile
            os.kill(info.pid, signal.SIGKILL)
            ours.stop()
            removed = made_by_ours - python_envs()
            kept = made_by_foreign & python_envs()
            process = foreign.server.process
            foreign.stop()
        finally:
            ours.stop()
            foreign.stop()
        if process.returncode == 0 and removed:
            break
    assert process.returncode == 0, f"the foreign server's folder was gone before it stopped: it exited {process.returncode}"
    assert removed, "the killed server's folder is still there"
    assert kept - python_envs(), "the foreign server's folder was gone before it stopped"


def test_port_in_use_is_a_clear_error(onnx_repo):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TritonizeError, match=rf"port {port} on 127.0.0.1 is already in use.*--grpc-port"):
            with embedded_server(onnx_repo, grpc_port=port):
                pass


def test_missing_repository_is_a_clear_error(tmp_path):
    with pytest.raises(TritonizeError, match="does not exist; build it with `tritonize repo build`"):
        with embedded_server(tmp_path / "nowhere"):
            pass


def test_invalid_repository_is_a_clear_error(onnx_repo, tmp_path):
    with pytest.raises(TritonizeError, match="no <model>/config.pbtxt"):
        with embedded_server(tmp_path):
            pass
    broken = tmp_path / "broken"
    shutil.copytree(onnx_repo, broken)
    config = broken / "onnx_model" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size", "max_batch_sise"))
    with pytest.raises(TritonizeError, match=r"onnx_model/config.pbtxt.*max_batch_sise"):
        with embedded_server(broken):
            pass


def test_server_that_never_gets_ready_is_stopped_with_its_log(onnx_repo):
    """A readiness timeout stops the server and reports the log's tail."""
    with pytest.raises(TritonizeError, match=r"(?s)not ready within 0 s.*server log"):
        with embedded_server(onnx_repo, ready_timeout=0.01):
            pass


def test_stub_that_cannot_start_is_refused(tmp_path):
    """Trap 3: without the bundled libraries on LD_LIBRARY_PATH the stub cannot load; that must be an
    error before tritonserver would wait on it for minutes."""
    from tritonize.serve.embedded import BundledTriton, assemble_backend_dir, check_stub_environment, stub_environment

    triton = BundledTriton.find()
    backends = assemble_backend_dir(triton, tmp_path / "backends")
    stub = backends / "python" / triton.stub.name
    check_stub_environment(triton, stub, stub_environment(triton))  # the real environment works
    broken = {k: v for k, v in stub_environment(triton).items() if k != "LD_LIBRARY_PATH"}
    with pytest.raises(TritonizeError, match="Python backend stub cannot start"):
        check_stub_environment(triton, stub, broken)


def test_backends_run_the_tritonize_that_started_the_server(tmp_path):
    """The stub ignores PYTHONPATH and finds packages through the venv: each backend's model.py puts
    PYTHONPATH back, then pins the checkout that assembled it in front of everything, so a server
    started from another checkout never mixes code."""
    import tritonize
    from tritonize.serve.embedded import PACKAGE_ROOT, BundledTriton, assemble_backend_dir

    backends = assemble_backend_dir(BundledTriton.find(), tmp_path / "backends")
    assert PACKAGE_ROOT == Path(tritonize.__file__).resolve().parent.parent
    for name in ("onnxruntime", "pytorch", "tensorrt"):
        lines = (backends / name / "model.py").read_text().splitlines()
        assert lines[2].startswith("sys.path[:0] = [p for p in os.environ.get('PYTHONPATH', '')")
        assert lines[3].startswith(f"sys.path.insert(0, {str(PACKAGE_ROOT)!r})")
        assert lines[4].startswith(f"from tritonize.serve.backends.{name}.model import TritonPythonModel")


# ------------------------------------------------------------------ stopping

HELD_MODEL = '''
import json
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Says it is executing (a file), then holds its request until the test lets it go (another file)."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.executing = Path(parameters["executing"]["string_value"])
        self.release = Path(parameters["release"]["string_value"])

    def execute(self, requests):
        self.executing.touch()
        deadline = time.monotonic() + 60
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
                for r in requests]
'''


def _held_repository(root: Path) -> Path:
    repo = root / "models"
    (repo / "held" / "1").mkdir(parents=True)
    (repo / "held" / "1" / "model.py").write_text(HELD_MODEL)
    (repo / "held" / "config.pbtxt").write_text(
        'name: "held"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }\noutput { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }\n'
        'instance_group { kind: KIND_CPU count: 1 }\n'
        f'parameters {{ key: "executing" value {{ string_value: "{root / "executing"}" }} }}\n'
        f'parameters {{ key: "release" value {{ string_value: "{root / "release"}" }} }}\n')
    return repo


def test_stop_lets_an_in_flight_request_finish(tmp_path):
    """stop() sends SIGTERM and gives Triton its grace: a request already executing completes with its answer.
    (A SIGKILL would cut it off.) The model holds the request until the server has received the signal."""
    import threading

    import tritonclient.grpc as grpcclient

    from tritonize.serve.embedded import EmbeddedServer

    server = EmbeddedServer(_held_repository(tmp_path), supervise=False)
    info = server.start()
    stopping = threading.Thread(target=server.stop)
    try:
        answers = []
        with grpcclient.InferenceServerClient(info.grpc_url) as client:
            tensor = grpcclient.InferInput("IN", [2], "FP32")
            tensor.set_data_from_numpy(np.array([1.5, -2.0], np.float32))
            client.async_infer("held", [tensor], callback=lambda result, error: answers.append((result, error)))
            _wait_for(lambda: (tmp_path / "executing").exists(), "the model to execute the request")
            stopping.start()
            log = Path(info.log_path)
            _wait_for(lambda: answers or (log.exists() and "Signal (15) received" in log.read_text(errors="replace")),
                      "tritonserver to receive SIGTERM (or the request to end)")
            (tmp_path / "release").touch()
            _wait_for(lambda: answers, "the answer")
        result, error = answers[0]
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("OUT"), [3.0, -4.0])
    finally:
        (tmp_path / "release").touch()
        if stopping.ident is None:
            server.stop()
        stopping.join(60)
    assert _group_members(info.pid) == {}


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


STOPPABLE = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def on_term(*_):
    marker.write_text("SIGTERM")
    if sys.argv[2] == "exits":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
marker.with_suffix(".ready").touch()
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("behaviour, returncode", [("exits", 0), ("ignores", -9)])
def test_stop_sends_sigterm_first_and_sigkill_only_after_the_grace(tmp_path, behaviour, returncode):
    """A process group that exits on SIGTERM is not killed; one that ignores it gets SIGKILL after the grace."""
    import subprocess
    import sys

    from tritonize.processes import stop_process_group

    marker = tmp_path / "signal"
    process = subprocess.Popen([sys.executable, "-c", STOPPABLE, str(marker), behaviour], start_new_session=True)
    _wait_for(lambda: marker.with_suffix(".ready").exists(), "the handler")
    stop_process_group(process, grace=1.0)
    assert marker.read_text() == "SIGTERM" and process.returncode == returncode
    assert _group_members(process.pid) == {}


@pytest.mark.timeout(180)  # a serve that is not refused would serve until stopped
def test_numpy_2_is_refused_before_the_server_starts(onnx_repo, tmp_path, monkeypatch):
    """With numpy 2 the Python backend stub passes zeros; the installed distribution's version is what
    decides. A numpy-2.1.0.dist-info first on sys.path is what importlib.metadata then finds."""
    from tests.conftest import run_cli
    from tritonize.serve.process import choose_ports

    info = tmp_path / "site" / "numpy-2.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ports = choose_ports("127.0.0.1", None, None, None)  # free ones: another server may hold 8000-8002
    result = run_cli("serve", onnx_repo, "--http-port", ports.http, "--grpc-port", ports.grpc,
                     "--metrics-port", ports.metrics)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1 and "Traceback" not in result.output
    assert "numpy 2.1.0 is installed, but Triton's Python backend stub needs numpy<2" in errors[0]
    assert "pip install 'numpy<2'" in errors[0]
