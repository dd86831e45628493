"""Shared fixtures. Markers are declared in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

SMALL_ARCH = "resnet18"


def run_cli(*args: str):
    """Drive the real `tritonize` app; returns click's Result (exit_code, output, stderr)."""
    from tritonize.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="session")
def small_artifacts(tmp_path_factory) -> Path:
    """resnet18 (random init) exported to TorchScript and ONNX, verified, with its manifest.

    Shared by the whole session: tests that change files must work on a copy (`artifacts_copy`).
    """
    out = tmp_path_factory.mktemp("small_artifacts")
    result = run_cli("export", "--arch", SMALL_ARCH, "--weights", "none", "--out", out)
    assert result.exit_code == 0, result.output
    return out


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

    return build_repository(small_artifacts, tmp_path_factory.mktemp("small_repo") / "models", RepoOptions(kind="cpu"))


@pytest.fixture(scope="session")
def small_server(small_repo):
    """The real embedded Triton server (bundled tritonserver + Python-based backends) on `small_repo`,
    on free ports; yields tritonize.serve.ServerInfo. Stopped (stubs included) at session end."""
    from tritonize.serve import embedded_server

    with embedded_server(small_repo) as info:
        yield info
