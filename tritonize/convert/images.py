"""Calibration and held-out images for the precision checks, preprocessed as the manifest records."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.images import BadImage, Preprocess, load_rgb
from tritonize.spec import Preprocessing

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")


def image_files(directory: Path) -> list[Path]:
    """Image files directly in `directory` (and its subfolders), in a stable order."""
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise TritonizeError(
            f"no images in {directory} (looked for {', '.join(IMAGE_SUFFIXES)}); point --calib-images at real photos"
        )
    return files


def load_images(files: list[Path], pre: Preprocessing) -> np.ndarray:
    """A (N, C, H, W) float32 batch; a file that cannot be decoded is an error (calibration must be clean)."""
    if not files:
        return np.zeros((0, 3, pre.crop, pre.crop), np.float32)
    transform = Preprocess.from_spec(pre)
    try:
        return np.stack([transform(load_rgb(f)) for f in files])
    except BadImage as e:
        raise TritonizeError(f"cannot use calibration image {e}; remove it from the image folder") from None
