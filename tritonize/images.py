"""Image files in, model inputs out: decoding with Pillow, then the model's preprocessing contract.

Used by the client (the contract comes from the served model's config), by the convert stage's
INT8 calibration and held-out checks (the contract comes from the manifest) and, as a copy that
`repo build` places beside it, by the repository's `preprocess` model (request bytes, the contract
from its config). Decoding applies the EXIF orientation and turns every Pillow mode into RGB; an
image that cannot be used is a `BadImage` with the one line shown for it. On the server, an image may
take at most SERVER_MEMORY to decode (`decoding_cost`, from its header).
"""

from __future__ import annotations

import contextlib
import errno
import io
import re
import warnings
from dataclasses import dataclass, field
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
# What the server may spend on one image: the most memory its decoding, conversion to RGB and resizing hold at
# once (`decoding_cost`), judged from the header whatever the file's size (a 33 KB PNG decodes to 16.8 Mpx of 16
# bits). With what Python and the request's own bytes add, the preprocess model stays under 300 MB above its idle
# size (benchmarks/RESULTS.md).
SERVER_MEMORY = 250_000_000
# The formats the server decodes: those `decoding_cost` knows the decoders of.
SERVER_FORMATS = ("JPEG", "PNG", "WEBP", "TIFF", "BMP", "GIF", "PPM")  # JPEG includes MPO (what cameras write)

# Bytes a pixel as Pillow stores each mode (RGB takes 4, as every multi-band mode); 4 for the modes not listed.
_STORED_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
_WIDE_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I", "F"}  # brought down to 8 bits by _to_eight_bits
# Bytes a pixel a format's decoder holds beside the image (benchmarks/preprocess_memory.py measures them): libtiff
# reads a strip at a time, the whole image where it is one strip; libwebp keeps its canvas and a copy of the frame.
_DECODER_BYTES = {"TIFF": 4, "WEBP": 12}
_STRIPE_PIXELS = 1 << 20  # what _to_eight_bits converts at a time
_BUFFERS = 8 * 2**20  # the decoders' line buffers, one stripe's temporaries, memory the allocator keeps
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
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise BadImage(f"{path}: is a directory, not an image file") from None
    except FileNotFoundError:
        raise BadImage(f"{path}: no such file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadImage(f"{path}: a symlink loop (it leads back to itself); point at the image file itself") from None
        raise BadImage(f"{path}: cannot read it ({e.strerror or e})") from None


BOMB_HINT = "raise --max-pixels if you trust the file"


def decode_rgb(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS, bomb_hint: str = BOMB_HINT,
               preprocess: Preprocessing | None = None, max_memory: int | None = None):
    """Decode an encoded image (JPEG, PNG, ... any format Pillow reads) into an RGB PIL image, EXIF
    orientation applied. `name` (a path, or the server's `IMAGE[i]`) starts each BadImage line;
    `bomb_hint` says how to get past the limits where this runs. What the image will cost is judged
    from its header, before it is decoded (`check_size`): with `preprocess`, also once resized; with
    `max_memory` (the server), the memory decoding it takes (`decoding_cost`), and only SERVER_FORMATS.

    The client decodes files with it and the repository's `preprocess` model decodes request
    bytes with it, so both give the same pixels and the same reasons."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(data) == 0:
        raise BadImage(f"{name}: empty file (0 bytes)")
    with _pillow_pixel_limit(max_pixels):
        try:
            image = Image.open(io.BytesIO(data), formats=SERVER_FORMATS if max_memory is not None else None)
            check_size(image.width, image.height, name, max_pixels, bomb_hint, preprocess)
            if max_memory is not None:
                check_memory(image, name, max_memory, bomb_hint, preprocess, len(data))
            image.load()
            if max_memory is not None and _orientation(image) != 1:  # known once loaded (a PNG's eXIf may follow)
                check_memory(image, name, max_memory, bomb_hint, preprocess, len(data), transposed=True)
            ImageOps.exif_transpose(image, in_place=True)
            if image.mode in _WIDE_MODES:
                image = _to_eight_bits(image)  # (rebinding `image` lets the wide one go)
            # Alpha is dropped, not composited: the same as torchvision's ImageFolder loader (convert("RGB")).
            return image if image.mode == "RGB" else image.convert("RGB")
        except BadImage:
            raise
        except Image.DecompressionBombError as e:  # Pillow's own refusal: at twice the limit, said in its words
            found = re.search(r"\((\d+) pixels\)", str(e))
            size = f"{int(found[1]):,} pixels" if found else "the image"
            raise BadImage(f"{name}: {size} is above the limit of {max_pixels:,} (possible decompression bomb); "
                           f"{bomb_hint}") from None
        except UnidentifiedImageError:
            other = _format_of(data) if max_memory is not None else None
            if other:
                raise BadImage(f"{name}: an image in {other} format, which the server does not decode (it decodes "
                               f"{', '.join(SERVER_FORMATS)}); --preprocess client reads it") from None
            raise BadImage(f"{name}: not an image Pillow can read") from None
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise BadImage(f"{name}: cannot decode ({e}); the file is truncated or corrupt") from None


def check_size(width: int, height: int, name: str, max_pixels: int = DEFAULT_MAX_PIXELS, bomb_hint: str = BOMB_HINT,
               preprocess: Preprocessing | None = None) -> None:
    """BadImage when an image of this size would cost more than it may: above `max_pixels` as decoded or as
    resized by `preprocess`, or longer than MAX_ASPECT times its width."""
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
                           f"pixels when resized {_resized_how(preprocess)}, above the limit of "
                           f"{max_pixels:,}; {bomb_hint}")


def _resized_how(preprocess: Preprocessing) -> str:
    if isinstance(preprocess.resize, int):
        return f"to {preprocess.resize} on its shorter side"
    return f"to {preprocess.resize[0]}x{preprocess.resize[1]} (HxW)"


def check_memory(image, name: str, max_memory: int, bomb_hint: str = BOMB_HINT, preprocess: Preprocessing | None = None,
                 received: int = 0, transposed: bool = False) -> None:
    """BadImage when decoding `image` (opened, not necessarily loaded) would hold more than `max_memory` bytes."""
    cost = decoding_cost(image, preprocess, received, transposed)
    if cost > max_memory:
        raise BadImage(f"{name}: {image.width}x{image.height} {image.format} ({image.mode}) takes {cost / 1e6:,.0f} MB "
                       f"to decode{', turned as its EXIF says,' if transposed else ''} and preprocess, above the "
                       f"{max_memory / 1e6:,.0f} MB the server gives one image; {bomb_hint}")


def decoding_cost(image, preprocess: Preprocessing | None = None, received: int = 0, transposed: bool = False) -> int:
    """The most memory `decode_rgb` and `preprocess.crop_pixels` hold at once for `image` (opened, not necessarily
    loaded), in bytes, from its mode, size and format. The steps, each with the image it starts from: decoding
    (the image as Pillow stores it and the decoder's own buffers), the EXIF transposition (`transposed`), the 8 bits
    of a wide mode, the RGB copy, the resize's two images; then what does not grow with the image (_BUFFERS), and
    the `received` bytes four times over (as Triton hands them to the stub, in the request's array, the copy
    Pillow reads of a chunk it skips, base64 text's decoding). Held against real peaks in
    benchmarks/preprocess_memory.py (`--modes`, and a file padded to 60 MB on the server)."""
    pixels = image.width * image.height
    stored = _STORED_BYTES.get(image.mode, 4)
    decoder = _DECODER_BYTES.get(image.format, 0) * pixels
    if image.format in ("JPEG", "MPO") and image.info.get("progressive"):
        decoder = 2 * _jpeg_samples(image, pixels)  # libjpeg keeps every coefficient of the image, 2 bytes each
    steps = [stored * pixels + decoder]
    if transposed:
        steps.append(2 * stored * pixels)
    if image.mode in _WIDE_MODES:
        steps.append((stored + 1) * pixels)
        stored = 1
    if image.mode != "RGB":
        steps.append((stored + 4) * pixels)
    if preprocess is not None:
        width, height = (image.height, image.width) if transposed else (image.width, image.height)
        resized_width, resized_height = preprocess.resized_size(width, height)
        steps.append(4 * (pixels + resized_width * height + resized_width * resized_height))
    return max(steps) + _BUFFERS + 4 * received


def _jpeg_samples(image, pixels: int) -> int:
    """How many samples a JPEG's components hold: a component sampled at (h, v) of the largest (hmax, vmax) has
    pixels x h x v / (hmax x vmax) of them (4:2:0 colour: 1.5 a pixel)."""
    layers = getattr(image, "layer", None) or [("", 1, 1, 0)] * 4  # unknown: 4 full components, the most there are
    h_max, v_max = max(h for _, h, _, _ in layers), max(v for _, _, v, _ in layers)
    return sum(-(-pixels * h * v // (h_max * v_max)) for _, h, v, _ in layers)


def _format_of(data: bytes) -> str | None:
    """The format Pillow reads `data` as (its header only), or None."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.format
    except Exception:  # noqa: BLE001 - not an image, whatever the reason
        return None


def _orientation(image) -> int:
    from PIL import ExifTags

    return image.getexif().get(ExifTags.Base.Orientation, 1)


def _to_eight_bits(image):
    """A 16 or 32-bit integer image: value / 257 rounded, clipped (65535 is white); a float one: rounded and clipped.
    As "L", a stripe at a time: 1 byte a pixel and one stripe's temporaries, never a wide copy of the whole image."""
    from PIL import Image

    width, height = image.size
    out = np.empty((height, width), np.uint8)
    rows = max(1, _STRIPE_PIXELS // width)
    for top in range(0, height, rows):
        stripe = np.asarray(image.crop((0, top, width, min(height, top + rows))))
        if image.mode == "F":
            out[top:top + rows] = np.clip(np.rint(stripe), 0, 255)
        else:  # round(v / 257) in integers: (v + 128) // 257, exact (no ties: 257 is odd)
            wide = np.clip(stripe, 0, 65535).astype(np.uint32)
            wide += 128
            wide //= 257
            out[top:top + rows] = wide
    return Image.fromarray(out)


@dataclass
class LoadedImages:
    names: list[str]  # the paths as given, for the good files
    arrays: list[np.ndarray]
    failures: list[str]  # one line per bad file
    failed: list[str] = field(default_factory=list)  # the paths as given, for the bad files (as `failures`)


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
            loaded.failed.append(str(path))
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
