"""One HTTP request never takes the real embedded server down, whatever its size and headers: the embedded engine's
front (serve/front.py) passes requests on to tritonserver, and refuses what it cannot pass on safely.

tritonserver's HTTP library (libevhtp) parses a body sent as `Content-Type: application/x-www-form-urlencoded`
(curl's default for --data-binary) into query arguments, in two arrays of the body's size on the HTTP thread's
stack: from about half of RLIMIT_STACK (4,194,000 bytes under the usual 8 MiB) the thread overflows and the whole
server dies with SIGSEGV (upstream triton-inference-server/server#5840; docs/serving-other-machines.md). Each test
here sends such a body, then checks that the same tritonserver process still serves.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.client.conftest import PHOTO

FORM = "application/x-www-form-urlencoded"
MIB = 2**20
MODEL = "onnx_model"  # small_repo's: FP32 input [3, 224, 224]


@pytest.fixture(scope="module")
def server(small_repo):
    """A server of this module's own: a test that fails here may have killed it."""
    from tritonize.serve.embedded import embedded_server

    with embedded_server(small_repo) as info:
        yield info


def _body(size: int, model: str) -> bytes:
    """A valid JSON infer request of exactly `size` bytes: one zero image for `model` (spaces pad it)."""
    data = json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32",
                                   "data": [0] * (3 * 224 * 224)}]}).encode()
    assert len(data) <= size
    return data + b" " * (size - len(data))


def _post(http_url: str, path: str, body: bytes, content_type: str = FORM) -> tuple[int, bytes]:
    """(status, body) of a POST as curl --data-binary sends it; the status is 0 when the connection broke."""
    host, port = http_url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=300)
    try:
        connection.request("POST", path, body, {"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, response.read()
    except (ConnectionError, http.client.HTTPException) as e:
        return 0, str(e).encode()
    finally:
        connection.close()


def _serves(info) -> None:
    """The server that started is still the one serving, and answers an inference at once."""
    import tritonclient.grpc as grpcclient

    assert Path(f"/proc/{info.pid}").exists(), "tritonserver died"
    with grpcclient.InferenceServerClient(info.grpc_url) as client:
        x = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
        x.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
        assert client.infer(MODEL, [x], client_timeout=5).as_numpy("output").shape == (1, 1000)


@pytest.mark.parametrize("size", [4_200_000, 64 * MIB], ids=["4.2MB", "64MiB"])
@pytest.mark.parametrize("model", ["no_such_model", MODEL])
def test_a_big_form_encoded_body_leaves_the_server_serving(server, size, model):
    status, answer = _post(server.http_url, f"/v2/models/{model}/infer", _body(size, model))
    if model == MODEL:
        assert status == 200, answer[:300]
        assert json.loads(answer)["outputs"][0]["shape"] == [1, 1000]
    else:
        assert status == 404 and b"unknown model" in answer, answer[:300]
    _serves(server)


def test_a_body_over_the_limit_is_refused_before_triton(server):
    from tritonize.serve.front import MAX_BODY

    status, answer = _post(server.http_url, f"/v2/models/{MODEL}/infer", _body(MAX_BODY + 1, MODEL), "application/json")
    assert status == 413 and f"{MAX_BODY}" in json.loads(answer)["error"], answer[:300]
    status, _ = _post(server.http_url, f"/v2/models/{MODEL}/infer", _body(MAX_BODY, MODEL), "application/json")
    assert status == 200
    _serves(server)


def _recipe() -> str:
    """The curl recipe of docs/preprocessing.md, as the page shows it."""
    page = (Path(__file__).parents[2] / "docs" / "preprocessing.md").read_text()
    return next(line for line in page.splitlines() if line.startswith("base64 -w0 goldfish.jpg"))


@pytest.mark.skipif(not all(shutil.which(tool) for tool in ("base64", "jq", "curl")), reason="the recipe needs base64, jq and curl")
def test_the_docs_curl_recipe_classifies_a_10_mb_photo(server, tmp_path):
    from PIL import Image

    photo = tmp_path / "goldfish.jpg"
    picture = np.asarray(Image.open(PHOTO).convert("RGB").resize((3300, 3300)), np.int16)
    noise = np.random.default_rng(0).integers(-40, 40, picture.shape)  # what a camera's sensor adds, and JPEG keeps
    Image.fromarray(np.clip(picture + noise, 0, 255).astype(np.uint8)).save(photo, quality=98)
    assert photo.stat().st_size > 10 * 10**6
    port = server.http_url.rsplit(":", 1)[1]
    command = _recipe().replace("localhost:8000", f"127.0.0.1:{port}")
    started = time.monotonic()
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and all(len(line.split(":")) >= 3 for line in lines), (result.stdout, time.monotonic() - started)
    _serves(server)


def _raw(http_url: str, data: bytes) -> bytes:
    """What the front answers to `data` sent on a new connection."""
    host, port = http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(data)
        return connection.recv(65536)


def test_the_front_refuses_what_it_cannot_pass_on_safely(server):
    from tritonize.serve.front import MAX_BODY, MAX_HEAD

    infer = f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
    big_head = _raw(server.http_url, f"{infer}X-Big: {'a' * MAX_HEAD}\r\n\r\n".encode())
    assert big_head.startswith(b"HTTP/1.1 431 "), big_head[:100]
    both = _raw(server.http_url, f"{infer}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    assert both.startswith(b"HTTP/1.1 400 "), both[:100]
    # A client that asks before sending (curl above 1 MB) is told at once, and sends nothing.
    expect = _raw(server.http_url, f"{infer}Content-Length: {MAX_BODY + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
    assert expect.startswith(b"HTTP/1.1 413 "), expect[:100]
    # A chunked body is counted as it comes: passed on up to the limit, refused at the chunk that passes it.
    chunk = b"%x\r\n" % MIB + b" " * MIB + b"\r\n"
    chunked = _raw(server.http_url, f"{infer}Transfer-Encoding: chunked\r\n\r\n".encode() + chunk * 65)
    assert chunked.startswith(b"HTTP/1.1 413 "), chunked[:100]
    _serves(server)


def test_the_front_keeps_a_connection_for_several_requests(server):
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        for body in (_body(700_000, MODEL), _body(5_000_000, MODEL)):
            connection.request("POST", f"/v2/models/{MODEL}/infer", body, {"Content-Type": FORM})
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read())["outputs"][0]["shape"] == [1, 1000]
        connection.request("GET", "/v2/health/ready")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def test_the_front_answers_while_no_tritonserver_listens(tmp_path):
    """Between a crash and the new server: 503 on HTTP, tritonize's own metrics on the metrics port."""
    from tritonize.serve.front import Front, Upstream
    from tritonize.serve.process import choose_ports

    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), Upstream(tmp_path),
                  samples=lambda: "tritonize_x 1\n")
    front.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=30)
        assert refused.value.code == 503 and "retry" in json.loads(refused.value.read())["error"]
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.metrics}/metrics", timeout=30) as response:
            assert response.read() == b"tritonize_x 1\n"
    finally:
        front.stop()


@pytest.mark.parametrize("blob", [b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\0" * 40], ids=["text", "truncated-png"])
def test_a_bad_image_is_the_clients_error_400_not_500(server, blob):
    """The preprocess model refuses what it cannot decode as INVALID_ARG: HTTP 400 (gRPC INVALID_ARGUMENT), not the
    server's fault (500)."""
    import base64

    body = json.dumps({"inputs": [{"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES",
                                   "data": [base64.b64encode(blob).decode()]}]}).encode()
    status, answer = _post(server.http_url, "/v2/models/onnx_classifier/infer", body, "application/json")
    assert status == 400 and "IMAGE" in json.loads(answer)["error"], (status, answer[:300])
    _serves(server)
