"""The control key and TLS files: where the key comes from, who may read its file, when serve restricts."""

from __future__ import annotations

import os
import stat

import pytest

from tritonize.access import (
    KEY_ENV,
    WORKDIR_PREFIX,
    ControlKey,
    client_key,
    is_loopback,
    read_key_file,
    restriction_flags,
    server_key,
    server_tls,
    write_addresses,
)
from tritonize.errors import TritonizeError

KEY = "k" * 20


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True),
                                           ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("triton.lan", False)])
def test_loopback(host, loopback):
    assert is_loopback(host) == loopback


def test_serve_restricts_on_every_address_with_a_new_key_per_start():
    """Loopback too: a model load may carry files the server runs (issue 35)."""
    first, second = server_key(None, False), server_key(None, False)
    assert first.value != second.value and len(first.value) >= 32 and first.file is None
    assert KEY not in repr(ControlKey(KEY))  # the value never shows in a repr (logs, tracebacks)


def test_a_given_key_restricts_on_any_host(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    assert server_key(None, False).value == KEY
    assert client_key(None).value == KEY
    file = tmp_path / "key"
    file.write_text("f" * 20 + "\n")
    file.chmod(0o600)
    assert server_key(file, False) == ControlKey("f" * 20, file)  # the file wins over the environment


def test_open_control_apis(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    assert server_key(None, True) is None
    with pytest.raises(TritonizeError, match="contradict"):
        server_key(tmp_path / "key", True)


def test_a_key_file_others_can_read_is_refused(tmp_path):
    file = tmp_path / "key"
    file.write_text(KEY)
    file.chmod(0o640)
    with pytest.raises(TritonizeError, match=f"readable by others \\(mode 640\\): chmod 600 {file}"):
        read_key_file(file)
    with pytest.raises(TritonizeError, match="cannot read the control key file"):
        read_key_file(tmp_path / "missing")


@pytest.mark.parametrize("value", ["short", "x" * 15, "has a space in it ok", "tab\tseparated-long-enough"])
def test_weak_or_unsendable_keys_are_refused(value):
    with pytest.raises(TritonizeError, match="at least 16 printable ASCII characters"):
        ControlKey(value)


def test_the_written_key_file_is_only_ever_readable_by_its_owner(tmp_path):
    old = os.umask(0)  # the file is created 0600, not created wider and narrowed afterwards
    try:
        key = ControlKey(KEY).written_to(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(key.file.stat().st_mode) == 0o600 and read_key_file(key.file) == key


def test_restriction_flags_use_the_form_tritonserver_parses():
    # `<apis>:<header>=<value>` (a colon: tritonserver's --help shows a comma, which it refuses)
    assert restriction_flags(KEY) == [
        f"--grpc-restricted-protocol=model-repository,statistics,trace,logging,shared-memory:tritonize-control-key={KEY}",
        f"--http-restricted-api=model-repository,statistics,trace,logging,shared-memory:tritonize-control-key={KEY}",
    ]


def test_tls_files(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN EC PRIVATE KEY-----\n...\n-----END EC PRIVATE KEY-----\n")
    assert server_tls(None, None) is None
    assert server_tls(cert, key).flags() == ["--grpc-use-ssl=true", f"--grpc-server-cert={cert}", f"--grpc-server-key={key}"]
    with pytest.raises(TritonizeError, match="--tls-cert and --tls-key go together"):
        server_tls(cert, None)
    with pytest.raises(TritonizeError, match="--tls-key .* is not a PEM file with a private key"):
        server_tls(cert, cert)
    with pytest.raises(TritonizeError, match="--tls-cert .*: cannot read it"):
        server_tls(tmp_path / "missing.pem", key)


@pytest.fixture
def served_here(tmp_path, monkeypatch):
    """A server directory of this user, as `tritonize serve` leaves it, in a temporary directory of the test's own."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    directory = tmp_path / f"{WORKDIR_PREFIX}abcd1234"
    directory.mkdir(mode=0o700)
    key = ControlKey(KEY).written_to(directory)
    write_addresses(directory, "127.0.0.1", {"http": 18000, "grpc": 18001, "metrics": 18002}, key)
    return directory


def test_own_commands_find_the_key_of_a_local_server_by_its_port(served_here):
    for url in ("127.0.0.1:18001", "localhost:18001", "http://127.0.0.1:18000", "[::1]:18001"):
        assert client_key(None, url).value == KEY, url
    for url in ("127.0.0.1:18009", "10.1.2.3:18001", "nonsense"):
        assert client_key(None, url) is None, url


def test_a_given_key_wins_over_the_one_found(served_here, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "e" * 20)
    assert client_key(None, "127.0.0.1:18001").value == "e" * 20
    file = tmp_path / "mine"
    file.write_text("f" * 20)
    file.chmod(0o600)
    assert client_key(file, "127.0.0.1:18001").value == "f" * 20


def test_no_key_is_found_for_a_server_that_is_gone_or_a_directory_others_could_write(served_here):
    import json

    record = json.loads((served_here / "addresses.json").read_text())
    (served_here / "addresses.json").write_text(json.dumps({**record, "owner": [record["owner"][0], "1"]}))
    assert client_key(None, "127.0.0.1:18001") is None  # the pid's process started at another time
    (served_here / "addresses.json").write_text(json.dumps(record))
    served_here.chmod(0o777)
    assert client_key(None, "127.0.0.1:18001") is None
