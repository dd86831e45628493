"""Shared fixtures. Markers are declared in pyproject.toml."""

from __future__ import annotations

import collections
import contextlib
import fcntl
import importlib.util
import json
import os
import shlex
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

from tests.emulation import VERSIONS as EMULATED_VERSIONS
from tests.suite_model import SMALL_ARCH, SMALL_LABELS

# SMALL_ARCH, the model of the tests that are not about a real architecture, is the suite's own small classifier,
# through the code-model path (tests/suite_model.py), named by SMALL_LABELS. resnet18 stays where the architecture is
# the point (`resnet18_artifacts`). SMALL is how the tests export it.
SMALL = ("--arch", SMALL_ARCH, "--weights", "none", "--labels", SMALL_LABELS)

# Property-based tests (hypothesis): a profile for `make test` that keeps them to seconds, a larger one for `make
# mutation` (TRITONIZE_HYPOTHESIS=mutation), where a mutant must meet the inputs that tell it apart. Both are
# derandomized (the same examples every run: a failure reproduces, mutmut's timings hold) and keep no example
# database (nothing written beside the tests).
settings.register_profile("test", max_examples=30, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("mutation", max_examples=120, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("TRITONIZE_HYPOTHESIS", "test"))
STANDINS = Path(__file__).parent / "standins"


def plan_entry(status: str = "built", *, profile=None, tensorrt_version: str | None = "8.6.3.1",
               triton_release: str = "24.04", version_compatible: bool = False, **fields):
    """A TensorRT plan entry as the convert stage records one. No plan file goes with it: none can be
    built on this machine, and a fake one must never be written."""
    from tritonize.manifest import FileRef, Plan, PlanOptions, Profile, Status, Target

    return Plan(
        status=Status(status), precision="fp16", profile=Profile(**(profile or {"min": 1, "opt": 16, "max": 32})),
        input_name="input", output_name="output", onnx=FileRef("model_fp16.onnx", "0" * 64),
        target=Target(triton_release, f"nvcr.io/nvidia/tritonserver:{triton_release}-py3", tensorrt_version),
        options=PlanOptions(workspace_mib=4096, timing_cache="timing.cache", version_compatible=version_compatible),
        reproducer="convert.sh", gpu_command="tritonize convert trt", created="2026-01-01T00:00:00+00:00",
        file="model.plan" if status == "built" else None,
        tensorrt_version=tensorrt_version if status == "built" else None, **fields,
    )


def record(artifacts, key: str, entry) -> None:
    """Record an entry in the manifest of `artifacts`, as a stage would."""
    from tritonize.manifest import Manifest

    Manifest.load(artifacts).record(key, entry)


def run_cli(*args: str):
    """Drive the real `tritonize` app; returns click's Result (exit_code, output, stderr)."""
    from tritonize.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def error_line(result, exit_code: int = 1) -> str:
    """The one `error:` line of a CLI run that failed as users should see it (exit 1, or 2 for a usage error; no
    traceback)."""
    assert result.exit_code == exit_code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A directory made by `make` once per run and shared, read-only, by every pytest-xdist worker (`make test` runs
    two): the first worker to ask makes it under the run's common temporary directory, the other waits on its lock.
    Without xdist, a directory of the session's own. The run's end removes it with the rest (pytest's retention)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        out = tmp_path_factory.mktemp(name)
        make(out)
        return out
    root = tmp_path_factory.getbasetemp().parent  # the controller's basetemp: each worker's is a folder in it
    out, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # what a worker that failed half-way left
            out.mkdir()
            make(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def small_artifacts(tmp_path_factory) -> Path:
    """The suite's classifier (SMALL_ARCH, random init) exported to TorchScript, ONNX and a
    torch.export .pt2, verified, with its manifest.

    Shared by the whole session: tests that change files must work on a copy (`artifacts_copy`).
    TRITONIZE_TEST_ARTIFACTS names a directory that already holds them, exported by this code (`make
    mutation` exports once, then the tests of every mutant use it).
    """
    if os.environ.get("TRITONIZE_TEST_ARTIFACTS"):
        return Path(os.environ["TRITONIZE_TEST_ARTIFACTS"])

    def export(out: Path) -> None:
        result = run_cli("export", *SMALL, "--artifacts", out, "--format", "all")
        assert result.exit_code == 0, result.output

    return made_once(tmp_path_factory, "small_artifacts", export)


@pytest.fixture(scope="session")
def resnet18_artifacts(tmp_path_factory) -> Path:
    """torchvision's resnet18 (random init) exported to TorchScript and ONNX: for the tests where the architecture is
    the point (NVIDIA's recorded ResNet-18 engines). Shared: copy before changing."""
    def export(out: Path) -> None:
        result = run_cli("export", "--arch", "resnet18", "--weights", "none", "--artifacts", out)
        assert result.exit_code == 0, result.output

    return made_once(tmp_path_factory, "resnet18_artifacts", export)


@pytest.fixture(scope="session")
def aoti_artifacts(small_artifacts, tmp_path_factory) -> Path:
    """`small_artifacts` with the suite's classifier compiled by `convert aoti` (minutes, whatever the model: its C++
    alone) once per run, for the CPU and the newest release, verified; the compile's output in `convert.txt`. Shared
    by the session and the xdist workers: tests that change files work on a copy (`aoti_copy`)."""

    def make(out: Path) -> None:
        shutil.copytree(small_artifacts, out, dirs_exist_ok=True)
        compiled = run_cli("convert", "aoti", "--artifacts", out)
        assert compiled.exit_code == 0, compiled.output
        (out / "convert.txt").write_text(compiled.output)

    return made_once(tmp_path_factory, "aoti_artifacts", make)


@pytest.fixture
def aoti_copy(aoti_artifacts, tmp_path) -> Path:
    """A private copy of `aoti_artifacts` that a test may modify."""
    dest = tmp_path / "aoti_artifacts"
    shutil.copytree(aoti_artifacts, dest)
    return dest


@pytest.fixture
def artifacts_copy(small_artifacts, tmp_path) -> Path:
    """A private copy of the small artifacts that a test may modify."""
    dest = tmp_path / "artifacts"
    shutil.copytree(small_artifacts, dest)
    return dest


@pytest.fixture(scope="session")
def small_repo(small_artifacts, tmp_path_factory) -> Path:
    """A model repository (onnx_model, torch_model; CPU instances) built from `small_artifacts`.

    Its model files are hard links to the artifacts: read-only by convention, copy before changing.
    """
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("small_repo") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu"))
    return repo


@pytest.fixture(scope="session")
def small_server(small_repo):
    """The real embedded Triton server (bundled tritonserver + Python-based backends) on `small_repo`,
    on free ports; yields tritonize.serve.ServerInfo. Stopped (stubs included) at session end."""
    from tritonize.serve.embedded import embedded_server

    with embedded_server(small_repo) as info:
        yield info


@pytest.fixture
def standins(tmp_path, monkeypatch) -> Path:
    """STAND-INS for `docker` and `trtexec` (tests/standins/) first on PATH, returning their directory.

    They build and serve nothing; they enforce the documented contracts of the real tools (see their
    docstrings). The docker stand-in's images have the trtexec of every release whose TensorRT the
    release table knows. Stand-in containers a failed test left running are ended at teardown.
    """
    bin_dir, state = tmp_path / "standin-bin", tmp_path / "standin-containers"
    bin_dir.mkdir()
    state.mkdir()
    for name in ("docker", "trtexec"):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(STANDINS / (name + ".py")))} "$@"\n')
        wrapper.chmod(0o755)
    from tritonize.releases import load_releases

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_DOCKER_STATE", str(state))
    monkeypatch.setenv("STANDIN_TRTEXEC", str(STANDINS / "trtexec.py"))
    monkeypatch.setenv("STANDIN_IMAGE_TRT", json.dumps({r.release: r.tensorrt for r in load_releases() if r.tensorrt}))
    yield bin_dir
    for container in state.iterdir():
        try:
            os.kill(int(container.read_text()), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


@pytest.fixture(scope="session", autouse=True)
def _session_working_directory(tmp_path_factory):
    """The session's fixtures run in an empty directory too (see `_private_working_directory`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("session-cwd"))
        yield


@pytest.fixture(autouse=True)
def _private_working_directory(tmp_path_factory, monkeypatch):
    """Each test runs in an empty directory of its own. The CLI's default directories (build/, models/) are
    relative to it, so the checkout's own build/ and models/ (what `make demo` leaves) are never read or
    written, and no test sees another's. tests/test_working_directory.py proves it."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session", autouse=True)
def _shared_memory_as_found():
    """Tests leave /dev/shm as they found it: at the end of the session (after its servers stopped), no
    shared-memory region that a server of tritonize named (serve/shm.py) is there that was not before,
    unless a live process still uses it, or the process named in it runs and is not this one (another session's
    server on a shared machine, between creating a region and mapping it, or stopping)."""
    from tritonize.serve import shm

    def named() -> set[str]:
        return {p.name for p in shm.SHM.glob(f"{shm.OWNED}*")}

    def others(name: str) -> bool:
        return shm._owner_lives(name) and not name.startswith(f"{shm.OWNED}{os.getpid()}_")

    before = named()
    yield
    used = shm.regions_in_use()
    left = sorted(name for name in named() - before if str(shm.SHM / name) not in used and not others(name))
    assert not left, f"the tests left {len(left)} shared-memory region(s) in {shm.SHM}: {left}"


# What Triton leaves in /tmp (serve/leftovers.py): a load's `file:` overrides (folderXXXXXX, never removed when the load
# fails: the supervisor's give-up is such a load), the Python backend's environment folder (python_env_XXXXXX, left by a
# server killed or crashed). Other sessions' and users' servers leave theirs there too: the check counts only those a
# server of this session marked as its own (the mark names the process group of the tritonize that ran it; every process
# of the session is in the session's group).
_TRITON_TMP = pytest.StashKey[set]()


def _triton_tmp() -> set[str]:
    from tritonize.serve.leftovers import OVERRIDE, PYTHON_ENV, TMP

    return {p.name for pattern in (OVERRIDE, PYTHON_ENV) for p in TMP.glob(pattern)}


def _ours(name: str) -> bool:
    """A folder of Triton's that a server of this session made: its mark (a python_env) or its model.py (a give-up's
    folder) names this session's process group."""
    from tritonize.serve.leftovers import MARK, TMP, group_of

    for written in (TMP / name / MARK, TMP / name / "1" / "model.py"):
        try:
            return group_of(written.read_text(errors="replace")) == os.getpgrp()
        except OSError:
            continue
    return False


TMP_CHECKED = "TRITONIZE_TESTS_TMP_CHECKED_BY"  # set for every process of a session that checks /tmp itself


def pytest_configure(config):
    """The one process, or xdist's controller (its workers share /tmp), checks /tmp; it says so to every process it
    starts (before xdist starts its workers). A session run inside another (gpu_acceptance.sh's own pytest) leaves the
    check to the outer one: the outer's other worker's servers write there meanwhile."""
    if not hasattr(config, "workerinput") and TMP_CHECKED not in os.environ:
        os.environ[TMP_CHECKED] = str(os.getpid())
        config.stash[_TRITON_TMP] = set()


def pytest_sessionstart(session):
    if _TRITON_TMP in session.config.stash:
        session.config.stash[_TRITON_TMP] = _triton_tmp()


def pytest_sessionfinish(session, exitstatus):
    """Tests leave no folder of Triton's in /tmp that a server of theirs made. Checked once every worker is done."""
    before = session.config.stash.get(_TRITON_TMP, None)
    if before is None:
        return
    from tritonize.serve import leftovers

    # The empty python_envs a killed server left unmarked (made as another server started: which one's could not be
    # told), removed once no tritonserver is left on the machine; only those made during the session.
    # Marked ones stay for the check below.
    made = {leftovers.TMP / name for name in _triton_tmp() - before}
    leftovers.remove({folder for folder in made & leftovers.orphaned() if not (folder / leftovers.MARK).exists()})
    left = sorted(name for name in _triton_tmp() - before if _ours(name))
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"\nerror: the tests left {len(left)} folder(s) of Triton's in /tmp: {left} "
                                "(a folderXXXXXX's config.pbtxt names its model)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def emulated_cudart(tmp_path_factory) -> Path:
    """The CUDA runtime STAND-IN (tests/standins/cudart.c), compiled once per session."""
    import subprocess

    from tests.emulation import build_cudart

    try:
        return build_cudart(tmp_path_factory.mktemp("cudart"))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        pytest.skip(f"the emulated TensorRT needs the CUDA runtime stand-in, which could not be built: {e}")


@dataclass(frozen=True)
class Emulation:
    version: str  # the TensorRT version emulated
    release: str | None  # the Triton release that runs it (None: no release in the table yet)
    cudart: Path


@pytest.fixture(params=EMULATED_VERSIONS, ids=lambda v: f"trt{v}")
def emulated_tensorrt(request, emulated_cudart, monkeypatch, tmp_path):
    """This process and its children on the EMULATED TensorRT of the parameter's version (tests/emulation,
    tests/standins/emulated): `import tensorrt` is the emulation, Polygraphy's CUDA wrapper loads the CUDA
    runtime stand-in. At teardown the stand-in must hold no allocation or stream the test did not start with."""
    with _emulating(request.param, emulated_cudart, monkeypatch, tmp_path) as emulation:
        yield emulation


@contextlib.contextmanager
def _emulating(version: str, cudart: Path, monkeypatch, tmp_path):
    from tests.emulation import EMULATED, RELEASES, REPORT_ENV, environment, live_cuda, purge

    for name, value in environment(version, cudart).items():
        monkeypatch.setenv(name, value)
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        # `make mutation`'s first pass records calls through mutmut's config, which the stand-ins' processes
        # (run elsewhere) cannot read: they run the original code then (this process keeps its own copy).
        monkeypatch.delenv("MUTANT_UNDER_TEST")
    monkeypatch.setenv(REPORT_ENV, str(tmp_path / "cuda-report.txt"))
    monkeypatch.syspath_prepend(str(EMULATED))
    purge()
    before = live_cuda()
    yield Emulation(version, RELEASES.get(version), cudart)
    after = live_cuda()
    purge()
    assert after[:3] == before[:3], f"the CUDA stand-in holds (allocations, bytes, streams) {after[:3]}, was {before[:3]}"


# What a test that only a GPU box can run is marked with. Such a test takes the `gpu_box` fixture, so that it runs
# here too, on the emulation (pytest_collection_modifyitems refuses one that does not).
GPU_BOX_MARKERS = ("requires_tensorrt", "requires_gpu", "requires_docker")
# The GPU box emulated where none is: Triton 24.08, whose pins (tensorrt-cu12==10.3.0, torch-tensorrt==2.5.0)
# make a consistent install; TRITONIZE_EMULATED_TENSORRT (gpu_acceptance.sh on the stand-ins) names another.
GPU_BOX_TENSORRT = "10.3.0.26"


@pytest.fixture
def gpu_box(request, monkeypatch, tmp_path):
    """What a test marked requires_tensorrt / requires_gpu / requires_docker runs on. On a machine with an NVIDIA
    GPU (a user's GPU box): the real TensorRT, GPU and Docker; one that is missing skips the test, saying which
    (benchmarks/gpu_acceptance.sh counts that as a failure). Elsewhere, or where the emulation is already on
    (gpu_acceptance.sh run on the stand-ins): the EMULATED TensorRT of TRITONIZE_EMULATED_TENSORRT (else
    GPU_BOX_TENSORRT) with the CUDA, trtexec, docker and torch-tensorrt stand-ins, so that what a GPU box runs
    has run here first. Yields the Emulation, or None on the real GPU box."""
    from tests.emulation import VERSION_ENV
    from tritonize.machine import docker_gpu_problem, gpu_visible

    emulated = os.environ.get(VERSION_ENV)
    if gpu_visible() and not emulated:
        markers = {m.name for m in request.node.iter_markers()}
        if "requires_tensorrt" in markers and importlib.util.find_spec("tensorrt") is None:
            pytest.skip("requires TensorRT on this GPU box (`tritonize convert releases` prints the pins)")
        if "requires_docker" in markers and docker_gpu_problem():
            pytest.skip(f"requires Docker with the GPU: {docker_gpu_problem()}")
        yield None
        return
    cudart = request.getfixturevalue("emulated_cudart")
    request.getfixturevalue("standins")
    version = emulated or GPU_BOX_TENSORRT
    monkeypatch.setenv("STANDIN_TRT_VERSION", version)  # the box's trtexec has its TensorRT
    with _emulating(version, cudart, monkeypatch, tmp_path) as emulation:
        yield emulation


@pytest.fixture(autouse=True)
def _golden_calls_per_test():
    from tests.golden import Golden

    Golden.new_test()


# The files that keep a worker busy longest (seconds of a worker in `make test`, benchmarks/RESULTS.md), handed out
# first: xdist hands out files in order, by default the most tests first, so these few-test files came last and ran
# alone at the end (the acceptance run's second half, minutes after the other workers had finished). The Makefile
# turns xdist's order off (--no-loadscope-reorder); the other files follow, the most tests first, as xdist would.
STARTED_FIRST = ("tests/test_gpu_acceptance.py", "tests/test_gpu_install.py", "tests/export/test_export.py",
                 "tests/client/test_client_server.py", "tests/serve/test_aoti_model.py", "tests/deploy/test_k8s.py",
                 "tests/serve/test_backend_threads.py", "tests/serve/test_supervision.py",
                 "tests/serve/test_server_healing.py", "tests/convert/test_emulated_builds.py",
                 "tests/serve/test_embedded.py", "tests/serve/test_emulated_trt_model.py", "tests/deploy/test_push.py",
                 "tests/pipeline/test_stages.py")


def started_first(items: list) -> list:
    """`items` with STARTED_FIRST's files first, in its order, then the other files by their number of tests."""
    root = Path(__file__).resolve().parent.parent
    missing = [f for f in STARTED_FIRST if not (root / f).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py STARTED_FIRST names {missing[0]}, which is gone: name its successor")
    files = [item.nodeid.split("::")[0] for item in items]
    count = collections.Counter(files)
    rank = {f: (STARTED_FIRST.index(f), 0) if f in STARTED_FIRST else (len(STARTED_FIRST), -count[f]) for f in count}
    return [item for _, item in sorted(zip(files, items), key=lambda pair: rank[pair[0]])]


def pytest_collection_modifyitems(config, items):
    """Tests on the emulated TensorRT carry the marker `emulated_tensorrt` (`pytest -m emulated_tensorrt`); a test
    marked for the GPU box takes `gpu_box`. The longest files first (STARTED_FIRST).

    Under `make mutation` (mutmut sets MUTANT_UNDER_TEST): the fastest tests first, by the durations mutmut
    recorded, so that a mutant costs only the tests up to the first that fails (mutmut runs pytest with -x)."""
    for item in items:
        if "emulated_tensorrt" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.emulated_tensorrt)
        marked = [m for m in GPU_BOX_MARKERS if item.get_closest_marker(m)]
        if marked and "gpu_box" not in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} is marked {marked[0]} but does not take the gpu_box fixture: a test "
                                    "that only a GPU box can run must also run here, on the emulation (tests/conftest.py)")
    items[:] = started_first(items)
    stats = Path("mutmut-stats.json")  # mutmut runs the tests in its mutants/ copy
    if "MUTANT_UNDER_TEST" not in os.environ or not stats.is_file():
        return
    durations = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
