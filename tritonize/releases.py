"""The Triton release table: which container release serves which TensorRT / ONNX Runtime / PyTorch / CUDA versions.

The table is data (`tritonize/data/triton_releases.json`): each row's `_sources` names the source and
grade of every cell. Only confirmed figures (grades V, V*, S) are in the fields read here; derived,
inferred and candidate values stay in `_sources` with the field null. Callers must treat None as
"unknown", never as "compatible".

TensorRT matching rule (`tensorrt_matches`): a serialized plan only deserializes in the exact
TensorRT it was built with. Versions are compared on all four parts when both sides name a build
number (trtexec prints it from 10.4 on, `tensorrt.__version__` always): Triton refuses a plan built
with 8.6.1.6 when it runs 8.6.1.2 ("expecting library version 8.6.1.2 got 8.6.1.6",
triton-inference-server/server#5975). With three parts on one side, major.minor.patch decides.

Version-compatible plans (`tensorrt_loads`, built 8.6+ with --version-compatible) also load in a
later runtime of the same major, and across majors only 8 -> 10 and 10 -> 11 (TensorRT 11.4 support
matrix: "No other combination across major versions is supported. For example, a TensorRT 8 engine
cannot run with a TensorRT 11 runtime").
"""

from __future__ import annotations

import json
import platform
import re
import sys
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources

from tritonize.errors import TritonizeError

DATA_FILE = "triton_releases.json"
CROSS_MAJOR = {(8, 10), (10, 11)}  # version-compatible plans across majors (builder, runtime)


@dataclass(frozen=True)
class Release:
    release: str  # container tag, "YY.MM": nvcr.io/nvidia/tritonserver:<release>-py3
    triton: str | None  # Triton server version, "2.51.0"
    tensorrt: str | None  # TensorRT in the -py3 container: the version a plan must be built with
    onnxruntime: str | None
    pytorch: str | None
    cuda: str | None
    trtllm_tensorrt: str | None = None  # TensorRT in the -trtllm-python-py3 container (differs!)
    trtllm_pytorch: str | None = None
    upstream_container: str | None = None  # the NGC stack it is built on (26.05 and 26.06: the month before)
    tensorrt_pip: str | None = None  # "tensorrt-cu12==10.5.0": TensorRT's Python package for building and checking plans
    torch_tensorrt_pip: str | None = None  # "torch-tensorrt==2.5.0": the release built against exactly that TensorRT
    torch_pip: str | None = None  # "torch==2.5.0": torch-tensorrt's pin (else the previous row's), a CUDA 12 build
    torchvision_pip: str | None = None  # "torchvision==0.20.0": the torchvision that pins that torch
    # Where the GPU install resolves: (machine, CPython versions) on Linux, from "pip_platforms" (N34;
    # tests/test_gpu_install.py resolves every line for CPython 3.10-3.13 on x86_64 and aarch64).
    pip_platforms: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def image(self) -> str:
        return f"nvcr.io/nvidia/tritonserver:{self.release}-py3"

    @property
    def tensorrt_image(self) -> str:
        """NVIDIA's TensorRT container on the same stack (it has trtexec; check its TensorRT matches)."""
        return f"nvcr.io/nvidia/tensorrt:{self.upstream_container or self.release}-py3"


@lru_cache(maxsize=1)
def load_releases() -> list[Release]:
    """All known releases, oldest first."""
    text = resources.files("tritonize").joinpath("data").joinpath(DATA_FILE).read_text()
    names = {f.name for f in fields(Release)}
    rows = []
    for row in json.loads(text)["releases"]:
        values = {k: v for k, v in row.items() if k in names}
        values["pip_platforms"] = tuple((m, tuple(p)) for m, p in (row.get("pip_platforms") or {}).items())
        rows.append(Release(**values))
    return sorted(rows, key=lambda r: r.release)


def source() -> dict:
    """Where each column of the table comes from (as written in the data file)."""
    return json.loads(resources.files("tritonize").joinpath("data").joinpath(DATA_FILE).read_text())["source"]


def release_info(release: str) -> Release:
    for r in load_releases():
        if r.release == release.strip():
            return r
    known = ", ".join(r.release for r in load_releases())
    raise TritonizeError(f"unknown Triton release {release!r}: give a container release YY.MM, one of {known}")


def latest_release() -> Release:
    return load_releases()[-1]


def tensorrt_major_floor(release: Release) -> int | None:
    """The lowest TensorRT major `release` can ship: its own, else that of the nearest earlier release whose TensorRT
    the table knows (a later container never ships an older TensorRT); None when no earlier one is known."""
    known = [r for r in load_releases() if r.tensorrt and r.release <= release.release]
    return version_parts(known[-1].tensorrt)[0] if known else None


def version_parts(version: str) -> tuple[int, ...]:
    """Leading numeric components: "10.5.0.18" -> (10, 5, 0, 18); "9.3.0.post12.dev1" -> (9, 3, 0)."""
    parts = []
    for piece in str(version).strip().split("."):
        m = re.match(r"\d+$", piece)
        if not m:
            break
        parts.append(int(piece))
    return tuple(parts)


def tensorrt_matches(built_with: str, served_by: str) -> bool:
    """True when a plan built with TensorRT `built_with` deserializes in TensorRT `served_by`."""
    a, b = version_parts(built_with), version_parts(served_by)
    if len(a) < 3 or len(b) < 3 or a[:3] != b[:3]:
        return False
    return len(a) < 4 or len(b) < 4 or a[3] == b[3]


def tensorrt_loads(built_with: str, served_by: str, version_compatible: bool = False) -> bool:
    """True when a plan built with `built_with` (version-compatible or not) loads in `served_by`."""
    if tensorrt_matches(built_with, served_by):
        return True
    a, b = version_parts(built_with)[:3], version_parts(served_by)[:3]
    if not version_compatible or len(a) < 2 or len(b) < 2 or a < (8, 6) or b < a:
        return False
    return a[0] == b[0] or (a[0], b[0]) in CROSS_MAJOR


GPU_INSTALL = "pip install -e '.[gpu,dev]'"  # run in the tritonize checkout, in a fresh virtual environment
CHECKED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # what tests/test_gpu_install.py resolves every line for
CHECKED_MACHINES = ("x86_64", "aarch64")


def install_pins(release: Release) -> list[str]:
    """The requirements of `release`'s GPU install: TensorRT's Python package of exactly the release's TensorRT, with
    its bindings and libraries pinned too (N38: the package is a stub whose own `pip install` of them is skipped once
    pip has cached the wheel it built from it, NVIDIA/TensorRT#3936; its setup.py pins both to its own version), the
    torch-tensorrt built against it (where one is), the torch that torch-tensorrt pins and the torchvision built for
    that torch."""
    if not release.tensorrt_pip:
        return []
    name, version = release.tensorrt_pip.split("==")
    tensorrt = [release.tensorrt_pip, f"{name}-bindings=={version}", f"{name}-libs=={version}"]
    return tensorrt + [p for p in (release.torch_tensorrt_pip, release.torch_pip, release.torchvision_pip) if p]


def install_command(release: Release) -> str | None:
    """The one pip command that installs tritonize and builds plans for `release`, or None (no TensorRT wheel): its
    pins resolved together (pinned one after the other, torch-tensorrt would replace torch and leave a torchvision
    that no longer imports). tests/test_gpu_install.py resolves it with pip for every platform it names."""
    pins = install_pins(release)
    return " ".join([GPU_INSTALL, *(f"'{p}'" for p in pins)]) if pins else None


def _spans(versions: tuple[str, ...]) -> str:
    """("3.10", "3.11", "3.12") -> "3.10-3.12"; a gap gives two spans."""
    minors = sorted(int(v.split(".")[1]) for v in versions)
    spans, start = [], minors[0]
    for previous, minor in zip(minors, minors[1:] + [None]):
        if minor != previous + 1:
            spans.append(f"3.{start}" if start == previous else f"3.{start}-3.{previous}")
            start = minor
    return ", ".join(spans)


def platforms_text(release: Release) -> str:
    """Where `release`'s GPU install resolves: "CPython 3.10-3.12, Linux x86_64"."""
    by_pythons: dict[str, list[str]] = {}
    for machine, pythons in release.pip_platforms:
        by_pythons.setdefault(_spans(pythons), []).append(machine)
    if not by_pythons:
        return "no platform"
    return "; ".join(f"CPython {p}, Linux {' and '.join(m)}" for p, m in by_pythons.items())


def this_platform() -> tuple[str, str]:
    """This interpreter and machine as the GPU install names them: ("CPython 3.11", "Linux x86_64")."""
    python = f"{platform.python_implementation()} {sys.version_info.major}.{sys.version_info.minor}"
    return python, f"{platform.system()} {platform.machine()}"


def install_problem(release: Release) -> str | None:
    """Why `release`'s GPU install does not resolve for this Python and machine (one sentence), or None."""
    python, machine = this_platform()
    pythons = dict(release.pip_platforms).get(machine.removeprefix("Linux "), ())
    if python.removeprefix("CPython ") in pythons and machine.startswith("Linux "):
        return None
    return (f"the GPU install of Triton {release.release} resolves on {platforms_text(release)} only, and this is "
            f"{python} on {machine}")


def pins_line(release: Release | None = None) -> str:
    """The GPU install of `release` (or, without one, of every release whose pins are known), one line each, naming
    where it resolves. tritonize's `gpu` extra pins none of it: torch-tensorrt's newest release would choose a
    TensorRT no server runs."""
    def one(r: Release) -> str:
        if not r.tensorrt_pip:
            return f"Triton {r.release} (TensorRT {r.tensorrt or 'unknown'}): no pip wheel; build with --builder container"
        note = "" if r.torch_tensorrt_pip else "  # no torch-tensorrt for this TensorRT: no --builder torch-tensorrt"
        return f"Triton {r.release} (TensorRT {r.tensorrt}; {platforms_text(r)}): {install_command(r)}{note}"

    if release is not None:
        return one(release)
    return "\n".join(f"    {one(r)}" for r in load_releases() if r.tensorrt_pip)


def tensorrt_pip(version: str) -> str | None:
    """The pip requirement of TensorRT's Python package that loads plans of TensorRT `version`: a release's
    `tensorrt_pip` whose TensorRT matches (PyPI's versions are not TensorRT's: 10.7.0.post1, 10.8.0.43), or None."""
    return next((r.tensorrt_pip for r in load_releases()
                 if r.tensorrt_pip and r.tensorrt and tensorrt_matches(version, r.tensorrt)), None)


def host_tensorrt() -> str | None:
    """The TensorRT version of this Python's `tensorrt` package, or None when it is not installed."""
    try:
        import tensorrt
    except ImportError:
        return None
    return tensorrt.__version__


def releases_for_tensorrt(version: str, version_compatible: bool = False) -> list[Release]:
    """Releases whose -py3 container runs a plan built with TensorRT `version` (rules: module doc)."""
    if len(version_parts(version)) < 3:
        raise TritonizeError(f"TensorRT version {version!r} needs at least major.minor.patch (e.g. 10.5.0)")
    return [r for r in load_releases() if r.tensorrt and tensorrt_loads(version, r.tensorrt, version_compatible)]
