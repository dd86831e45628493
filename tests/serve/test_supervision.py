"""`tritonize serve` heals a model whose backend stub died, and the client says which side failed.

A killed stub (`kill -9`, what the OOM killer does) leaves its model READY in Triton but failing
every request; a stopped one (SIGSTOP) is alive but answers nothing. Both are done here to the real
stubs of a real `tritonize serve`.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import numpy as np
import pytest

from tests.client.conftest import PHOTO
from tests.conftest import error_line, run_cli
from tests.serve.helpers import Serve
from tritonize.serve.supervisor import RELOAD_DELAYS_S, stub_processes


@pytest.fixture(scope="module")
def serve(small_artifacts, tmp_path_factory):
    """`tritonize serve` on four copies of the same ONNX model (quick to start, equal answers); each
    test does its harm to its own copy: onnx_model, onnx_hung, onnx_crashy, onnx_tuned."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("supervised") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    for name in ("onnx_hung", "onnx_crashy", "onnx_tuned"):
        shutil.copytree(repo / "onnx_model", repo / name)
        for config in [repo / name / "config.pbtxt", *(repo / name / "configs").glob("*.pbtxt")]:
            config.write_text(config.read_text().replace('name: "onnx_model"', f'name: "{name}"'))
    with Serve(repo) as serve:
        yield serve


def _infer(url: str, model: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(model, [tensor], client_timeout=60).as_numpy("output")


def _new_stub(serve: Serve, instance: str, old: int | None = None, timeout: float = 60.0) -> int:
    """The pid of the instance's stub, once it is another than `old`."""
    deadline = time.monotonic() + timeout
    while (pid := stub_processes(serve.server_pid).get(instance)) in (None, old):
        assert time.monotonic() < deadline, f"no new stub for {instance}"
        time.sleep(0.05)
    return pid


def test_killed_stub_is_reloaded_while_the_other_models_serve(serve):
    stubs = stub_processes(serve.server_pid)
    os.kill(stubs["onnx_model_0_0"], signal.SIGKILL)
    answers = []
    while not any(line.startswith("onnx_model: ") for line in serve.stderr):
        answers.append(_infer(serve.grpc_url, "onnx_crashy"))  # never an error meanwhile
        assert len(answers) < 2000, "onnx_model was not reloaded"
    line = serve.expect("onnx_model: ")
    assert line.startswith(f"onnx_model: stub onnx_model_0_0 (pid {stubs['onnx_model_0_0']}) died; reloaded in ")
    assert np.array_equal(_infer(serve.grpc_url, "onnx_model"), answers[0])
    now = stub_processes(serve.server_pid)
    assert {i: now[i] for i in ("onnx_hung_0_0", "onnx_crashy_0_0")} == {i: stubs[i] for i in ("onnx_hung_0_0", "onnx_crashy_0_0")}


def test_client_tells_a_failed_model_from_a_dead_server(serve):
    url = serve.grpc_url
    os.kill(stub_processes(serve.server_pid)["onnx_hung_0_0"], signal.SIGSTOP)  # alive, answers nothing
    line = error_line(run_cli("client", "classify", PHOTO, "--model", "onnx_hung", "--url", url))
    # (a server that is gone gives "lost the Triton server at URL ...; is it still running?")
    assert line == f"error: model 'onnx_hung' failed on the server at {url}: Stub process 'onnx_hung_0_0' is not healthy."
    # The supervisor saw the failed request, confirmed it, ended the stopped stub and reloaded the model.
    assert serve.expect("onnx_hung: ").startswith("onnx_hung: Stub process 'onnx_hung_0_0' is not healthy; reloaded in ")
    assert run_cli("client", "classify", PHOTO, "--model", "onnx_hung", "--url", url).exit_code == 0


def test_repeated_crashes_back_off_then_leave_the_model_unavailable_with_its_reason(serve):
    pid = None
    for crash, delay in enumerate(RELOAD_DELAYS_S, 1):
        pid = _new_stub(serve, "onnx_crashy_0_0", pid)
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        line = serve.expect("onnx_crashy: ")
        assert time.monotonic() - start >= delay
        assert "died; reloaded in" in line and f"(crash {crash} within 10 min" in line, line
    os.kill(_new_stub(serve, "onnx_crashy_0_0", pid), signal.SIGKILL)
    line = serve.expect("onnx_crashy: ")
    assert line.startswith("onnx_crashy: UNAVAILABLE: stub onnx_crashy_0_0") and "crashed 4 times within 10 min" in line
    error = error_line(run_cli("client", "classify", PHOTO, "--model", "onnx_crashy", "--url", serve.grpc_url))
    assert error.startswith("error: model 'onnx_crashy' is UNAVAILABLE: ") and "crashed 4 times within 10 min" in error
    assert "onnx_model (READY)" in error
    _infer(serve.grpc_url, "onnx_model")


def test_a_config_loaded_with_fewer_instances_is_not_a_crash(serve):
    """`tritonize tune` and `models load --config` load a config through the repository API: the stubs
    of instances the new config drops exit, and the model must keep that config, not be reloaded."""
    import json

    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(serve.grpc_url) as client:
        config = client.get_model_config("onnx_tuned", as_json=True)["config"]
        for count in (2, 1):
            config["instance_group"] = [{"count": count, "kind": "KIND_CPU"}]
            client.load_model("onnx_tuned", config=json.dumps(config))
            time.sleep(10 * 0.5)  # ten rounds of the supervisor
            # Triton updates the instances in place: which one a smaller count keeps is its choice.
            assert len([i for i in stub_processes(serve.server_pid) if i.startswith("onnx_tuned_")]) == count
        served = client.get_model_config("onnx_tuned", as_json=True)["config"]
    assert [int(g["count"]) for g in served["instance_group"]] == [1]
    assert not [line for line in serve.stderr if line.startswith("onnx_tuned: ")], serve.stderr
    _infer(serve.grpc_url, "onnx_tuned")
