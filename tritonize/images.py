"""Image files in, model inputs out: decoding with Pillow, then the model's preprocessing contract.

Used by the client (the contract comes from the served model's config), by the convert stage's
INT8 calibration and held-out checks (the contract comes from the manifest) and, as a copy that
`repo build` places beside it, by the repository's `preprocess` model (request bytes, the contract
from its config). Decoding applies the EXIF orientation and turns every Pillow mode into RGB; an
image that cannot be used is a `BadImage` with the one line shown for it.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing

# Pillow's own default limit (about 89.5 Mpx, a 0.25 GB RGB buffer): above it a file is treated as a
# possible decompression bomb unless the user raises the limit. It also bounds the image once resized (a thin
# image grows when its shorter side is resized up).
DEFAULT_MAX_PIXELS = 89_478_485
# The longest side at most 50 times the shorter: beyond, no classifier needs the image, and resizing its shorter
# side up multiplies its pixels (1x12000 -> 256x3072000).
MAX_ASPECT = 50
# What the server decodes is bounded by the request too: beyond FREE_PIXELS (a 48 MB RGB buffer), at most this
# many pixels per byte received. Photos carry 2-10 pixels per byte; a flat 9000x9000 PNG, about 1000.
SERVER_PIXELS_PER_BYTE = 16
FREE_PIXELS = 4096 * 4096

_SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")


class BadImage(Exception):
    """One input file that cannot be used; the message is the one line shown for it."""


@contextlib.contextmanager
def _pillow_pixel_limit(max_pixels: int) -> Iterator[None]:
    """Let Pillow open up to our limit (we check it ourselves, with our own message)."""
    from PIL import Image

    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max(max_pixels, saved or 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            warnings.simplefilter("ignore", UserWarning)  # palette transparency notes on convert
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = saved


def load_rgb(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS, preprocess: Preprocessing | None = None):
    """Decode the file at `path` into an RGB PIL image, EXIF orientation applied; BadImage says why not."""
    return decode_rgb(read_image_file(path), str(path), max_pixels, preprocess=preprocess)


def read_image_file(path: Path) -> bytes:
    """The encoded bytes of an image file, as a `--preprocess server` client sends them."""
    path = Path(path)
    if path.is_dir():
        raise BadImage(f"{path}: is a directory, not an image file")
    if not path.exists():
        raise BadImage(f"{path}: no such file")
    return path.read_bytes()


BOMB_HINT = "raise --max-pixels if you trust the file"


def decode_rgb(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS, bomb_hint: str = BOMB_HINT,
               preprocess: Preprocessing | None = None, pixels_per_byte: int | None = None):
    """Decode an encoded image (JPEG, PNG, ... any format Pillow reads) into an RGB PIL image, EXIF
    orientation applied. `name` (a path, or the server's `IMAGE[i]`) starts each BadImage line;
    `bomb_hint` says how to get past the pixel limit where this runs. What the image will cost is
    judged from its header, before it is decoded (`check_size`): with `preprocess`, also once resized;
    with `pixels_per_byte` (the server), also against the bytes received.

    The client decodes files with it and the repository's `preprocess` model decodes request
    bytes with it, so both give the same pixels and the same reasons."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(data) == 0:
        raise BadImage(f"{name}: empty file (0 bytes)")
    with _pillow_pixel_limit(max_pixels):
        try:
            with Image.open(io.BytesIO(data)) as image:
                check_size(image.width, image.height, name, max_pixels, bomb_hint, preprocess,
                           len(data) if pixels_per_byte else None, pixels_per_byte or 0)
                image.load()
                image = ImageOps.exif_transpose(image)
                return _to_rgb(image)
        except BadImage:
            raise
        except Image.DecompressionBombError as e:
            raise BadImage(f"{name}: {e} (possible decompression bomb); {bomb_hint}") from None
        except UnidentifiedImageError:
            raise BadImage(f"{name}: not an image Pillow can read") from None
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise BadImage(f"{name}: cannot decode ({e}); the file is truncated or corrupt") from None


def check_size(width: int, height: int, name: str, max_pixels: int = DEFAULT_MAX_PIXELS, bomb_hint: str = BOMB_HINT,
               preprocess: Preprocessing | None = None, received: int | None = None, pixels_per_byte: int = 0) -> None:
    """BadImage when an image of this size would cost more than it may: above `max_pixels` as decoded or as
    resized by `preprocess`, longer than MAX_ASPECT times its width, or (`received` bytes) more pixels than
    `pixels_per_byte` per byte beyond FREE_PIXELS."""
    pixels = width * height
    size = f"{width}x{height}"
    if pixels > max_pixels:
        raise BadImage(f"{name}: {size} = {pixels:,} pixels is above the limit of {max_pixels:,} (possible "
                       f"decompression bomb); {bomb_hint}")
    short, long = sorted((width, height))
    if long > MAX_ASPECT * short:
        raise BadImage(f"{name}: {size} has an aspect ratio of 1:{long / short:.0f}; no classifier needs more than "
                       f"1:{MAX_ASPECT} (crop it to what should be classified)")
    if preprocess is not None:
        resized_width, resized_height = preprocess.resized_size(width, height)
        if resized_width * resized_height > max_pixels:
            raise BadImage(f"{name}: {size} becomes {resized_width}x{resized_height} = {resized_width * resized_height:,} "
                           f"pixels when resized to {preprocess.resize} on its shorter side, above the limit of "
                           f"{max_pixels:,}; {bomb_hint}")
    if received is not None and pixels > max(FREE_PIXELS, pixels_per_byte * received):
        raise BadImage(f"{name}: {size} = {pixels:,} pixels from {received:,} bytes: more than {pixels_per_byte} pixels "
                       f"per byte sent (beyond {math.isqrt(FREE_PIXELS)}x{math.isqrt(FREE_PIXELS)}); {bomb_hint}")


def _to_rgb(image):
    from PIL import Image

    if image.mode in _SIXTEEN_BIT_MODES:
        # Pillow's convert() clips 16-bit values at 255; scale the full range down instead.
        image = Image.fromarray(np.clip(np.rint(np.asarray(image) / 257.0), 0, 255).astype(np.uint8))
    elif image.mode == "F":  # convert() would truncate: round to nearest as for 16 bits
        image = Image.fromarray(np.clip(np.rint(np.asarray(image)), 0, 255).astype(np.uint8))
    # Alpha is dropped, not composited: the same as torchvision's ImageFolder loader (convert("RGB")).
    return image if image.mode == "RGB" else image.convert("RGB")


@dataclass
class LoadedImages:
    names: list[str]  # the paths as given, for the good files
    arrays: list[np.ndarray]
    failures: list[str]  # one line per bad file


def load_images(paths: Sequence[Path], preprocess: Preprocessing, max_pixels: int = DEFAULT_MAX_PIXELS,
                form: str = "tensor") -> LoadedImages:
    """Read every path into the `form` a model takes per image; bad files are collected as one line each,
    not raised. Forms: "tensor" the contract's float32 input (the client preprocesses), "uint8" resized and
    cropped RGB pixels (the server normalizes), "bytes" the file as read (the server decodes, so only what
    shows without decoding is checked here)."""
    loaded = LoadedImages([], [], [])
    for path in paths:
        try:
            if form == "bytes":
                array = np.array([read_image_file(Path(path))], dtype=np.object_)
            else:
                image = load_rgb(Path(path), max_pixels, preprocess)
                array = preprocess(image) if form == "tensor" else preprocess.crop_pixels(image)
        except BadImage as e:
            loaded.failures.append(str(e))
            continue
        loaded.names.append(str(path))
        loaded.arrays.append(array)
    return loaded


def image_files(directory: Path) -> list[Path]:
    """Image files in `directory` (and its subfolders), in a stable order."""
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise TritonizeError(
            f"no images in {directory} (looked for {', '.join(IMAGE_SUFFIXES)}); point --calib-images at real photos"
        )
    return files


def load_batch(files: Sequence[Path], preprocess: Preprocessing) -> np.ndarray:
    """A (N, C, H, W) float32 batch for calibration: a file that cannot be decoded is an error."""
    if not files:
        return np.zeros((0, *preprocess.input_shape), np.float32)
    try:
        return np.stack([preprocess(load_rgb(f, preprocess=preprocess)) for f in files])
    except BadImage as e:
        raise TritonizeError(f"cannot use calibration image {e}; remove it from the image folder") from None


def batches(count: int, max_batch: int) -> list[slice]:
    """Slices covering range(count) in chunks of at most max_batch (1 when the model does not batch)."""
    size = max(1, max_batch)
    return [slice(i, min(i + size, count)) for i in range(0, count, size)]
