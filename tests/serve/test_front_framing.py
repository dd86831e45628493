"""What the embedded engine's HTTP front passes on is framed by tritonserver's HTTP library (libevhtp) as the front
framed it, and never as a form-urlencoded body (the SIGSEGV of triton-inference-server/server#5840): the front in
front of the libevhtp oracle (tests/serve/evhtp.py), requests sent to the front, what the oracle framed compared."""

from __future__ import annotations

import socket

import pytest

from tests.serve import evhtp


@pytest.fixture(scope="module")
def oracle_binary(tmp_path_factory):
    try:
        return evhtp.build(tmp_path_factory.mktemp("evhtp"))
    except RuntimeError as e:
        pytest.skip(f"the libevhtp oracle cannot be built here: {e}")


@pytest.fixture
def front_and_oracle(oracle_binary):
    from tritonize.serve.front import Front
    from tritonize.serve.process import choose_ports

    upstream, ports = choose_ports("127.0.0.1", None, None, None), choose_ports("127.0.0.1", None, None, None)
    oracle = evhtp.Oracle(oracle_binary, "127.0.0.1", upstream.http)
    front = Front("127.0.0.1", ports.http, ports.metrics, (upstream.http, upstream.metrics))
    front.start()
    yield ports.http, oracle
    front.stop()
    oracle.stop()


def _send(port: int, data: bytes) -> bytes:
    """All the front answers to `data` on one connection (until it closes, or is quiet for a second)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(data)
        connection.settimeout(1)
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return answer


def test_a_nul_in_a_header_name_never_reaches_evhtp_as_a_form(front_and_oracle):
    """evhtp stores header names as C strings: `Content-Type\\0` is Content-Type to it."""
    port, oracle = front_and_oracle
    body = b"a=b" * 10
    _send(port, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type\0: application/x-www-form-urlencoded\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)
    framed = oracle.framed()
    assert not [r for r in framed if r.parsed_as_form], framed


def test_a_chunked_trailer_never_smuggles_a_request(front_and_oracle):
    """htparse ends a chunked message at the CRLF of its first trailer line and parses what follows as a new request,
    whose headers and size the front never saw."""
    port, oracle = front_and_oracle
    smuggled = b"POST /smuggled HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" \
               b"Content-Length: 3\r\n\r\nc=d"
    answer = _send(port, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"3\r\nabc\r\n0\r\nX-Trailer: y\r\n" + smuggled + b"\r\n\r\n")
    framed = oracle.framed()
    assert all(r.path == b"/v2/models/m/infer" and r.body == b"abc" for r in framed), framed
    assert not [r for r in framed for name, _ in r.headers if name.lower() == b"x-trailer"], framed
    assert answer.count(b"HTTP/1.1 ") == 1, answer
