"""The GPU install, resolved against the real package index (issue 34: N24, Build 3).

For every release with pins, the one command that `tritonize convert releases` prints (and docs/gpu-box.md gives)
must install a consistent set: TensorRT's Python package of exactly the release's TensorRT, the torch-tensorrt
built against it, the torch that torch-tensorrt pins, the torchvision built for that torch, and no CUDA 13 runtime
beside the CUDA 12 TensorRT. The facts come from the index, as pip sees it:
- pip's own finder lists the TensorRT packages' versions (`pip index versions`): they are 15 kB source stubs that
  download the real wheels from NVIDIA's index when built, so only their names and versions can be checked here;
- pip resolves each torch-tensorrt pin (`pip install --dry-run --no-deps --report`) and reports its Requires-Dist;
- torch's and torchvision's metadata are the index's PEP 658 `.metadata` files beside their wheels (the wheels are
  up to 800 MB: resolving them whole took pip 23.2 four minutes), or pip's report where the index has none.
pip runs isolated from this machine's configuration (which may cap torch). Skipped, with the reason, when the
index cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from tests.pyproject import tomllib
import urllib.error
import urllib.request
from email.parser import Parser
from functools import lru_cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

import tritonize
from tritonize.releases import load_releases, pins_line, version_parts

INDEX = "https://pypi.org/simple"
ISOLATED = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # with --isolated: no config file, no PIP_* variable
DOCS = Path(tritonize.__file__).resolve().parent.parent / "docs" / "gpu-box.md"
WITH_PINS = [r for r in load_releases() if r.tensorrt_pip]


@pytest.fixture(scope="module")
def index():
    try:
        urllib.request.urlopen(f"{INDEX}/pip/", timeout=15).close()
    except OSError as e:
        pytest.skip(f"the package index {INDEX} cannot be reached ({e}): the GPU install is not checked")
    return INDEX


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--isolated", "--disable-pip-version-check"],
                          env=ISOLATED, capture_output=True, text=True, timeout=600)


@lru_cache(maxsize=None)
def index_versions(name: str) -> frozenset[str]:
    """The versions of `name` that pip's finder sees on the index for this Python and platform."""
    done = _pip("index", "versions", name)
    found = re.search(r"Available versions: (.*)", done.stdout)
    return frozenset(v.strip() for v in found.group(1).split(",")) if found else frozenset()


@lru_cache(maxsize=None)
def resolved(requirement: str) -> dict:
    """What pip installs for `requirement` alone (no dependencies): its report's metadata, or {"error": why}."""
    done = _pip("install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", "-", requirement)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["pip failed"])[-1]}
    [install] = json.loads(done.stdout)["install"]
    return install["metadata"]


@lru_cache(maxsize=None)
def metadata(name: str, version: str) -> dict:
    """name, version and requires_dist of the wheel pip would pick for this Python, from the index's .metadata
    file (PEP 658), else from pip's report."""
    request = urllib.request.Request(f"{INDEX}/{canonicalize_name(name)}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(request, timeout=60))["files"]
    tags = set(sys_tags())
    for file in files:
        if not file["filename"].endswith(".whl"):
            continue
        _, wheel_version, _, wheel_tags = parse_wheel_filename(file["filename"])
        if wheel_version == Version(version) and wheel_tags & tags:
            try:
                text = urllib.request.urlopen(file["url"] + ".metadata", timeout=60).read().decode()
            except urllib.error.HTTPError:
                break
            message = Parser().parsestr(text)
            return {"name": message["Name"], "version": message["Version"],
                    "requires_dist": message.get_all("Requires-Dist") or []}
    return resolved(f"{name}=={version}")


def needs(meta: dict, name: str) -> list[Requirement]:
    """The requirements of a distribution on `name` that apply here (markers evaluated, no extra)."""
    found = [Requirement(r) for r in meta.get("requires_dist") or []]
    return [r for r in found if canonicalize_name(r.name) == canonicalize_name(name)
            and (r.marker is None or r.marker.evaluate({"extra": ""}))]


def cuda_major(requirement: Requirement) -> int | None:
    """The CUDA major a requirement brings: NVIDIA's -cu12/-cu13 wheels, or the unsuffixed CUDA 13 ones by version."""
    name = canonicalize_name(requirement.name)
    suffix = re.search(r"-cu(\d+)$", name)
    if suffix:
        return int(suffix.group(1))
    pinned = [s.version for s in requirement.specifier if s.operator == "=="]
    if (name.startswith("nvidia-cuda") or name.startswith("cuda-")) and pinned:
        return version_parts(pinned[0])[0]
    return None


def printed_command(line: str) -> list[str]:
    """The arguments of the pip command in a line of `convert releases`."""
    command = line.split("): ", 1)[1]
    return shlex.split(command, comments=True)


def pins(args: list[str]) -> dict[str, Requirement]:
    requirements = [Requirement(a) for a in args if "==" in a and not a.startswith("-")]
    return {canonicalize_name(r.name): r for r in requirements}


def exact(requirement: Requirement | None) -> str | None:
    return next((s.version for s in requirement.specifier if s.operator == "=="), None) if requirement else None


def problems_of(release) -> list[str]:
    args = printed_command(pins_line(release))
    found = pins(args)
    problems = []
    if args[:4] != ["pip", "install", "-e", ".[gpu,dev]"]:
        problems.append(f"not one command that installs tritonize with its pins: {' '.join(args)}")
    trt = next((r for n, r in found.items() if n.startswith("tensorrt")), None)
    torch_trt, torch, vision = found.get("torch-tensorrt"), found.get("torch"), found.get("torchvision")
    if trt is None:
        return problems + ["no TensorRT package pinned"]
    trt_version = exact(trt)
    if trt_version not in index_versions(trt.name):
        problems.append(f"{trt} is not on the index (it has {sorted(index_versions(trt.name))[-6:]}...)")
    if version_parts(trt_version)[:3] != version_parts(release.tensorrt)[:3]:
        problems.append(f"{trt} is not the release's TensorRT {release.tensorrt}")
    if torch is None:
        problems.append("no torch pinned: pip keeps or picks a torch of its own (the newest is a CUDA 13 build), "
                        + ("and torch-tensorrt then replaces it, leaving a torchvision built for another torch"
                           if torch_trt else "whatever CUDA the TensorRT is built for"))
    if torch_trt is not None:
        meta = resolved(str(torch_trt))
        if "error" in meta:
            return problems + [f"pip cannot resolve {torch_trt}: {meta['error']}"]
        for need in needs(meta, "torch"):
            if torch is not None and exact(torch) not in need.specifier:
                problems.append(f"torch-tensorrt {meta['version']} requires {need}, the line pins {torch}")
            if torch is None:
                problems.append(f"torch-tensorrt {meta['version']} requires {need}, the line pins no torch")
        trt_needs = [r for r in (Requirement(d) for d in meta["requires_dist"]) if canonicalize_name(r.name).startswith("tensorrt")
                     and (r.marker is None or r.marker.evaluate({"extra": ""}))]
        for need in trt_needs:
            if trt_version not in need.specifier:
                problems.append(f"torch-tensorrt {meta['version']} requires {need}, the line pins {trt}")
            elif not [v for v in index_versions(need.name) if v in need.specifier]:
                problems.append(f"torch-tensorrt {meta['version']} requires {need}, which the index does not have")
    if torch is not None:
        meta = metadata("torch", exact(torch))
        majors = {cuda_major(r) for r in (Requirement(d) for d in meta["requires_dist"])
                  if r.marker is None or r.marker.evaluate({"extra": ""})} - {None}
        if majors != {12}:
            problems.append(f"torch {meta['version']} brings CUDA {sorted(majors)} runtimes beside the CUDA 12 {trt}")
    project = [Requirement(r) for r in tomllib.loads((DOCS.parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]]
    for requirement in project:
        pin = found.get(canonicalize_name(requirement.name))
        if pin is not None and exact(pin) not in requirement.specifier:
            problems.append(f"tritonize requires {requirement}, the line pins {pin}")
    if vision is None and torch is not None:
        problems.append(f"no torchvision pinned for {torch}: the installed one may be built for another torch")
    if vision is not None:
        meta = metadata("torchvision", exact(vision))
        for need in needs(meta, "torch"):
            if torch is None or exact(torch) not in need.specifier:
                problems.append(f"torchvision {meta['version']} requires {need}, the line pins {torch}")
    return problems


@pytest.mark.parametrize("release", WITH_PINS, ids=lambda r: r.release)
def test_n24_the_printed_gpu_install_resolves_to_a_consistent_set(index, release):
    """N24: 7c97878 printed `pip install 'tensorrt-cu12==10.3.0' 'torch-tensorrt==2.5.0'` to run after
    `pip install -e ".[gpu,dev]"`: torch-tensorrt 2.5.0 requires torch<2.6.0,>=2.5.0, so pip replaced the torch the
    first install brought and left its torchvision, which then fails at import
    (`operator torchvision::nms does not exist`)."""
    problems = problems_of(release)
    assert not problems, f"Triton {release.release}:\n  " + "\n  ".join(problems)


def test_n24_the_docs_give_the_printed_install():
    """docs/gpu-box.md gives the install as the one command `convert releases` prints, not two steps."""
    commands = {shlex.join(printed_command(pins_line(r))) for r in WITH_PINS}
    given = [shlex.join(shlex.split(line.strip().strip("`"), comments=True)) for line in DOCS.read_text().splitlines()
             if line.strip().strip("`").startswith("pip install")]
    assert given and set(given) <= commands, f"docs/gpu-box.md gives {given}; `convert releases` prints {sorted(commands)}"
