"""`tritonize serve` heals a model whose backend stub died, the client says which side failed, and a
client's bad request is no crash.

A killed stub (`kill -9`, what the OOM killer does) leaves its model READY in Triton but failing
every request; a stopped one (SIGSTOP) is alive but answers nothing. Both are done here to the real
stubs of a real `tritonize serve`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.client.conftest import PHOTO
from tests.conftest import error_line, run_cli
from tests.serve.helpers import Serve, stub_regions
from tritonize.access import GRPC_KEY_HEADER
from tritonize.serve.supervisor import RELOAD_DELAYS_S, stub_processes


@pytest.fixture(scope="module")
def serve(small_artifacts, tmp_path_factory):
    """`tritonize serve` on six copies of the same ONNX model (quick to start, equal answers); each
    test does its harm to its own copy: onnx_model, onnx_hung, onnx_crashy, onnx_tuned, and onnx_pair and
    onnx_stopped_pair, which have two instances."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("supervised") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    for name in ("onnx_hung", "onnx_crashy", "onnx_tuned", "onnx_pair", "onnx_stopped_pair"):
        shutil.copytree(repo / "onnx_model", repo / name)
        for config in [repo / name / "config.pbtxt", *(repo / name / "configs").glob("*.pbtxt")]:
            text = config.read_text().replace('name: "onnx_model"', f'name: "{name}"')
            config.write_text(text.replace("count: 1\n", "count: 2\n") if name.endswith("pair") else text)
    with Serve(repo) as serve:
        yield serve


def _infer(url: str, model: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(model, [tensor], client_timeout=60).as_numpy("output")


class _Traffic:
    """`clients` threads sending batch-1 requests to `model` one after another until the block ends;
    `records`: (monotonic time sent, error or None) per request."""

    def __init__(self, url: str, model: str, clients: int):
        self.url, self.model, self.records = url, model, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(clients)]

    def _send(self) -> None:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        tensor = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
        with grpcclient.InferenceServerClient(self.url) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    client.infer(self.model, [tensor], client_timeout=60)
                    self.records.append((sent, None))
                except InferenceServerException as e:
                    self.records.append((sent, e.message()))
                    time.sleep(0.05)

    def __enter__(self) -> "_Traffic":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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
    assert line.startswith(f"onnx_model: stub onnx_model_0_0 (pid {stubs['onnx_model_0_0']}) died (killed by SIGKILL); "
                           "reloaded in ")
    assert np.array_equal(_infer(serve.grpc_url, "onnx_model"), answers[0])
    now = stub_processes(serve.server_pid)
    assert {i: now[i] for i in ("onnx_hung_0_0", "onnx_crashy_0_0")} == {i: stubs[i] for i in ("onnx_hung_0_0", "onnx_crashy_0_0")}


def test_a_model_with_two_instances_heals_when_either_instance_dies(serve):
    """Each instance of a two-instance model killed in turn under four clients' requests: each crash is found
    (not only when a probe happens to reach the dead instance) and healed, after which every request succeeds:
    no dead instance is left to fail a share of them."""
    for victim in ("onnx_pair_0_0", "onnx_pair_0_1"):
        with _Traffic(serve.grpc_url, "onnx_pair", clients=4) as traffic:
            time.sleep(1)
            pid = stub_processes(serve.server_pid)[victim]
            os.kill(pid, signal.SIGKILL)
            line = serve.expect("onnx_pair: ", timeout=30)
            healed = time.monotonic()
            time.sleep(3)
        # Found by its death, or (a busy machine: a failed request counted first) by the probe that reached it.
        assert line.startswith((f"onnx_pair: stub {victim} (pid {pid}) died",
                                f"onnx_pair: Stub process '{victim}' is not healthy")), line
        after = [error for sent, error in traffic.records if sent > healed]
        assert len(after) > 10 and not [e for e in after if e], set(after)
        assert {i for i in stub_processes(serve.server_pid) if i.startswith("onnx_pair_")} == {"onnx_pair_0_0", "onnx_pair_0_1"}


def test_a_hung_instance_of_two_is_found_and_healed_whichever_it_is(serve):
    """Each instance of a two-instance model stopped in turn (alive, answering nothing) under two clients'
    requests. Triton gives each request to a free instance, so the probe's requests go to the healthy one, while
    one request a second reaches the stopped one and fails (on ddf8b97 that went on forever): the stopped stub is
    found by its state, killed and the model reloaded, after which every request succeeds."""
    for victim in ("onnx_stopped_pair_0_1", "onnx_stopped_pair_0_0"):
        with _Traffic(serve.grpc_url, "onnx_stopped_pair", clients=2) as traffic:
            time.sleep(0.5)
            pid = stub_processes(serve.server_pid)[victim]
            os.kill(pid, signal.SIGSTOP)
            line = serve.expect("onnx_stopped_pair: ", timeout=60)
            healed = time.monotonic()
            time.sleep(2)
        assert line.startswith((f"onnx_stopped_pair: stub {victim} (pid {pid}) is stopped and requests to it fail; "
                                "reloaded in ", f"onnx_stopped_pair: Stub process '{victim}' is not healthy; reloaded in ")), line
        after = [error for sent, error in traffic.records if sent > healed]
        assert len(after) > 5 and not [e for e in after if e], set(after)


def test_client_tells_a_failed_model_from_a_dead_server(serve):
    url = serve.grpc_url
    region = Path("/dev/shm") / stub_regions(serve.server_pid)["onnx_hung_0_0"]
    os.kill(stub_processes(serve.server_pid)["onnx_hung_0_0"], signal.SIGSTOP)  # alive, answers nothing
    line = error_line(run_cli("client", "classify", PHOTO, "--model", "onnx_hung", "--url", url))
    # (a server that is gone gives "lost the Triton server at URL ...; is it still running?")
    assert line == f"error: model 'onnx_hung' failed on the server at {url}: Stub process 'onnx_hung_0_0' is not healthy."
    # The supervisor saw the failed request, confirmed it, ended the stopped stub and reloaded the model.
    assert serve.expect("onnx_hung: ").startswith("onnx_hung: Stub process 'onnx_hung_0_0' is not healthy; reloaded in ")
    # Requests failed on that instance, so Triton never finishes unloading it: the supervisor removed its region.
    assert not region.exists()
    assert run_cli("client", "classify", PHOTO, "--model", "onnx_hung", "--url", url).exit_code == 0


def test_repeated_crashes_back_off_then_leave_the_model_unavailable_with_its_reason(serve):
    pid = None
    for crash, delay in enumerate(RELOAD_DELAYS_S, 1):
        pid = _new_stub(serve, "onnx_crashy_0_0", pid)
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        line = serve.expect("onnx_crashy: ")
        assert time.monotonic() - start >= delay
        assert "died (killed by SIGKILL); reloaded in" in line and f"(crash {crash} within 10 min" in line, line
    os.kill(_new_stub(serve, "onnx_crashy_0_0", pid), signal.SIGKILL)
    line = serve.expect("onnx_crashy: ")
    assert line.startswith("onnx_crashy: UNAVAILABLE: stub onnx_crashy_0_0") and "crashed 4 times within 10 min" in line
    # The give-up is a load that fails by design, with a model.py: Triton leaves such a load's files in /tmp/folderXXXXXX.
    reason = line.removeprefix("onnx_crashy: UNAVAILABLE: ")
    assert [f for f in Path("/tmp").glob("folder*") if reason in _text(f / "1" / "model.py")] == []
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
            client.load_model("onnx_tuned", config=json.dumps(config), headers={GRPC_KEY_HEADER: serve.key_file.read_text().strip()})
            time.sleep(10 * 0.5)  # ten rounds of the supervisor
            # Triton updates the instances in place: which one a smaller count keeps is its choice.
            assert len([i for i in stub_processes(serve.server_pid) if i.startswith("onnx_tuned_")]) == count
        served = client.get_model_config("onnx_tuned", as_json=True)["config"]
    assert [int(g["count"]) for g in served["instance_group"]] == [1]
    assert not [line for line in serve.stderr if line.startswith("onnx_tuned: ")], serve.stderr
    _infer(serve.grpc_url, "onnx_tuned")


# ------------------------------------------------------------------ a bad request is not a crash

IDLE_S = 12  # no traffic after the bad requests: 24 rounds of the supervisor, 2 of its probe intervals
# Triton 2.51 counts one failed ensemble request twice in the ensemble's nv_inference_request_failure (reason
# OTHER), and the step that refused it once in nv_inference_request_success: its error is its response (measured).
ENSEMBLE_FAILURE_COUNTS = 2


@pytest.fixture(scope="module")
def served(small_repo):
    """`tritonize serve` on the session's repository: both classifiers, the preprocessing models and the
    ensembles that preprocess on the server."""
    with Serve(small_repo) as serve:
        yield serve


def _failure_series(metrics_url: str) -> dict[str, float]:
    """Triton's failed-request counters now: the labels of each series -> its value."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {line.rsplit(" ", 1)[0].removeprefix("nv_inference_request_failure"): float(line.rsplit(" ", 1)[1])
            for line in lines if line.startswith("nv_inference_request_failure{")}


def _per_model(series: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for labels, value in series.items():
        model = re.search(r'model="([^"]*)"', labels)[1]
        totals[model] = totals.get(model, 0.0) + value
    return totals


def test_a_bad_image_fails_only_its_requests_and_fires_no_alert(served, small_repo, tmp_path):
    """One truncated JPEG along every preprocessing path of both classifiers (the client refuses it on the
    client and uint8 paths; the server's preprocess model fails it in the ensemble), then no traffic: the
    failure counters rise by exactly the failed requests and stay there (the supervisor's probes are valid
    requests and feed nothing), and the monitoring bundle's alerts do not fire on what was scraped."""
    import yaml

    from tritonize.monitor import promql
    from tritonize.monitor.bundle import RULES, write_bundle
    from tritonize.monitor.prometheus import INSTALL_HINT

    bad = tmp_path / "truncated.jpg"
    bad.write_bytes(PHOTO.read_bytes()[:4000])
    before = _failure_series(served.metrics_url)
    expected = dict.fromkeys(_per_model(before), 0.0)
    for model in ("onnx_model", "torch_model"):
        for path in ("client", "server", "uint8"):
            result = run_cli("client", "classify", bad, "--model", model, "--preprocess", path, "--url", served.grpc_url)
            assert result.exit_code == 1 and "skipped: " in result.output, result.output
            if path == "server":  # one request to <backend>_classifier, failed by its preprocess step
                expected[model.replace("_model", "_classifier")] += ENSEMBLE_FAILURE_COUNTS
    samples = []
    for _ in range(IDLE_S):
        time.sleep(1)
        samples.append(_failure_series(served.metrics_url))
    start = _per_model(before)
    for sample in samples:
        assert {m: v - start.get(m, 0.0) for m, v in _per_model(sample).items()} == expected
    assert not [line for line in served.stderr if line.startswith(("preprocess:", "onnx_", "torch_"))], served.stderr

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(f"the counters held; the alerts were not evaluated: promtool is not installed ({INSTALL_HINT})")
    bundle = tmp_path / "monitoring"
    write_bundle(small_repo, bundle)
    # What Prometheus scraped every 5 s (the bundle's interval): the counters before the bad requests, those
    # seen while idle, then the last ones as the idle server keeps them, long enough for the alert's 1m `for`.
    series = [{"series": f'{promql.FAILURE}{{job="triton",instance="t:8002",{labels.strip("{}")}}}',
               "values": " ".join(str(s.get(labels, 0.0)) for s in [before, *samples[4::5]]) + f" {samples[-1][labels]}x36"}
              for labels in samples[-1]]
    tests = {"rule_files": [str(bundle / RULES)], "evaluation_interval": "5s", "tests": [{
        "interval": "5s", "input_series": series,
        "alert_rule_test": [{"eval_time": t, "alertname": "TritonModelFailingRequests", "exp_alerts": []}
                            for t in ("30s", "1m", "1m30s", "2m", "3m")],
    }]}
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "rules_test.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_where_the_server_processes_cannot_be_seen_the_probes_still_heal_a_hung_stub(small_artifacts, tmp_path):
    """A container on another machine's Docker engine: no pid to watch, so the supervisor works from requests
    alone. A request that fails makes it probe, and the probe's "is not healthy" gets the model reloaded."""
    from tritonclient.utils import InferenceServerException

    from tritonize.repository_builder import RepoOptions, build_repository
    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.supervisor import Supervisor

    repo = tmp_path / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    with EmbeddedServer(repo, supervise=False) as info:
        supervisor = Supervisor(None, info.http_url, info.metrics_url)
        supervisor.start()
        stub = stub_processes(info.pid)["onnx_model_0_0"]
        try:
            os.kill(stub, signal.SIGSTOP)
            with pytest.raises(InferenceServerException, match="is not healthy"):
                _infer(info.grpc_url, "onnx_model")
            deadline = time.monotonic() + 60
            while stub_processes(info.pid).get("onnx_model_0_0") in (None, stub):
                assert time.monotonic() < deadline, "onnx_model was not reloaded"
                time.sleep(0.1)
            while True:  # answered once the new copy serves (requests that reach the old one fail meanwhile)
                try:
                    _infer(info.grpc_url, "onnx_model")
                    break
                except InferenceServerException:
                    assert time.monotonic() < deadline, "onnx_model does not answer after its reload"
        finally:
            supervisor.stop()
            os.kill(stub, signal.SIGKILL)  # here nothing could: it is another machine's process
