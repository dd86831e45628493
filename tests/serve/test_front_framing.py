"""What the front passes on is framed by tritonserver's HTTP library (libevhtp) exactly as the front framed it, and
never as a form-urlencoded body (the SIGSEGV of triton-inference-server/server#5840): the front in front of the
libevhtp oracle (tests/serve/evhtp.py) on its Unix socket, with a tap between them that records every byte passed
on. Requests are sent to the front; the bytes the tap saw are read with h11 (what the front meant) and compared
with what the oracle framed."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import h11
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.serve import evhtp


@pytest.fixture(scope="module")
def oracle_binary(tmp_path_factory):
    try:
        return evhtp.build(tmp_path_factory.mktemp("evhtp"))
    except RuntimeError as e:
        pytest.skip(f"the libevhtp oracle cannot be built here: {e}")


class Tap:
    """A Unix socket at `path` passing each connection on to `target` both ways, recording what goes to it."""

    def __init__(self, path: Path, target: Path):
        self.target, self.passed = target, []
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(str(self.target))
            record = bytearray()
            self.passed.append(record)
            threading.Thread(target=self._copy, args=(client, server, record), daemon=True).start()
            threading.Thread(target=self._copy, args=(server, client, None), daemon=True).start()

    @staticmethod
    def _copy(source, dest, record) -> None:
        try:
            while data := source.recv(65536):
                if record is not None:
                    record += data
                dest.sendall(data)
        except OSError:
            pass
        for s in (source, dest):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def take(self) -> bytes:
        passed, self.passed = b"".join(bytes(r) for r in self.passed), []
        return passed

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def rig(oracle_binary, tmp_path_factory):
    """(the front's HTTP port, the oracle, the tap)."""
    from tritonize.serve.front import Front, Upstream
    from tritonize.serve.process import choose_ports

    directory = tmp_path_factory.mktemp("sockets")
    upstream = Upstream(directory / "front")
    upstream.directory.mkdir()
    oracle = evhtp.Oracle(oracle_binary, f"unix:{directory}/oracle.sock")
    tap = Tap(upstream.http, directory / "oracle.sock")
    ports = choose_ports("127.0.0.1", None, None, None)
    front = Front("127.0.0.1", (ports.http, ports.grpc, ports.metrics), upstream)
    front.start()
    yield ports.http, oracle, tap
    front.stop()
    tap.close()
    oracle.stop()


def _send(port: int, data: bytes, quiet: float = 2.0) -> bytes:
    """All the front answers to `data`, sent on one connection that then ends its sending (until the front closes,
    or is quiet for `quiet` s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(quiet)
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return answer


def _meant(passed: bytes) -> list[evhtp.Framed]:
    """The requests in `passed` as h11 reads them: what the front meant to pass on."""
    reader, found = h11.Connection(h11.SERVER), []
    reader.receive_data(passed)
    reader.receive_data(b"")
    while True:
        event = reader.next_event()
        if isinstance(event, h11.Request):
            target = event.target
            head, body = event, b""
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            path, mark, query = target.partition(b"?")
            found.append(evhtp.Framed(head.method.decode(), path, query if mark else None, None,
                                      tuple(head.headers.raw_items()), body))
            reader.send(h11.Response(status_code=200, headers=[(b"Content-Length", b"0")]))
            reader.send(h11.EndOfMessage())
            reader.start_next_cycle()
        else:
            assert event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed), event
            return found


def _check(port: int, oracle, tap, request: bytes) -> tuple[bytes, list[evhtp.Framed]]:
    """Send `request`; every request passed on is framed by evhtp as the front framed it, and none as a form."""
    answer = _send(port, request)
    framed, meant = oracle.framed(wait=0.02), _meant(tap.take())
    assert not [r for r in framed if r.parsed_as_form], (request, framed)
    assert [(r.method, r.path, r.query, r.headers, r.body) for r in framed] == \
           [(r.method, r.path, r.query, r.headers, r.body) for r in meant], (request, framed, meant)
    return answer, framed


def test_a_nul_in_a_header_name_never_reaches_evhtp_as_a_form(rig):
    """evhtp stores header names as C strings: `Content-Type\\0` is Content-Type to it. The front refuses the name."""
    body = b"a=b" * 10
    answer, framed = _check(*rig, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type\0: "
                                  b"application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert answer.startswith(b"HTTP/1.1 400 ") and framed == [], answer


def test_a_chunked_trailer_never_smuggles_a_request(rig):
    """htparse ends a chunked message at the CRLF of its first trailer line and parses what follows as a new request,
    whose headers and size the front never saw. The front reads the trailer section as RFC 9112 says (header lines up
    to an empty line): there a request line is malformed, and the whole message is refused."""
    smuggled = b"POST /smuggled HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" \
               b"Content-Length: 3\r\n\r\nc=d"
    answer, framed = _check(*rig, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  b"3\r\nabc\r\n0\r\nX-Trailer: y\r\n" + smuggled + b"\r\n\r\n")
    assert framed == [] and answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1 ") == 1, answer


def test_a_chunked_body_goes_on_with_a_content_length_and_without_its_trailers(rig):
    answer, framed = _check(*rig, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: y\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and len(framed) == 1, answer
    assert framed[0].body == b"abcde" and dict(framed[0].headers)[b"Content-Length"] == b"5"
    assert not [name for name, _ in framed[0].headers if name.lower() in (b"x-trailer", b"transfer-encoding")]


def test_a_form_content_type_is_dropped_in_every_spelling(rig):
    for value in (b"application/x-www-form-urlencoded", b"APPLICATION/X-WWW-FORM-URLENCODED; charset=utf-8",
                  b"application/x-www-form-urlencodedX"):
        answer, framed = _check(*rig, b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: " + value +
                                      b"\r\nContent-Length: 3\r\n\r\na=b")
        assert answer.startswith(b"HTTP/1.1 200 ") and len(framed) == 1 and framed[0].content_type is None


# The pieces requests are made of: mostly the usual, some of what parsers read differently (the odd ones), so that a
# request is often passed on, and often refused.
def _mostly(usual: list[bytes], odd: list[bytes]):
    return st.one_of(st.sampled_from(usual), st.sampled_from(usual), st.sampled_from(usual), st.sampled_from(odd))


_NAMES = _mostly([b"Content-Type", b"content-type", b"X-A", b"Connection", b"Expect", b"Accept",
                  b"Inference-Header-Content-Length", b"tritonize-control-key"],
                 [b"Content-Type\0", b"Content-Type ", b" Content-Type", b"Content\x01Type", b"Content-Length",
                  b"Transfer-Encoding", b"Trailer", b"Host", b"Content-Type\x7f"])
_VALUES = _mostly([b"application/x-www-form-urlencoded", b"application/json", b"close", b"keep-alive", b"x y",
                   b"application/x-www-form-urlencoded; charset=utf-8", b"APPLICATION/X-WWW-FORM-URLENCODED", b"3"],
                  [b"chunked", b"100-continue", b"0", b"3, 3", b"-1", b"x\0y", b"a\x7fb", b"\xe9t\xe9", b"\x01",
                   b"chunked, chunked", b"gzip", b"a\tb"])
_TARGETS = _mostly([b"/v2/models/m/infer", b"/v2/health/ready", b"/a?b=c", b"/%41", b"/v2/models/stats", b"/a?x=/y"],
                   [b"/a#f", b"*", b"http://x/a", b"/a?x#y", b"//", b"/%zz", b"/a\x7f", b"/\xe9", b"a", b"/a?\"b\""])
_METHODS = _mostly([b"GET", b"POST", b"POST", b"PUT", b"HEAD"], [b"BREW", b"get", b"CONNECT", b"TRACE"])


@st.composite
def _requests(draw) -> bytes:
    method, target = draw(_METHODS), draw(_TARGETS)
    version = draw(_mostly([b"HTTP/1.1"], [b"HTTP/1.0", b"HTTP/1.1 ", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1"]))
    headers = ([(b"Host", b"x")] if draw(st.integers(0, 5)) else []) + draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=5))
    head = method + b" " + target + b" " + version + b"\r\n"
    head += b"".join(name + draw(_mostly([b": "], [b":", b" : ", b":\t", b":  "])) + value +
                     draw(_mostly([b"\r\n"], [b"\n", b"\r\n ", b"\r"])) for name, value in headers)
    framing = draw(st.sampled_from(["length", "length", "chunked", "none"]))
    body = draw(st.binary(max_size=40))
    if framing == "length":
        head += b"Content-Length: %d\r\n" % len(body)
    elif framing == "chunked":
        head += b"Transfer-Encoding: chunked\r\n"
        extension = draw(_mostly([b"", b";a=b"], [b" ", b";\0", b";a=\"b\""]))
        trailers = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=2))
        body = (b"%x%s\r\n%s\r\n" % (len(body), extension, body) if body else b"") + b"0\r\n" + \
            b"".join(n + b": " + v + b"\r\n" for n, v in trailers) + b"\r\n"
    message = head + b"\r\n" + body
    if not draw(st.integers(0, 3)):  # mutated: bytes replaced, inserted or cut anywhere
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(message)))
            how = draw(st.sampled_from(["replace", "insert", "cut"]))
            byte = draw(st.sampled_from([b"\0", b"\r", b"\n", b" ", b":", b"\t", b"\x01", b"a", b";", b"0"]))
            message = message[:at] + byte + message[at + (how != "insert"):] if how != "cut" else \
                message[:at] + message[at + draw(st.integers(1, 4)):]
    if draw(st.booleans()):  # pipelined: another request after it
        message += b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    return message


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=_requests())
def test_whatever_the_front_passes_on_evhtp_frames_the_same(rig, request):
    _check(*rig, request)


@pytest.mark.parametrize("head, status, words", [
    (b"BREW /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method BREW is not one this server takes"),
    (b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "ambiguous body length: Content-Length and Transfer-Encoding"),
    (b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "the request target must be a path"),
    (b"GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n", 400, "the request target must be a path"),
    (b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", 400, "the value of header x-a holds a control character"),
    (b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: \xe9\r\n\r\n", 400, "or a byte above 0x7e"),
    (b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "malformed request"),
    (b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 67108865\r\n\r\n", 413,
     "the request body of 67108865 bytes is over this server's limit of 67108864 bytes"),
    (b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431,
     "the request line and headers are over 65536 bytes"),
], ids=["method", "length-and-chunked", "fragment", "absolute-form", "control-character", "above-0x7e",
        "gzip", "over-the-body-limit", "head-over-64k"])
def test_what_the_front_refuses_it_answers_from_the_head(rig, head, status, words):
    import json

    answer, framed = _check(*rig, head)
    line, _, body = answer.partition(b"\r\n")
    assert line.startswith(b"HTTP/1.1 %d " % status) and framed == [], answer[:200]
    assert words in json.loads(body.partition(b"\r\n\r\n")[2])["error"]
