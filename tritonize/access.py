"""Who may do what on a served Triton: the control-API key and TLS for gRPC.

Triton restricts groups of its APIs to requests that carry a header with a key
(`--grpc-restricted-protocol`, `--http-restricted-api`; the form is `<apis>:<header>=<value>`, with a
colon, although tritonserver's --help shows a comma). A gRPC client sends the key as metadata
`triton-grpc-protocol-<header>`, an HTTP client as header `<header>`; without it Triton answers gRPC
UNAVAILABLE "This protocol is restricted, expecting header ..." and HTTP 403.

Restricted: the model repository (index, load, unload), statistics, trace and log settings, and
shared-memory registration. Open: health, metadata, inference and the model config. The config stays
open because every inference client reads it before its first request (tritonize's client takes the
preprocessing contract and the batch size from it, perf_analyzer the batch size and tensors), it
changes nothing, and Triton puts nothing else in that group: restricting it would hand the key to
every client. The metrics endpoint (/metrics) has no restriction option at all.

The key: given in a file (`--control-key-file`, readable only by its owner) or in TRITONIZE_CONTROL_KEY,
never as a value on a command line; `tritonize serve` generates one per start when none was given, on
loopback too: a model load may carry files (`file:1/model.py`) that the server runs, so holding the key is
running code as the serving user (docs/serving-other-machines.md). `--open-control-apis` leaves them open.
tritonserver 2.51 takes a key only on its own command line (no file or environment form), which every user can
read: so `tritonize serve` gives it none. tritonserver listens only on Unix sockets in the server's private
directory, and serve's front (serve/front.py) checks the key, with Triton's own rules for which API is which
(http_api_open, grpc_method_open) and Triton's own refusals. restriction_flags remain for the servers tritonize
does not front: `serve --print-command`, Kubernetes, compose.

tritonize's own commands find the key of a `tritonize serve` of the same user on this machine by themselves:
each server's directory (mode 700, the user's) holds ADDRESSES_FILE, naming its ports and its key file.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.processes import start_time

KEY_ENV = "TRITONIZE_CONTROL_KEY"
KEY_HEADER = "tritonize-control-key"  # HTTP header name; gRPC clients send GRPC_KEY_HEADER
GRPC_KEY_HEADER = f"triton-grpc-protocol-{KEY_HEADER}"  # Triton's prefix for restricted gRPC protocols
KEY_FILE = "control-key"  # in the server's temporary directory when serve generated or was given the key
WORKDIR_PREFIX = "tritonize-serve-"  # each server's temporary directory: tempfile.gettempdir()/<prefix>XXXXXXXX
ADDRESSES_FILE = "addresses.json"  # in it: who serves there, on which ports, with which key file
RESTRICTED_APIS = ("model-repository", "statistics", "trace", "logging", "shared-memory")
HTTP_RESTRICTION_FROM = "23.11"  # --http-restricted-api (r23.11, commit 4b481a6f6); gRPC's is older than r23.10
MIN_KEY_CHARS = 16
RESTRICTED = "is restricted, expecting header"  # in Triton's refusal (gRPC and HTTP)
HTTP_REFUSAL = f"This API {RESTRICTED} '{KEY_HEADER}'"  # Triton's words; the front's too
GRPC_REFUSAL = f"This protocol {RESTRICTED} '{GRPC_KEY_HEADER}'"

# The APIs left open (health, metadata, inference, model config), as tritonserver 2.51 routes them
# (src/http_server.cc HTTPAPIServer::Handle, src/grpc/grpc_server.cc): anything else needs the key, unknown paths
# included. `/v2/models/stats` is statistics although the model pattern matches it: Triton checks it first.
_OPEN_HTTP = re.compile(r"/v2(?:/health/(?:live|ready))?"
                        r"|/v2/models/[^/]+(?:/versions/[0-9]+)?(?:/(?:infer|generate|generate_stream|ready|config))?")
OPEN_GRPC_METHODS = frozenset(
    [f"/inference.GRPCInferenceService/{m}" for m in ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
                                                     "ModelMetadata", "ModelInfer", "ModelStreamInfer", "ModelConfig")]
    + ["/grpc.health.v1.Health/Check"])


def http_api_open(path: str) -> bool:
    """Whether an HTTP request for `path` (the target without its query) needs no key."""
    return path != "/v2/models/stats" and _OPEN_HTTP.fullmatch(path) is not None


def grpc_method_open(path: bytes) -> bool:
    """Whether a gRPC call of `path` (its :path, /package.Service/Method) needs no key."""
    return path.decode("ascii", "replace") in OPEN_GRPC_METHODS


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def is_restricted_error(message: str) -> bool:
    return RESTRICTED in message


@dataclass(frozen=True)
class ControlKey:
    """The key the restricted APIs want, and the file where clients find it."""

    value: str = field(repr=False)
    file: Path | None = None

    def __post_init__(self):
        if not re.fullmatch(rf"[!-~]{{{MIN_KEY_CHARS},}}", self.value):
            raise TritonizeError(f"the control key must be at least {MIN_KEY_CHARS} printable ASCII characters "
                                 "without spaces (tritonize serve generates one when none is given)")

    @classmethod
    def generate(cls) -> "ControlKey":
        return cls(secrets.token_urlsafe(32))

    def written_to(self, directory: Path) -> "ControlKey":
        """The key with a file in `directory` that only the user can read (created 0600, never wider)."""
        path = Path(directory) / KEY_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.value + "\n")
        return ControlKey(self.value, path)

    @property
    def grpc_headers(self) -> dict[str, str]:
        return {GRPC_KEY_HEADER: self.value}

    @property
    def http_headers(self) -> dict[str, str]:
        return {KEY_HEADER: self.value}


def restriction_flags(key: str) -> list[str]:
    """tritonserver's options restricting RESTRICTED_APIS to `key` (the key, or a shell expansion that
    the container's shell replaces with it)."""
    setting = f"{','.join(RESTRICTED_APIS)}:{KEY_HEADER}={key}"
    return [f"--grpc-restricted-protocol={setting}", f"--http-restricted-api={setting}"]


def read_key_file(path: Path) -> ControlKey:
    """The key in `path`, which only its owner may read (as ssh demands of private keys)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as e:
        raise TritonizeError(f"cannot read the control key file {path} ({e.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TritonizeError(f"the control key file {path} is readable by others (mode {stat.S_IMODE(mode):o}): "
                             f"chmod 600 {path}")
    return ControlKey(text, path)


def client_key(key_file: Path | None, url: str | None = None) -> ControlKey | None:
    """The key a client sends: from --control-key-file, else from TRITONIZE_CONTROL_KEY, else the key of
    the user's own `tritonize serve` on this machine that listens at `url` (HOST:PORT or http://HOST:PORT), else none."""
    if key_file is not None:
        return read_key_file(key_file)
    value = os.environ.get(KEY_ENV, "").strip()
    if value:
        return ControlKey(value)
    return local_key(url) if url else None


def server_key(key_file: Path | None, open_control_apis: bool) -> ControlKey | None:
    """The key `tritonize serve` restricts the control APIs with, on every address: the one given (file,
    else environment), else a new one; None (--open-control-apis) leaves them open."""
    if open_control_apis:
        if key_file is not None:
            raise TritonizeError("--open-control-apis and --control-key-file contradict each other: give one")
        return None
    return client_key(key_file) or ControlKey.generate()


def write_addresses(directory: Path, host: str, ports: dict[str, int], key: ControlKey | None) -> None:
    """Tell this user's clients on this machine where the server of `directory` listens and where its key is."""
    owner = [os.getpid(), start_time(os.getpid())]
    record = {"owner": owner, "host": host, "ports": ports, "key_file": str(key.file) if key and key.file else None}
    (Path(directory) / ADDRESSES_FILE).write_text(json.dumps(record) + "\n")


def local_key(url: str) -> ControlKey | None:
    """The key of a live server of this user whose directory names `url`'s port, where `url`'s host is on this
    machine (loopback, or the address the server listens on)."""
    host, _, port = url.removeprefix("http://").removeprefix("https://").rpartition(":")
    host = host.strip("[]")
    if not port.isdigit():
        return None
    for directory in sorted(Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*")):
        try:
            info = directory.stat()
            record = json.loads((directory / ADDRESSES_FILE).read_text())
            pid, started = record["owner"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or start_time(pid) != started
                or int(port) not in record["ports"].values() or not record["key_file"]):
            continue
        if is_loopback(host) or host == record["host"]:
            return read_key_file(Path(record["key_file"]))
    return None


@dataclass(frozen=True)
class ServerTLS:
    """The certificate (chain) and private key the gRPC endpoint serves TLS with (PEM files)."""

    cert: Path
    key: Path

    def flags(self, cert: str | None = None, key: str | None = None) -> list[str]:
        """tritonserver's options, with the files at these paths (e.g. where a container sees them)."""
        return ["--grpc-use-ssl=true", f"--grpc-server-cert={cert or self.cert}", f"--grpc-server-key={key or self.key}"]


def server_tls(cert: Path | None, key: Path | None) -> ServerTLS | None:
    """--tls-cert and --tls-key, both or neither, each a readable PEM file."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise TritonizeError("--tls-cert and --tls-key go together: the certificate and its private key (PEM files)")
    for option, path, what in (("--tls-cert", cert, "CERTIFICATE"), ("--tls-key", key, "PRIVATE KEY")):
        pem_file(path, option, what)
    return ServerTLS(Path(cert).resolve(), Path(key).resolve())


def pem_file(path: Path, option: str, what: str) -> Path:
    """`path`, once it reads as a PEM file holding a `what` block."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise TritonizeError(f"{option} {path}: cannot read it ({e.strerror})") from None
    if not re.search(rf"-----BEGIN [A-Z ]*{what}-----", text):
        raise TritonizeError(f"{option} {path} is not a PEM file with a {what.lower()} (-----BEGIN ...{what}-----)")
    return Path(path)
