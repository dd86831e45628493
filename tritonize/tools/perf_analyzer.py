"""The real perf_analyzer, Triton's own load generator: found on PATH or where `fetch` put it.

No package installs it: the registry's `perf-analyzer` is a placeholder, and the binary ships only
inside tritonclient's manylinux wheel (`tritonclient-<v>.data/data/bin/perf_analyzer`). 2.51.0 is the
newest whose binary runs on glibc 2.36 (2.55 needs 2.38, 2.73 ships none); installing that wheel would
downgrade the client library, so `fetch` downloads it and extracts the binary only. The binary links
`libcudart.so.12` (loaded, never called without a GPU: taken from the nvidia-cuda-runtime-cu12 wheel)
and `libb64.so.0d` (Debian/Ubuntu package libb64-0d). Its directory:

    <home>/perf_analyzer/bin/perf_analyzer      wrapper: LD_LIBRARY_PATH=../lib, exec ../libexec/perf_analyzer
    <home>/perf_analyzer/libexec/perf_analyzer  the binary from the wheel
    <home>/perf_analyzer/lib/                   libcudart.so.12 (and libb64.so.0d when the system lacks it)
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.files import atomic_path
from tritonize.progress import say

TRITONCLIENT_VERSION = "2.51.0"
CUDART = "nvidia-cuda-runtime-cu12==12.6.77"  # CUDA 12.6: the toolkit of Triton 24.10 = tritonclient 2.51
DEBIAN_PACKAGE = "libb64-0d"
LIBB64 = "libb64.so.0d"
NAME = "perf_analyzer"
GET_COMMAND = "tritonize tools get-perf-analyzer"


@dataclass(frozen=True)
class PerfAnalyzer:
    path: Path  # what to execute
    version: str  # "2.51.0"

    def __str__(self) -> str:
        return f"perf_analyzer {self.version} ({self.path})"


def tools_home() -> Path:
    """Where `fetch` puts tools: $TRITONIZE_TOOLS, else the user's cache directory."""
    if os.environ.get("TRITONIZE_TOOLS"):
        return Path(os.environ["TRITONIZE_TOOLS"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tritonize" / "tools"


def fetched_path(home: Path | None = None) -> Path:
    return (home or tools_home()) / NAME / "bin" / NAME


def find() -> PerfAnalyzer | None:
    """The first perf_analyzer that runs: on PATH, then where `fetch` puts it; None when none does."""
    candidates = [shutil.which(NAME), fetched_path()]
    for candidate in dict.fromkeys(str(c) for c in candidates if c):
        found = _probe(Path(candidate))
        if found:
            return found
    return None


def require() -> PerfAnalyzer:
    found = find()
    if found is None:
        raise TritonizeError(f"perf_analyzer is not on PATH nor in {fetched_path().parent.parent}; "
                             f"get it with `{GET_COMMAND}`, or use --load-generator builtin")
    return found


def _probe(path: Path) -> PerfAnalyzer | None:
    """A PerfAnalyzer when `path --version` runs (every library resolves), else None."""
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    try:
        result = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    match = re.search(r"Perf Analyzer Version (\S+)", result.stdout + result.stderr)
    return PerfAnalyzer(path, match[1]) if result.returncode == 0 and match else None


def fetch(home: Path | None = None, force: bool = False) -> PerfAnalyzer:
    """Download tritonclient's wheel, extract perf_analyzer and libcudart, find libb64, check it runs.

    Published atomically into <home>/perf_analyzer; an existing working copy is kept unless `force`.
    """
    target = fetched_path(home).parent.parent
    if not force and (found := _probe(fetched_path(home))):
        say(f"= {found} is already there (--force fetches it again)")
        return found
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise TritonizeError(f"tritonclient {TRITONCLIENT_VERSION} ships perf_analyzer for Linux x86_64 only; "
                             f"this is {sys.platform} {platform.machine()}")
    libb64 = _system_library(LIBB64)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tritonize-fetch-") as downloads, atomic_path(target) as tmp:
        for sub in ("bin", "lib", "libexec"):
            (tmp / sub).mkdir(parents=True)
        wheel = _download(f"tritonclient=={TRITONCLIENT_VERSION}", Path(downloads))
        _extract(wheel, f"tritonclient-{TRITONCLIENT_VERSION}.data/data/bin/{NAME}", tmp / "libexec" / NAME)
        (tmp / "libexec" / NAME).chmod(0o755)
        cudart = _download(CUDART, Path(downloads))
        _extract(cudart, lambda n: n.startswith("nvidia/cuda_runtime/lib/libcudart.so.12"), tmp / "lib" / "libcudart.so.12")
        if libb64 is None:
            _libb64_from_debian_archive(Path(downloads), tmp / "lib" / LIBB64)
        wrapper = tmp / "bin" / NAME
        wrapper.write_text('#!/bin/sh\n# perf_analyzer with its libraries (written by `tritonize tools get-perf-analyzer`)\n'
                           'here=$(dirname "$(readlink -f "$0")")/..\n'
                           'LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/libexec/perf_analyzer" "$@"\n')
        wrapper.chmod(0o755)
        _check_libraries(tmp)
        if _probe(wrapper) is None:
            raise TritonizeError(f"the extracted perf_analyzer does not run here (`{wrapper} --version` failed)")
    found = _probe(fetched_path(home))
    assert found is not None
    say(f"✓ {found}: binary from tritonclient {TRITONCLIENT_VERSION}, libcudart from {CUDART}, "
        f"{LIBB64} from {libb64 or 'the Debian package ' + DEBIAN_PACKAGE + ' (private copy)'}")
    return found


def _download(requirement: str, dest: Path) -> Path:
    """The manylinux x86_64 wheel of `requirement`, downloaded with the running Python's pip (nothing installed)."""
    platforms = ("manylinux1_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               *(f"--platform={p}" for p in platforms), "--dest", str(dest), requirement]
    say(f"downloading {requirement}")
    result = subprocess.run(command, capture_output=True, text=True)
    name = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(dest.glob(f"{name}-*.whl"))
    if result.returncode != 0 or not wheels:
        reason = (result.stderr.strip().splitlines() or ["no wheel found"])[-1]
        raise TritonizeError(f"cannot download {requirement} with pip ({reason}); check the package index "
                             "(pip config) or network")
    return wheels[0]


def _extract(wheel: Path, member, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if (member(n) if callable(member) else n == member)]
        if not names:
            raise TritonizeError(f"{wheel.name} has no {member if isinstance(member, str) else dest.name}")
        with archive.open(names[0]) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)


def _system_library(soname: str) -> str | None:
    """The path ldconfig knows for `soname`, or None."""
    try:
        listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return None
    for line in listing.splitlines():
        if line.strip().startswith(soname + " "):
            return line.rsplit("=>", 1)[-1].strip()
    return None


def _libb64_from_debian_archive(work: Path, dest: Path) -> None:
    """libb64.so.0d out of the Debian package, unpacked privately (`apt-get download` needs no root)."""
    hint = (f"perf_analyzer needs {LIBB64} from the Debian/Ubuntu package {DEBIAN_PACKAGE}: "
            f"`apt-get install {DEBIAN_PACKAGE}` (as root), then run `{GET_COMMAND}` again")
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise TritonizeError(hint)
    say(f"apt-get download {DEBIAN_PACKAGE}")
    downloaded = subprocess.run(["apt-get", "download", DEBIAN_PACKAGE], cwd=work, capture_output=True, text=True)
    debs = sorted(work.glob(f"{DEBIAN_PACKAGE}_*.deb"))
    if downloaded.returncode != 0 or not debs:
        raise TritonizeError(f"{hint} (apt-get download: {(downloaded.stderr.strip().splitlines() or ['failed'])[-1]})")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(work / "deb")], check=True, capture_output=True)
    found = sorted((work / "deb").rglob(f"{LIBB64}*"))
    if not found:
        raise TritonizeError(f"{debs[0].name} holds no {LIBB64}; {hint}")
    shutil.copyfile(found[0].resolve(), dest)


def _check_libraries(root: Path) -> None:
    """Every library the binary links resolves (ldd), with the private lib/ first."""
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(root / "lib"), os.environ.get("LD_LIBRARY_PATH")]))}
    result = subprocess.run(["ldd", str(root / "libexec" / NAME)], capture_output=True, text=True, env=env)
    missing = [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]
    if missing:
        raise TritonizeError(f"perf_analyzer links {', '.join(missing)}, which this machine lacks "
                             f"({LIBB64} comes with the Debian package {DEBIAN_PACKAGE})")
