"""The suite's /tmp check (tests/conftest.py) counts only the folders its own servers leave: a developer's `tritonize
serve` in another terminal, or another session's tests, leave theirs beside it, and a session's run must not fail
for them, nor pass when it leaves one of its own.

Each test runs a session of its own (a pytest in a process group of its own, as another terminal's would be) on one
test, while this process runs a foreign server beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TMP_CHECKED
from tritonize.serve.leftovers import MARK, TMP, group_of, python_envs

CHECKOUT = Path(__file__).resolve().parent.parent

INNER = '''
import os
import signal
import time
from pathlib import Path


def test_waits_while_a_foreign_server_leaves_its_folder():
    Path(os.environ["INNER_STARTED"]).touch()
    go, deadline = Path(os.environ["INNER_GO"]), time.monotonic() + 600
    while not go.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_leaves_a_folder_of_its_own_server():
    """A server killed whose stop never runs, as a test that forgets to stop one leaves it (a start whose folder was
    left unmarked, beside another server's made at the same moment, is stopped and started again)."""
    from tritonize.serve.embedded import EmbeddedServer
    from tritonize.serve.leftovers import MARK, python_envs

    for _ in range(3):
        before = python_envs()
        server = EmbeddedServer(Path(os.environ["INNER_REPO"]), supervise=False)
        info = server.start()
        os.kill(info.pid, signal.SIGKILL)
        server.server.process.wait()
        if any((f / MARK).is_file() for f in python_envs() - before):
            server.server = None
            server.stop()
            return
        server.stop()
    raise AssertionError("no start marked its folder")
'''


@pytest.fixture(scope="module")
def onnx_repo(small_artifacts, tmp_path_factory) -> Path:
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("tmp_check") / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model",), warmup=False, ensembles=False))
    return repo


def _session(tmp_path: Path, test: str, repo: Path) -> subprocess.Popen:
    """A pytest session of its own (its own process group, the check not left to this one) running `test` of INNER."""
    inner = tmp_path / "inner"
    inner.mkdir(exist_ok=True)
    (inner / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != TMP_CHECKED}
    env.update(INNER_STARTED=str(tmp_path / "started"), INNER_GO=str(tmp_path / "go"), INNER_REPO=str(repo),
               PYTHONPATH=os.pathsep.join(filter(None, [str(CHECKOUT), env.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                             "-n", "0", "-c", str(CHECKOUT / "pyproject.toml"), "--rootdir", str(CHECKOUT),
                             f"{inner / 'test_inner.py'}::{test}"],
                            cwd=inner, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _killed_server(repo: Path):
    """A server killed with its /tmp folder marked as its own, not yet stopped. On a shared machine a start may leave
    its folder unmarked (one made beside it at the same moment, by another server: serve/leftovers.py), or an older
    tritonize's stop take it before the mark: then another start."""
    from tritonize.serve.embedded import EmbeddedServer

    for _ in range(3):
        before = python_envs()
        server = EmbeddedServer(repo, supervise=False)
        info = server.start()
        os.kill(info.pid, signal.SIGKILL)
        server.server.process.wait()
        left = {f for f in python_envs() - before if (f / MARK).is_file()}
        if left:
            return server, left
        server.stop()
    raise AssertionError("no start of the foreign server marked its folder")


def test_a_foreign_servers_folder_does_not_fail_the_session(onnx_repo, tmp_path):
    session = _session(tmp_path, "test_waits_while_a_foreign_server_leaves_its_folder", onnx_repo)
    foreign = None
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "started").exists():
            assert session.poll() is None and time.monotonic() < deadline, session.communicate()[0]
            time.sleep(0.05)
        foreign, left = _killed_server(onnx_repo)  # its folder stays till its stop, after the session's end
        (tmp_path / "go").touch()
        out = session.communicate(timeout=300)[0]
    finally:
        (tmp_path / "go").touch()
        if foreign is not None:
            foreign.stop()
        if session.poll() is None:
            session.kill()
    assert session.returncode == 0 and "1 passed" in out and "error:" not in out, out
    assert not left & python_envs()  # the foreign server's own stop removed it


def test_a_folder_the_sessions_own_server_leaves_fails_it(onnx_repo, tmp_path):
    before = python_envs()
    session = _session(tmp_path, "test_leaves_a_folder_of_its_own_server", onnx_repo)
    out = session.communicate(timeout=600)[0]
    left = {f for f in python_envs() - before if group_of(_read(f / MARK)) == session.pid}  # its group: its pid
    try:
        assert session.returncode == 1 and "1 passed" in out, out
        assert len(left) == 1 and f"error: the tests left 1 folder(s) of Triton's in {TMP}: ['{min(left).name}']" in out, out
    finally:
        for folder in left:
            (folder / MARK).unlink()
            folder.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
