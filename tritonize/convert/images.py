"""Real images -> model inputs, with the preprocessing the manifest records (for calibration and checks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.errors import TritonizeError
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


def preprocess(path: Path, pre: Preprocessing) -> np.ndarray:
    """Decode one image and apply resize (shorter side), center crop, scale and mean/std: a CHW float32 array."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img = img.convert(pre.channel_order)
            w, h = img.size
            ratio = pre.resize / min(w, h)
            size = (max(1, round(w * ratio)), max(1, round(h * ratio)))
            # PIL filters downscaling with the full kernel, which is what torchvision's antialias=True does.
            img = img.resize(size, _resample(pre.interpolation))
            left, top = int(round((size[0] - pre.crop) / 2.0)), int(round((size[1] - pre.crop) / 2.0))
            img = img.crop((left, top, left + pre.crop, top + pre.crop))
            pixels = np.asarray(img, dtype=np.float32) * np.float32(pre.scale)
    except (OSError, UnidentifiedImageError) as e:
        raise TritonizeError(f"cannot decode image {path}: {e}; remove it from the image folder") from None
    mean = np.asarray(pre.mean, dtype=np.float32)
    std = np.asarray(pre.std, dtype=np.float32)
    return ((pixels - mean) / std).transpose(2, 0, 1).copy()


def load_images(files: list[Path], pre: Preprocessing) -> np.ndarray:
    return np.stack([preprocess(f, pre) for f in files]) if files else np.zeros((0, 3, pre.crop, pre.crop), np.float32)


def _resample(name: str):
    from PIL import Image

    methods = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
    try:
        return methods[name]
    except KeyError:
        raise TritonizeError(f"unsupported interpolation {name!r} in the manifest's preprocessing") from None
