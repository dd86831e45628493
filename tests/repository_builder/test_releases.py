"""The Triton release table: data with its source, lookups, and the TensorRT matching rule."""

from __future__ import annotations

import pytest

from tritonize.errors import TritonizeError
from tritonize.releases import (
    DATA_FILE,
    latest_release,
    load_releases,
    release_info,
    releases_for_tensorrt,
    source,
    tensorrt_loads,
    tensorrt_matches,
)


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


def test_every_figure_acted_on_is_sourced_and_confirmed():
    """Each value tritonize reads names its source; derived, inferred and candidate values are recorded
    with their grade but stay out of the fields tritonize acts on."""
    import json
    from dataclasses import fields
    from importlib import resources

    from tritonize.releases import Release

    data = json.loads(resources.files("tritonize").joinpath("data").joinpath(DATA_FILE).read_text())
    assert set(data["source"]["grades"]) == {"V", "V*", "S", "DERIVED", "INFERRED", "CANDIDATE"}
    acted_on = [f.name for f in fields(Release) if f.name != "release"]
    for row in data["releases"]:
        for name in acted_on:
            cell = row["_sources"].get(name)
            if row.get(name) is not None:
                assert cell and cell["grade"] in ("V", "V*", "S") and len(cell["source"]) > 20, (row["release"], name)
            if cell and cell["grade"] in ("DERIVED", "INFERRED", "CANDIDATE"):
                assert row.get(name) is None and "value" in cell, (row["release"], name)
    # release-matrix.md: 25.07 is 2.59.1 ("built out of the 25.06 release"); one minor per month breaks there
    assert [release_info(r).triton for r in ("25.06", "25.07", "25.08", "26.08")] == ["2.59.0", "2.59.1", "2.60.0", "2.72.0"]
    assert [release_info(r).tensorrt for r in ("24.08", "24.10", "24.12", "25.01")] == [
        "10.3.0.26", "10.5.0.18", "10.7.0.23", "10.8.0.43"]
    assert release_info("24.05").tensorrt is None and release_info("26.06").tensorrt is None  # candidates only
    assert release_info("26.05").tensorrt_image == "nvcr.io/nvidia/tensorrt:26.04-py3"  # built on the 26.04 stack


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


@pytest.mark.parametrize("built, served, ok", [
    ("10.5.0.18", "10.8.0.43", True),
    ("8.6.3.1", "10.3.0.26", True),
    ("10.16.1.11", "11.0.0.114", True),
    ("8.6.3.1", "11.0.0.114", False),   # TensorRT 11.4 support matrix: 8 -> 11 is not supported
    ("10.8.0.43", "10.5.0.18", False),
    ("8.5.3.1", "8.6.3.1", False),
])
def test_version_compatible_rule(built, served, ok):
    assert tensorrt_loads(built, served, version_compatible=True) is ok
    assert tensorrt_loads(built, served) is tensorrt_matches(built, served)


def test_releases_for_tensorrt():
    assert [r.release for r in releases_for_tensorrt("8.6.3.1")] == ["24.02", "24.03", "24.04"]
    assert releases_for_tensorrt("8.6.1.6") == []
    assert [r.release for r in releases_for_tensorrt("10.5.0.18", version_compatible=True)] == ["24.10", "24.12", "25.01"]
    with pytest.raises(TritonizeError, match="major.minor.patch"):
        releases_for_tensorrt("10")


def test_the_gpu_extra_leaves_tensorrt_to_the_release_pins():
    """N4: the `gpu` extra's `torch-tensorrt>=2.4` resolved to 2.14, which pins TensorRT 11.1 for CUDA 13, a
    TensorRT no release in the table runs. The extra pins neither; the release data says what matches."""
    import re

    from tests.pyproject import pyproject as read_pyproject

    pyproject = read_pyproject()
    assert not any(re.match(r"(tensorrt|torch-tensorrt)\b", d) for d in pyproject["project"]["optional-dependencies"]["gpu"])
    assert (release_info("24.08").tensorrt_pip, release_info("24.08").torch_tensorrt_pip) == (
        "tensorrt-cu12==10.3.0", "torch-tensorrt==2.5.0")
    assert (release_info("24.12").tensorrt_pip, release_info("24.12").torch_tensorrt_pip) == (
        "tensorrt-cu12==10.7.0.post1", "torch-tensorrt==2.6.0")
    assert release_info("24.10").torch_tensorrt_pip is None and release_info("24.04").tensorrt_pip is None
    for release in load_releases():
        if release.tensorrt_pip:  # the wheel of exactly the release's TensorRT
            pinned = release.tensorrt_pip.split("==")[1].removesuffix(".post1")
            assert release.tensorrt.startswith(pinned), release.release
