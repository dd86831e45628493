"""Monitoring fixtures: a bundle for the session's repository, and the real Prometheus tools."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    """The real promtool; skips (saying how to get it) where it is not installed."""
    from tritonize.monitor.prometheus import INSTALL_HINT

    path = shutil.which("promtool")
    if path is None or shutil.which("prometheus") is None:
        pytest.skip(f"prometheus/promtool not installed; {INSTALL_HINT}")
    return path


@pytest.fixture(scope="session")
def bundle(small_repo, tmp_path_factory) -> Path:
    """`tritonize monitor` output for small_repo, default options."""
    from tritonize.monitor.bundle import write_bundle

    out = tmp_path_factory.mktemp("monitor") / "monitoring"
    write_bundle(small_repo, out)
    return out
