"""Images in, model inputs out: decoding with Pillow and the preprocessing contract a model carries.

Used by the client (the contract comes from the served model's config parameters, which the
repository builder copied from the manifest) and by the convert stage's INT8 calibration and
held-out checks (the contract comes from the manifest: `Preprocess.from_spec`). The contract
itself is the torchvision weights' own transforms.
The steps below are the ones torchvision's `ImageClassification` applies to a PIL image (resize
the shorter side, center crop, scale to [0, 1], normalize), done with Pillow and numpy so the
client needs no torch.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from tritonize.errors import TritonizeError

# Pillow's own default limit (about 89.5 Mpx, a 0.25 GB RGB buffer): above it a file is treated as a
# possible decompression bomb unless the user raises the limit.
DEFAULT_MAX_PIXELS = 89_478_485

# torchvision InterpolationMode value -> Pillow resampling filter (the mapping torchvision uses for PIL).
_PIL_FILTERS = {"nearest": 0, "nearest-exact": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
_SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}
_CONTRACT_KEYS = ("resize", "crop", "mean", "std", "interpolation", "antialias", "channel_order", "layout", "scale")


@dataclass(frozen=True)
class Preprocess:
    """The preprocessing contract of one model, as its config.pbtxt `parameters` carry it."""

    resize: int
    crop: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    antialias: bool = True  # Pillow always antialiases; torchvision does the same for PIL images
    channel_order: str = "RGB"
    layout: str = "NCHW"
    scale: float = 1 / 255

    def __post_init__(self):
        if self.interpolation not in _PIL_FILTERS:
            raise TritonizeError(f"unknown interpolation {self.interpolation!r} in the model's preprocessing contract; expected one of {', '.join(_PIL_FILTERS)}")
        if self.channel_order not in ("RGB", "BGR") or self.layout not in ("NCHW", "NHWC"):
            raise TritonizeError(f"unsupported channel order/layout {self.channel_order}/{self.layout} in the model's preprocessing contract (RGB|BGR, NCHW|NHWC)")
        if not 0 < self.crop <= self.resize:
            raise TritonizeError(f"preprocessing contract has crop {self.crop} and resize {self.resize}; the crop must be positive and not larger than the resize")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise TritonizeError(f"preprocessing contract needs 3 means and 3 positive stds, got mean={self.mean} std={self.std}")

    @classmethod
    def from_spec(cls, preprocessing) -> "Preprocess":
        """From the manifest's record (tritonize.spec.Preprocessing): the same fields."""
        from dataclasses import asdict

        return cls(**asdict(preprocessing))

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str], model: str = "model") -> "Preprocess":
        """From `{"preprocess.resize": "256", ...}` (string values, as in config.pbtxt)."""
        missing = [k for k in ("resize", "crop", "mean", "std") if f"preprocess.{k}" not in parameters]
        if missing:
            raise TritonizeError(
                f"{model} carries no preprocessing contract (missing parameters: "
                f"{', '.join('preprocess.' + k for k in missing)}); rebuild the repository with `tritonize repo build`"
            )
        raw = {k: parameters[f"preprocess.{k}"] for k in _CONTRACT_KEYS if f"preprocess.{k}" in parameters}
        try:
            values = {
                "resize": int(raw["resize"]),
                "crop": int(raw["crop"]),
                "mean": tuple(float(v) for v in raw["mean"].split(",")),
                "std": tuple(float(v) for v in raw["std"].split(",")),
            }
            if "scale" in raw:
                values["scale"] = float(raw["scale"])
        except ValueError as e:
            raise TritonizeError(f"{model} has an unreadable preprocessing contract ({e}); rebuild the repository with `tritonize repo build`") from None
        if "antialias" in raw:
            values["antialias"] = raw["antialias"].strip().lower() in ("1", "true", "yes")
        for key in ("interpolation", "channel_order", "layout"):
            if key in raw:
                values[key] = raw[key].strip() if key == "interpolation" else raw[key].strip().upper()
        return cls(**values)

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after resizing the shorter side to `resize`, rounding as torchvision does."""
        short, long = min(width, height), max(width, height)
        new_long = int(self.resize * long / short)
        return (self.resize, new_long) if width <= height else (new_long, self.resize)

    def __call__(self, image) -> np.ndarray:
        """An RGB PIL image -> float32 array (C, H, W) or (H, W, C) per the layout."""
        image = image.resize(self.resized_size(*image.size), resample=_PIL_FILTERS[self.interpolation])
        width, height = image.size
        top = int(round((height - self.crop) / 2.0))
        left = int(round((width - self.crop) / 2.0))
        image = image.crop((left, top, left + self.crop, top + self.crop))
        pixels = np.asarray(image, dtype=np.float32) / np.float32(1.0 / self.scale)
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        x = (pixels - mean) / std  # (H, W, 3), RGB
        if self.channel_order == "BGR":
            x = x[..., ::-1]
        if self.layout == "NCHW":
            x = x.transpose(2, 0, 1)
        return np.ascontiguousarray(x, dtype=np.float32)


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


def load_rgb(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS):
    """Decode `path` into an RGB PIL image, EXIF orientation applied; BadImage says why not."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    if path.is_dir():
        raise BadImage(f"{path}: is a directory, not an image file")
    if not path.exists():
        raise BadImage(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise BadImage(f"{path}: empty file (0 bytes)")
    with _pillow_pixel_limit(max_pixels):
        try:
            with Image.open(path) as image:
                pixels = image.width * image.height
                if pixels > max_pixels:
                    raise BadImage(
                        f"{path}: {image.width}x{image.height} = {pixels:,} pixels is above the limit of "
                        f"{max_pixels:,} (possible decompression bomb); raise --max-pixels if you trust the file"
                    )
                image.load()
                image = ImageOps.exif_transpose(image)
                return _to_rgb(image)
        except BadImage:
            raise
        except Image.DecompressionBombError as e:
            raise BadImage(f"{path}: {e} (possible decompression bomb); raise --max-pixels if you trust the file") from None
        except UnidentifiedImageError:
            raise BadImage(f"{path}: not an image Pillow can read") from None
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise BadImage(f"{path}: cannot decode ({e}); the file is truncated or corrupt") from None


def _to_rgb(image):
    from PIL import Image

    if image.mode in _SIXTEEN_BIT_MODES:
        # Pillow's convert() clips 16-bit values at 255; scale the full range down instead.
        wide = np.asarray(image, dtype=np.float64)
        image = Image.fromarray(np.clip(np.rint(wide / 257.0), 0, 255).astype(np.uint8), mode="L")
    elif image.mode == "F":
        image = Image.fromarray(np.clip(np.rint(np.asarray(image)), 0, 255).astype(np.uint8), mode="L")
    # Alpha is dropped, not composited: the same as torchvision's ImageFolder loader (convert("RGB")).
    return image if image.mode == "RGB" else image.convert("RGB")


@dataclass
class LoadedImages:
    names: list[str]  # the paths as given, for the good files
    arrays: list[np.ndarray]
    failures: list[str]  # one line per bad file


def load_images(paths: Sequence[Path], preprocess: Preprocess, max_pixels: int = DEFAULT_MAX_PIXELS) -> LoadedImages:
    """Decode and preprocess every path; bad files are collected as one line each, not raised."""
    loaded = LoadedImages([], [], [])
    for path in paths:
        try:
            image = load_rgb(Path(path), max_pixels)
        except BadImage as e:
            loaded.failures.append(str(e))
            continue
        loaded.names.append(str(path))
        loaded.arrays.append(preprocess(image))
    return loaded


def batches(count: int, max_batch: int) -> list[slice]:
    """Slices covering range(count) in chunks of at most max_batch (1 when the model does not batch)."""
    size = max(1, max_batch)
    return [slice(i, min(i + size, count)) for i in range(0, count, size)]
