"""What one request or one client can do to the real embedded server (the session's small_server):
requests the model's config refuses, oversized messages and a flood of idle connections each get an
error (or nothing), while another client goes on being served.

Triton enforces these itself (2.51): batch <= max_batch_size, the config's dims and dtypes, the input
names, and a payload whose byte size matches the declared shape (checked once the whole message has
arrived: gRPC accepts messages up to 2 GiB - 1, hard-coded, and HTTP bodies of any size; neither has a
flag in 2.51). It limits no connections (the process's file descriptors do). The project sets the
values: max_batch_size (`repo build --max-batch`) and the dims and dtypes of the export's contract."""

from __future__ import annotations

import resource
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

MODEL, MAX_BATCH = "onnx_model", 32  # small_repo's: `repo build`'s default --max-batch
TENSOR_BYTES = 3 * 224 * 224 * 4


@pytest.fixture
def bystander(small_server):
    """Another client sending batch-1 requests all along the test; it must never fail."""
    import tritonclient.grpc as grpcclient

    stop, served, errors = threading.Event(), [], []

    def run():
        with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
            x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
            x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
            while not stop.is_set():
                try:
                    served.append(client.infer(MODEL, [x], client_timeout=60).as_numpy("output").shape)
                except Exception as e:  # noqa: BLE001 - any failure is the finding
                    errors.append(str(e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield served
    stop.set()
    thread.join(120)
    assert errors == [] and served and set(served) == {(1, 1000)}


def _raw_request(small_server, raw: bytes, shape=(1, 3, 224, 224)):
    """A ModelInfer request as any gRPC client may send it: `raw` as the input's bytes, whatever the shape says."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="input", datatype="FP32")
    tensor.shape.extend(shape)
    request.raw_input_contents.append(raw)
    with grpc.insecure_channel(small_server.grpc_url, options=[("grpc.max_send_message_length", -1)]) as channel:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=120)


def test_requests_the_config_refuses_get_invalid_argument(small_server, bystander):
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def tensor(array, dtype="FP32", name="input"):
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    refused = {
        f"inference request batch-size must be <= {MAX_BATCH}": tensor(np.zeros((MAX_BATCH + 1, 3, 224, 224), np.float32)),
        "unexpected shape for input 'input'": tensor(np.zeros((1, 3, 100, 100), np.float32)),
        f"data-type is 'FP16', but model '{MODEL}' expects 'FP32'": tensor(np.zeros((1, 3, 224, 224), np.float16), "FP16"),
        "unexpected inference input 'nope'": tensor(np.zeros((1, 3, 224, 224), np.float32), name="nope"),
    }
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        for message, bad in refused.items():
            with pytest.raises(InferenceServerException, match=message) as error:
                client.infer(MODEL, [bad], client_timeout=60)
            assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(grpc.RpcError) as error:
        _raw_request(small_server, b"\0" * 10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "byte size" in error.value.details()


def test_oversized_messages_are_refused_once_received(small_server, bystander):
    import grpc

    big = 64 * 2**20  # 109 times the tensor the shape declares
    with pytest.raises(grpc.RpcError) as error:
        _raw_request(small_server, b"\0" * big)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"Expected {TENSOR_BYTES}, got {big}" in error.value.details()
    request = urllib.request.Request(f"{small_server.http_url}/v2/models/{MODEL}/infer", data=b"\0" * big,
                                     headers={"Content-Type": "application/octet-stream",
                                              "Inference-Header-Content-Length": "0"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=120)
    assert refused.value.code == 400


def test_a_flood_of_idle_connections_leaves_other_clients_served(small_server, bystander):
    import tritonclient.grpc as grpcclient

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # tritonserver inherited this process's limit
    per_port = min(1000, soft // 4)
    flood = []
    try:
        for address in (small_server.grpc_url, small_server.http_url.removeprefix("http://")):
            host, _, port = address.rpartition(":")
            flood += [socket.create_connection((host, int(port)), timeout=10) for _ in range(per_port)]
        served_before = len(bystander)
        with grpcclient.InferenceServerClient(small_server.grpc_url) as client:  # a new client, while flooded
            x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
            x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
            assert client.infer(MODEL, [x], client_timeout=30).as_numpy("output").shape == (1, 1000)
        with urllib.request.urlopen(f"{small_server.http_url}/v2/health/ready", timeout=30) as response:
            assert response.status == 200
        deadline = time.monotonic() + 30
        while len(bystander) == served_before:  # the client that was connected before goes on too
            assert time.monotonic() < deadline, "the other client got no answer while flooded"
            time.sleep(0.05)
    finally:
        for connection in flood:
            connection.close()
