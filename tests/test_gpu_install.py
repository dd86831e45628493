"""The GPU install, resolved by pip against the real package index, for the Pythons and machines users have
(issue 34: N24; issue 41: N34, N38).

Each line `tritonize convert releases` prints (and docs/gpu-box.md gives) is resolved whole, as one set, the way a
user's pip would on a GPU box: `pip install --dry-run --report` of exactly that line, for CPython 3.10-3.13 on Linux
x86_64 and aarch64 (`--python-version`, `--platform` with glibc 2.35's tags, `--only-binary :all:`). It must resolve
exactly where the line says it does (`pip_platforms` in the release table), and the set it resolves to must be
consistent: TensorRT's packages of the release's TensorRT, no CUDA 13 runtime beside the CUDA 12 TensorRT.

pip evaluates environment markers for the interpreter that runs it, whatever --python-version and --platform say
(pypa/pip#11664): it runs here with its marker environment set to the target's (checked before it resolves).
It reads the index through tests/package_index.py (one fetch of each page and metadata file per run, shared by the
parallel pips; NVIDIA's source stubs offered with their own metadata), isolated from this machine's pip
configuration. Skipped, with the reason, when the index cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import tritonize
from tests.package_index import INDEX, PackageIndex, platforms
from tests.pyproject import pyproject
from tritonize.releases import CHECKED_MACHINES, CHECKED_PYTHONS, install_pins, load_releases, pins_line

ROOT = Path(tritonize.__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "gpu-box.md"
WITH_PINS = [r for r in load_releases() if r.tensorrt_pip]
TARGETS = [(python, machine) for machine in CHECKED_MACHINES for python in CHECKED_PYTHONS]
TABLE_START = "<!-- the resolution table: tests/test_gpu_install.py writes it (test_the_docs_table_is_pips) -->"
TABLE_END = "<!-- end of the resolution table -->"
PARALLEL = 4  # pips at once: each mostly waits on the index (the first ones) or parses pages
# The first test that asks for the resolutions waits for all 32 (about 6 minutes on the shared 2-core machine).
pytestmark = pytest.mark.timeout(1800)

# pip, with the marker environment of the target: it fails loudly when its packaging stops reading the one patched.
_PIP = """import json, sys
import pip._vendor.packaging.markers as markers
target = {**markers.default_environment(), **json.loads(sys.argv[1])}
markers.default_environment = lambda: dict(target)
assert markers.Marker(f'platform_machine == "{target["platform_machine"]}" and python_version == '
                      f'"{target["python_version"]}"').evaluate(), "pip no longer reads the patched marker environment"
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def marker_environment(python: str, machine: str) -> dict:
    return {"implementation_name": "cpython", "implementation_version": f"{python}.0", "os_name": "posix",
            "platform_machine": machine, "platform_python_implementation": "CPython", "platform_system": "Linux",
            "python_full_version": f"{python}.0", "python_version": python, "sys_platform": "linux"}


def printed_command(line: str) -> list[str]:
    """The arguments of the pip command in a line of `convert releases`."""
    return shlex.split(line.split("): ", 1)[1], comments=True)


def resolve(index: PackageIndex, release, python: str, machine: str, workdir: Path) -> dict:
    """pip's resolution of `release`'s printed line for CPython `python` on Linux `machine`: {"install": {name:
    version}} or {"error": pip's last error line}."""
    args = printed_command(pins_line(release))
    assert args[:2] == ["pip", "install"], args
    report = workdir / f"{release.release}-{python}-{machine}.json"
    isolation = ["--no-build-isolation"] if _setuptools_here() else []  # the editable install's metadata, built here
    command = [sys.executable, "-c", _PIP, json.dumps(marker_environment(python, machine)), "install", "--isolated",
               "--disable-pip-version-check", "--no-cache-dir", "--index-url", index.url(python, machine), "--dry-run",
               "--ignore-installed", "--quiet", "--report", str(report), "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", *[a for p in platforms(machine) for a in ("--platform", p)], *isolation,
               *args[2:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"error": "pip did not finish within 900 s (is the index slow?)"}
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
        assert "pip no longer reads" not in done.stderr, done.stderr
        return {"error": (errors or ["pip failed"])[-1]}
    installed = json.loads(report.read_text())["install"]
    return {"install": {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installed}}


@cache
def _setuptools_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("setuptools") is not None


@pytest.fixture(scope="module")
def index():
    try:
        import urllib.request

        urllib.request.urlopen(f"{INDEX}/pip/", timeout=15).close()
    except OSError as e:
        pytest.skip(f"the package index {INDEX} cannot be reached ({e}): the GPU install is not checked")
    with PackageIndex() as view:
        yield view


@pytest.fixture(scope="module")
def resolutions(index, tmp_path_factory) -> dict:
    """(release, python, machine) -> resolve()'s answer, for every line and target, resolved in parallel."""
    workdir = tmp_path_factory.mktemp("pip-reports")
    jobs = [(r, python, machine) for r in WITH_PINS for python, machine in TARGETS]
    with ThreadPoolExecutor(PARALLEL) as pool:
        answers = pool.map(lambda job: resolve(index, *job, workdir), jobs)
        return {(r.release, python, machine): answer for (r, python, machine), answer in zip(jobs, answers)}


def cell(index: PackageIndex, release, python: str, machine: str, answer: dict) -> str:
    """A cell of the resolution table: "resolves", or why not (the pins with no wheel there, else pip's error)."""
    if "install" in answer:
        return "resolves"
    missing = [p for p in install_pins(release) if not index.has_wheel(python, machine, *p.split("=="))
               and canonicalize_name(p.split("==")[0]) not in ("tensorrt-cu12", "tensorrt-cu12-libs")]
    return f"no wheel of {', '.join(missing)}" if missing else f"pip: {answer['error']}"


def resolution_table(index: PackageIndex, resolutions: dict) -> str:
    lines = ["| Triton release | machine | " + " | ".join(f"CPython {p}" for p in CHECKED_PYTHONS) + " |",
             "|---|---|" + "---|" * len(CHECKED_PYTHONS)]
    for release in WITH_PINS:
        for machine in CHECKED_MACHINES:
            cells = [cell(index, release, p, machine, resolutions[release.release, p, machine]) for p in CHECKED_PYTHONS]
            lines.append(f"| {release.release} | {machine} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_n34_every_printed_line_names_where_it_resolves():
    """N34: the lines said nothing of where they install, and pip refuses every one of them on CPython 3.13 and all
    but two on aarch64 (torch-tensorrt's first cp313 wheel is 2.7.0, its first aarch64 one 2.8.0; the first cp313
    tensorrt-cu12-bindings is 10.9.0.34)."""
    for release in WITH_PINS:
        head = pins_line(release).split("): ", 1)[0]
        pythons = {p: m for m, ps in release.pip_platforms for p in ps}
        assert "CPython 3." in head and "Linux x86_64" in head and set(pythons) <= set(CHECKED_PYTHONS), head
        assert set(dict(release.pip_platforms)) <= set(CHECKED_MACHINES)


@pytest.mark.parametrize("python, machine, refused", [("CPython 3.13", "Linux x86_64", True),
                                                      ("CPython 3.11", "Linux aarch64", True),
                                                      ("CPython 3.11", "Windows AMD64", True),
                                                      ("CPython 3.11", "Linux x86_64", False)])
def test_n34_a_python_or_machine_outside_the_line_is_refused_up_front(monkeypatch, python, machine, refused):
    """`convert releases --triton-release YY.MM` (gpu_acceptance.sh's first step) prints the release's line, or
    refuses in one line on a Python or machine it does not resolve on, before anything is installed or built."""
    from tests.conftest import error_line, run_cli

    monkeypatch.setattr("tritonize.releases.this_platform", lambda: (python, machine))
    result = run_cli("convert", "releases", "--triton-release", "24.08")
    if not refused:
        assert result.exit_code == 0 and result.output.strip() == pins_line(load_releases_by_name()["24.08"])
        return
    assert error_line(result) == (
        f"error: the GPU install of Triton 24.08 resolves on CPython 3.10-3.12, Linux x86_64 only, and this is {python} "
        f"on {machine}: install that Python there, or build with --builder container")


def load_releases_by_name() -> dict:
    return {r.release: r for r in load_releases()}


@pytest.mark.parametrize("release", WITH_PINS, ids=lambda r: r.release)
@pytest.mark.parametrize("python, machine", TARGETS, ids=[f"cp{p.replace('.', '')}-{m}" for p, m in TARGETS])
def test_n34_each_line_resolves_exactly_where_it_says(resolutions, release, python, machine):
    answer = resolutions[release.release, python, machine]
    said = python in dict(release.pip_platforms).get(machine, ())
    assert ("install" in answer) == said, (
        f"Triton {release.release}'s line says it {'resolves' if said else 'does not resolve'} on CPython {python}, "
        f"Linux {machine}; pip: {answer.get('error', 'resolved')}")


@pytest.mark.parametrize("release", WITH_PINS, ids=lambda r: r.release)
def test_n38_the_line_pins_tensorrts_bindings_and_libs(resolutions, release):
    """N38: lines without torch-tensorrt pinned only `tensorrt-cu12==X`, a stub that installs its bindings and
    libraries by a nested `pip install` (NVIDIA/TensorRT v10.7.0 python/packaging/frontend_sdist/setup.py); once pip
    has cached the wheel it built from the stub, a fresh venv gets a `tensorrt` without them (`No module named
    'tensorrt_bindings'`, NVIDIA/TensorRT#3936). Every line pins both, at the stub's version, and pip installs them."""
    pins = {canonicalize_name(Requirement(p).name): Requirement(p) for p in printed_command(pins_line(release))[4:]}
    name, version = release.tensorrt_pip.split("==")
    for part in (f"{name}-bindings", f"{name}-libs"):
        assert str(pins[part].specifier) == f"=={version}", f"Triton {release.release}: {part} is not pinned to {version}"
    for (line, _, _), answer in resolutions.items():
        if line == release.release and "install" in answer:
            assert {p: answer["install"].get(p) for p in (name, f"{name}-bindings", f"{name}-libs")} == dict.fromkeys(
                (name, f"{name}-bindings", f"{name}-libs"), version)


@pytest.mark.parametrize("release", WITH_PINS, ids=lambda r: r.release)
def test_n24_the_resolved_install_is_consistent(resolutions, release):
    """N24's rule, on pip's own resolution of the whole line: each pin as printed (pip replaced the torch of a first
    install with torch-tensorrt's and left its torchvision, which then failed at import), tritonize's own
    requirements met, and no CUDA 13 runtime beside the CUDA 12 TensorRT (a driver older than R580 refuses it)."""
    pins = {canonicalize_name(Requirement(p).name): Requirement(p) for p in printed_command(pins_line(release))[4:]}
    project = [Requirement(r) for r in pyproject()["project"]["dependencies"]]
    resolved = [(t, a["install"]) for t, a in resolutions.items() if t[0] == release.release and "install" in a]
    assert resolved, f"Triton {release.release}'s line resolves nowhere"
    for target, installed in resolved:
        for name, pin in pins.items():
            assert installed.get(name) in pin.specifier, (target, name, installed.get(name))
        for requirement in project:
            assert installed.get(canonicalize_name(requirement.name)) in requirement.specifier, (target, requirement)
        cuda13 = [n for n, v in installed.items() if re.search(r"-cu13$", n)
                  or (n.startswith("nvidia-cuda-runtime") and not n.endswith("-cu12") and v.startswith("13."))]
        assert not cuda13, f"{target}: a CUDA 13 runtime beside the CUDA 12 TensorRT: {cuda13}"


def test_the_docs_table_is_pips(index, resolutions):
    """docs/gpu-box.md's table of where each line resolves is the one pip's resolutions give now."""
    text = DOCS.read_text()
    assert TABLE_START in text and TABLE_END in text, f"docs/gpu-box.md has no {TABLE_START}"
    written = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert written == resolution_table(index, resolutions), (
        "docs/gpu-box.md's resolution table differs from pip's; regenerate it:\n" + resolution_table(index, resolutions))


def test_n24_the_docs_give_the_printed_install():
    """docs/gpu-box.md gives the install as the one command `convert releases` prints, not two steps."""
    commands = {shlex.join(printed_command(pins_line(r))) for r in WITH_PINS}
    given = [shlex.join(shlex.split(line.strip().strip("`"), comments=True)) for line in DOCS.read_text().splitlines()
             if line.strip().strip("`").startswith("pip install")]
    assert given and set(given) <= commands, f"docs/gpu-box.md gives {given}; `convert releases` prints {sorted(commands)}"
