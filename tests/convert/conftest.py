"""Fixtures for the convert stage: real photos for calibration, and the trtexec stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def photo_dir(tmp_path_factory) -> Path:
    """14 real-looking images: crops and mirror images of matplotlib's bundled Grace Hopper photo."""
    import matplotlib.cbook as cbook
    from PIL import Image, ImageOps

    out = tmp_path_factory.mktemp("photos")
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = Image.open(f).convert("RGB")
    w, h = photo.size
    boxes = [(0, 0, 1.0), (0, 0, 0.6), (0.4, 0, 0.6), (0, 0.4, 0.6), (0.4, 0.4, 0.6), (0.2, 0.2, 0.5), (0.1, 0.3, 0.7)]
    n = 0
    for left, top, size in boxes:
        crop = photo.crop((int(left * w), int(top * h), int((left + size) * w), int((top + size) * h)))
        for image in (crop, ImageOps.mirror(crop)):
            image.save(out / f"photo_{n:02d}.jpg")
            n += 1
    return out


@pytest.fixture
def standin_trtexec(standins) -> Path:
    """The trtexec STAND-IN (tests/standins/trtexec.py), first on PATH: never a real TensorRT build."""
    return standins / "trtexec"
