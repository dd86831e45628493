"""Helpers for the tests that run `tritonize serve` itself and do things to its processes."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tritonize.serve.process import choose_ports


class Serve:
    """`tritonize serve REPOSITORY [OPTIONS]` (embedded engine, free ports on `host`) in a child process,
    ready once constructed; clients reach it on 127.0.0.1. Its stderr lines are collected as they come;
    `expect` waits for the next ones. `key_file`: where its control key is (None with --open-control-apis)."""

    def __init__(self, repository: Path, *options: str, host: str = "127.0.0.1"):
        ports = choose_ports(host, None, None, None)
        self.grpc_url, self.http_url = f"127.0.0.1:{ports.grpc}", f"http://127.0.0.1:{ports.http}"
        self.metrics_url = f"http://127.0.0.1:{ports.metrics}/metrics"
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "tritonize"), "serve", str(repository), "--engine", "embedded",
             "--host", host, "--http-port", str(ports.http), "--grpc-port", str(ports.grpc),
             "--metrics-port", str(ports.metrics), *options],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.stderr: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.table = []
        for line in self.process.stdout:  # the models table comes once the server is ready
            self.table.append(line.rstrip())
            if line.startswith("log "):
                break
        assert self.table and self.table[-1].startswith("log "), "\n".join(self.stderr)
        self.workdir = Path(self.table[-1].split()[1]).parent
        control = next(line for line in self.table if line.startswith("control "))
        # The control key's file, unless --open-control-apis: "control  model-repository, ... need the key in FILE: ..."
        self.key_file = Path(control.split(" need the key in ")[1].split(": ")[0]) if " need the key in " in control else None
        self.expect("serving; Ctrl-C or SIGTERM stops")
        self.server_pid = next(pid for pid, cmd in children(self.process.pid).items() if "bin/tritonserver" in cmd)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line.rstrip())
            self._lines.put(line.rstrip())

    def expect(self, start: str, timeout: float = 60.0) -> str:
        """The next stderr line that starts with `start` (the lines before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting {start!r} within {timeout} s; stderr:\n" + "\n".join(self.stderr)) from None
            if line.startswith(start):
                return line

    def wait_answered(self, model: str, count: int, limit: float = 120.0) -> None:
        """Until `model` answered `count` requests (Triton's success counter, on the metrics port)."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        deadline = time.monotonic() + limit
        while True:
            with urllib.request.urlopen(self.metrics_url, timeout=30) as response:
                families = text_string_to_metric_families(response.read().decode())
            done = sum(s.value for f in families if f.name == "nv_inference_request_success" for s in f.samples
                       if s.labels.get("model") == model)
            if done >= count:
                return
            assert time.monotonic() < deadline, f"{model} answered {done} requests in {limit} s"
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, as a user's Ctrl-C: `tritonize serve` stops its server and removes its files (SIGKILL
        after 60 s). What a test killed itself is ended too, and the server serve started again, if it did."""
        servers = {self.server_pid, *(pid for pid, cmd in children(self.process.pid).items() if "bin/tritonserver" in cmd)}
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in servers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the server's group: tritonserver and its stubs
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Serve":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def children(pid: int) -> dict[int, str]:
    """pid -> command line of the live children of `pid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if entry.name.isdigit() and int(fields[1]) == pid and fields[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def stub_regions(server_pid: int) -> dict[str, str]:
    """Instance name -> the shared-memory region (a name in /dev/shm) of each live Python backend stub of the
    server, read from the stubs' command lines (model file, region, sizes, ..., instance name)."""
    found = {}
    for pid in children(server_pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"triton_python_backend_stub") and len(argv) > 8:
                found[argv[8].decode()] = argv[2].decode()
    return found


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in process group `pgid`."""
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if entry.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def make_certificates(directory: Path) -> Path:
    """A test CA (ca.pem), a server certificate it signed for localhost and 127.0.0.1 (server.pem,
    server.key), and an unrelated CA (other_ca.pem), made here with the `cryptography` package."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject: str, key, issuer: str, issuer_key, *extensions):
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())

    def write(name: str, data: bytes) -> None:
        (directory / name).write_bytes(data)

    def authority(name: str):
        key = ec.generate_private_key(ec.SECP256R1())
        write(f"{name}.pem", certificate(f"tritonize test {name}", key, f"tritonize test {name}", key,
                                         (x509.BasicConstraints(ca=True, path_length=None), True))
              .public_bytes(serialization.Encoding.PEM))
        return key

    directory.mkdir(parents=True, exist_ok=True)
    ca_key = authority("ca")
    authority("other_ca")
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server = certificate("localhost", server_key, "tritonize test ca", ca_key, (names, False),
                         (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False))
    write("server.pem", server.public_bytes(serialization.Encoding.PEM))
    write("server.key", server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    return directory
