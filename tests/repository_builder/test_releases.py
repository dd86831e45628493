"""The Triton release table: data with its source, lookups, and the TensorRT matching rule."""

from __future__ import annotations

import pytest

from tritonize.releases import (
    latest_release, load_releases, release_info, releases_for_tensorrt, source, tensorrt_matches,
)
from tritonize.errors import TritonizeError


def test_table_covers_two_years_and_names_its_source():
    releases = [r.release for r in load_releases()]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)
    assert {"23.10", "24.10", "25.10"} <= set(releases)
    assert "support-matrix" in source()["frameworks_support_matrix"]
    assert set(source()["fields"]) >= {"triton", "tensorrt", "onnxruntime", "pytorch", "cuda"}


def test_known_figures():
    r = release_info("24.10")
    # 2.51.0 is also what the tritonserver bundled in nvidia-pytriton 0.7.0 reports on this machine.
    assert (r.triton, r.onnxruntime, r.cuda) == ("2.51.0", "1.19.2", "12.6.2")
    assert r.image == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert release_info("24.03").tensorrt == "8.6.3.1"
    assert release_info("23.12").triton == "2.41.0" and release_info("24.12").triton == "2.53.0"
    assert latest_release() == load_releases()[-1]


def test_unknown_release_lists_known_ones():
    with pytest.raises(TritonizeError, match=r"unknown Triton release '19\.01'.*24\.10"):
        release_info("19.01")


@pytest.mark.parametrize("built, served, ok", [
    ("8.6.3", "8.6.3.1", True),        # no build number on one side: major.minor.patch decides
    ("8.6.3.1", "8.6.3.1", True),
    ("8.6.1.6", "8.6.1.2", False),     # Triton 23.05 refused this pair (server issue #5975)
    ("8.6.1.6", "8.6.3.1", False),
    ("10.5.0", "10.4.0", False),
    ("9.3.0.post12.dev1", "9.3.0", True),
])
def test_tensorrt_matching_rule(built, served, ok):
    assert tensorrt_matches(built, served) is ok


def test_releases_for_tensorrt():
    assert [r.release for r in releases_for_tensorrt("8.6.3.1")] == ["24.02", "24.03", "24.04"]
    assert releases_for_tensorrt("8.6.1.6") == []
    with pytest.raises(TritonizeError, match="major.minor.patch"):
        releases_for_tensorrt("10")
