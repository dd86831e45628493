"""The package index as pip sees it from another machine, served to pip on loopback for one test run.

pip's resolver is the oracle of the GPU install (tests/test_gpu_install.py), but resolving for CPython 3.10-3.13 on
x86_64 and aarch64 from here meets three walls, each handled here and nowhere else:
- The index answers without cache headers and names no PEP 658 metadata files, so each pip process would fetch
  every project's page again (numpy's is 1.8 MB) and read every wheel's metadata through HTTP range requests:
  minutes per resolution. Here each page and each metadata file is fetched once per run (urllib3, pooled
  connections), shared by the parallel pips, and each page keeps only the wheels one (Python, machine) can install.
- NVIDIA's `tensorrt`, `tensorrt-cu12` and `tensorrt-cu12-libs` are source stubs (15 kB): building one downloads
  the real wheel from NVIDIA's own index, which cannot be reached from here. Each is offered as a wheel carrying
  the stub's own metadata (its PKG-INFO), which is all pip's resolver reads of it; what the libraries' real wheel
  holds for each machine is not checked here (the bindings, real wheels on PyPI, show where TensorRT has one).
- A wheel whose metadata file the index lacks is read for its METADATA through range requests, as pip's own
  `fast-deps` does.
Only metadata passes through; a whole file (a build dependency of the editable install) is redirected to the index.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import threading
import zipfile
from email.parser import Parser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3
from packaging import tags
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

INDEX = "https://pypi.org/simple"
FILES = "https://files.pythonhosted.org/"
STUBS = frozenset({"tensorrt", "tensorrt-cu12", "tensorrt-cu12-libs"})  # NVIDIA's source stubs (module doc)
GLIBC = 35  # Ubuntu 22.04's glibc 2.35: wheels for it and any older manylinux


def platforms(machine: str) -> list[str]:
    """The platform tags of a Linux `machine` with glibc 2.35, newest first (pip's --platform, once each)."""
    legacy = ["manylinux2014", "manylinux2010", "manylinux1"] if machine == "x86_64" else ["manylinux2014"]
    return [f"manylinux_2_{m}_{machine}" for m in range(GLIBC, 16, -1)] + [f"{p}_{machine}" for p in legacy] + [
        f"linux_{machine}"]


def supported(python: str, machine: str) -> frozenset[tags.Tag]:
    version = tuple(int(p) for p in python.split("."))
    found = [*tags.cpython_tags(version, platforms=platforms(machine)),
             *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms(machine))]
    return frozenset(found)


class PackageIndex:
    """A loopback index for pip (`url(python, machine)`), caching for its lifetime; a context manager."""

    def __init__(self):
        self.http = urllib3.PoolManager(maxsize=16, retries=urllib3.Retry(3, backoff_factor=0.5),
                                        timeout=urllib3.Timeout(connect=15, read=60))
        self._cache: dict[str, object] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._envs: dict[str, frozenset[tags.Tag]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "PackageIndex":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.http.clear()

    def url(self, python: str, machine: str) -> str:
        env = f"cp{python.replace('.', '')}-{machine}"
        self._envs[env] = supported(python, machine)
        return f"http://127.0.0.1:{self.server.server_port}/{env}/simple"

    def once(self, key: str, compute):
        """`compute()` once per key for the index's lifetime, however many threads ask at the same time."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                value = compute()
                with self._lock:
                    self._cache[key] = value
            return self._cache[key]

    def get(self, url: str, headers: dict | None = None) -> tuple[int, bytes]:
        def fetch():
            response = self.http.request("GET", url, headers=headers or {})
            return response.status, response.data
        return self.once(url, fetch)

    def project(self, name: str) -> dict | None:
        """The index's PEP 691 page of `name`, or None (no such project)."""
        status, data = self.get(f"{INDEX}/{canonicalize_name(name)}/", {"Accept": "application/vnd.pypi.simple.v1+json"})
        return json.loads(data) if status == 200 else None

    def page(self, env: str, name: str) -> bytes | None:
        """The page pip reads: the wheels `env` can install, each with its metadata here; a stub's sdists as wheels."""
        def build():
            page = self.project(name)
            if page is None:
                return None
            wanted, files = self._envs[env], []
            for file in page["files"]:
                filename, url = file["filename"], file["url"]
                if filename.endswith(".whl"):
                    try:
                        wheel_tags = parse_wheel_filename(filename)[3]
                    except ValueError:
                        continue
                    if wheel_tags & wanted and url.startswith(FILES):
                        files.append({**file, "url": f"/files/{url[len(FILES):]}", "core-metadata": True})
                elif canonicalize_name(name) in STUBS and filename.endswith(".tar.gz") and url.startswith(FILES):
                    project, version = parse_sdist_filename(filename)
                    wheel = f"{project.replace('-', '_')}-{version}-py3-none-any.whl"
                    files.append({**file, "filename": wheel, "url": f"/stub/{url[len(FILES):]}/{wheel}", "hashes": {},
                                  "core-metadata": True})
            return json.dumps({**page, "files": files}).encode()
        return self.once(f"page {env} {name}", build)

    def has_wheel(self, python: str, machine: str, name: str, version: str) -> bool:
        """Whether the index has a wheel of `name`==`version` that CPython `python` on Linux `machine` installs."""
        wanted = supported(python, machine)
        for file in (self.project(name) or {"files": []})["files"]:
            if file["filename"].endswith(".whl"):
                _, wheel_version, _, wheel_tags = parse_wheel_filename(file["filename"])
                if str(wheel_version) == version and wheel_tags & wanted:
                    return True
        return False

    def wheel_metadata(self, path: str) -> bytes:
        """The METADATA of the wheel at FILES/`path`: the index's metadata file, else read out of the wheel."""
        def read():
            status, data = self.get(f"{FILES}{path}.metadata")
            if status == 200:
                return data
            with zipfile.ZipFile(io.BufferedReader(_RangeFile(self.http, f"{FILES}{path}"), 1 << 16)) as wheel:
                name = next(n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
                return wheel.read(name)
        return self.once(f"metadata {path}", read)

    def stub_metadata(self, path: str) -> bytes:
        """A stub's metadata: the PKG-INFO at the top of its sdist."""
        def read():
            status, data = self.get(f"{FILES}{path}")
            with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
                # the top-level PKG-INFO: in the sdist's folder, or (NVIDIA's 10.3/10.5 libs stubs) at its root
                member = min((m for m in sdist.getmembers() if m.name.rsplit("/", 1)[-1] == "PKG-INFO"),
                             key=lambda m: m.name.count("/"))
                text = sdist.extractfile(member).read()
            Parser().parsestr(text.decode())  # fails loudly on something that is not core metadata
            return text
        return self.once(f"stub {path}", read)


class _RangeFile(io.RawIOBase):
    """A remote file read through HTTP range requests (enough of one for zipfile)."""

    def __init__(self, http: urllib3.PoolManager, url: str):
        self.http, self.url, self.position = http, url, 0
        self.size = int(http.request("HEAD", url).headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = {0: offset, 1: self.position + offset, 2: self.size + offset}[whence]
        return self.position

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.size - self.position)
        if count <= 0:
            return 0
        data = self.http.request("GET", self.url, headers={"Range": f"bytes={self.position}-{self.position + count - 1}"}).data
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


def _handler(index: PackageIndex):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            try:
                self._route(path)
            except Exception as e:  # noqa: BLE001 - pip is told (502), and names the URL in its error
                self._send(502, f"{type(e).__name__}: {e}".encode(), "text/plain")

        def _route(self, path: str):
            env, _, rest = path.lstrip("/").partition("/")
            if rest.startswith("simple/"):
                page = index.page(env, rest.split("/")[1])
                self._send(200, page, "application/vnd.pypi.simple.v1+json") if page else self._send(404, b"", "text/plain")
            elif path.startswith("/files/") and path.endswith(".metadata"):
                self._send(200, index.wheel_metadata(path[len("/files/"):-len(".metadata")]), "text/plain")
            elif path.startswith("/stub/") and path.endswith(".metadata"):  # /stub/<the sdist's path>/<wheel>.metadata
                self._send(200, index.stub_metadata(path[len("/stub/"):].rsplit("/", 1)[0]), "text/plain")
            elif path.startswith("/files/"):
                self.send_response(302)
                self.send_header("Location", FILES + path[len("/files/"):])
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._send(404, b"", "text/plain")

        def _send(self, status: int, body: bytes, kind: str):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
