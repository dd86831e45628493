"""The preprocessing contract: how an image becomes a model's input, as one validated type.

It comes from the model's source (torchvision weights' transforms, timm's data config, a Hugging Face image
processor) or from the user's flags, is recorded in the manifest (`ModelSpec.preprocessing`), written into every
config.pbtxt as string parameters (`to_parameters`) and read back from a served model's config by the client
(`from_parameters`). Its geometry is torchvision's `Resize` then `CenterCrop`: `resize` an int resizes the shorter
side to it (aspect kept), `resize` (H, W) resizes to exactly H x W; the crop (an int, or (H, W)) is the model's
input size. Applying it (`__call__`) does to a PIL image what those transforms, `Grayscale` for one-channel models,
`ToTensor` and `Normalize` do, with Pillow and numpy so the client needs no torch. It is two halves, `crop_pixels`
(geometry, uint8) then `normalize` (values), so a client can do the first and the server the second
(`--preprocess uint8`) with this same code: the repository's preprocessing models run this very file (`repo build`
places a copy of it beside them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

import numpy as np

from tritonize.errors import TritonizeError

PREFIX = "preprocess."
# torchvision InterpolationMode value -> Pillow resampling filter (the mapping torchvision uses for PIL).
PIL_FILTERS = {"nearest": 0, "nearest-exact": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
# The channels a model takes, in order; "L" is one channel of luma (Pillow's ITU-R 601-2 conversion, which
# torchvision's Grayscale uses on PIL images).
CHANNEL_ORDERS = {"RGB": 3, "BGR": 3, "L": 1}
LAYOUTS = ("NCHW", "NHWC")
# Where the center crop starts when the margin is odd: "round" as torchvision's CenterCrop (and timm) place it,
# int(round(margin / 2)), halves to even; "floor" as Hugging Face's image processors do, margin // 2. They differ by
# one pixel when the margin is 3 modulo 4 (a 640x427 photo resized to 256 on its shorter side, cropped to 224).
CROP_OFFSETS = ("round", "floor")
REQUIRED = ("resize", "crop", "mean", "std")


def _size(value: Any, what: str) -> int | tuple[int, int]:
    """An int, or an (H, W) pair; also read from the text forms `224`, `160,320` and `160x320`."""
    if isinstance(value, str):
        parts = value.replace("x", ",").split(",")
        try:
            value = [int(p) for p in parts] if len(parts) > 1 else int(parts[0])
        except ValueError:
            raise TritonizeError(f"preprocessing {what} {value!r} is not a size: give N, or H,W") from None
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            raise TritonizeError(f"preprocessing {what} {tuple(value)} is not a size: give N, or (H, W)")
        return int(value[0]), int(value[1])
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TritonizeError(f"preprocessing {what} {value!r} is not a size: give N, or (H, W)")
    return int(value)


def _floats(value: Any, what: str) -> tuple[float, ...]:
    """A tuple of floats, also from the text form `0.485,0.456,0.406`."""
    try:
        return tuple(float(v) for v in (value.split(",") if isinstance(value, str) else value))
    except (TypeError, ValueError):
        raise TritonizeError(f"preprocessing {what} {value!r} is not a list of numbers: give one per channel, "
                             "like 0.485,0.456,0.406") from None


def _scale(value: Any) -> float:
    """A float, also from the text forms `0.00392` and `1/255`."""
    try:
        if isinstance(value, str) and "/" in value:
            numerator, denominator = value.split("/")
            return float(numerator) / float(denominator)
        return float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise TritonizeError(f"preprocessing scale {value!r} is not a number: give one like 1/255 or 0.0039") from None


def _size_text(size: int | tuple[int, int]) -> str:
    return str(size) if isinstance(size, int) else f"{size[0]},{size[1]}"


@dataclass(frozen=True)
class Preprocessing:
    resize: int | tuple[int, int]  # an int: the shorter side becomes this, aspect kept; (H, W): exactly H x W
    crop: int | tuple[int, int]  # then the center H x W (an int: square): the model's input size
    mean: tuple[float, ...]  # one per channel
    std: tuple[float, ...]
    interpolation: str = "bilinear"  # torchvision InterpolationMode value
    antialias: bool = True  # Pillow always antialiases; torchvision does the same for PIL images
    channel_order: str = "RGB"  # RGB, BGR, or L (one grayscale channel)
    layout: str = "NCHW"
    scale: float = 1 / 255  # pixel values are scaled by this (to [0, 1]) before mean/std
    crop_offset: str = "round"  # CROP_OFFSETS: how an odd crop margin is split

    def __post_init__(self):
        resize, crop = _size(self.resize, "resize"), _size(self.crop, "crop")
        if isinstance(crop, tuple) and crop[0] == crop[1]:
            crop = crop[0]  # CenterCrop(N) and CenterCrop((N, N)) are one contract
        object.__setattr__(self, "resize", resize)
        object.__setattr__(self, "crop", crop)
        object.__setattr__(self, "mean", _floats(self.mean, "mean"))
        object.__setattr__(self, "std", _floats(self.std, "std"))
        object.__setattr__(self, "scale", _scale(self.scale))
        object.__setattr__(self, "channel_order", str(self.channel_order).upper())
        object.__setattr__(self, "layout", str(self.layout).upper())
        if self.interpolation not in PIL_FILTERS:
            raise TritonizeError(f"unknown interpolation {self.interpolation!r} in the preprocessing contract; expected one of {', '.join(PIL_FILTERS)}")
        if self.channel_order not in CHANNEL_ORDERS or self.layout not in LAYOUTS:
            raise TritonizeError(f"unsupported channel order/layout {self.channel_order}/{self.layout} in the preprocessing contract "
                                 f"({'|'.join(CHANNEL_ORDERS)}, {'|'.join(LAYOUTS)})")
        height, width = self.crop_size
        if min(height, width) <= 0 or min(self._resize_pair) <= 0 or height > self._resize_pair[0] or width > self._resize_pair[1]:
            raise TritonizeError(f"preprocessing contract has crop {_size_text(self.crop)} and resize {_size_text(self.resize)}; "
                                 "the crop must be positive and not larger than the resize")
        channels = self.channels
        if len(self.mean) != channels or len(self.std) != channels or min(self.std) <= 0:
            what = "1 mean and 1 positive std (L: one channel)" if channels == 1 else f"{channels} means and {channels} positive stds"
            raise TritonizeError(f"preprocessing contract needs {what}, got mean={self.mean} std={self.std}")
        if self.crop_offset not in CROP_OFFSETS:
            raise TritonizeError(f"unknown crop offset {self.crop_offset!r} in the preprocessing contract; expected "
                                 f"{' or '.join(CROP_OFFSETS)}")
        if not self.scale > 0:
            raise TritonizeError(f"preprocessing contract has scale {self.scale}; it must be positive (1/255 for [0, 1])")

    # -- the contract as data -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("resize", "crop", "mean", "std"):
            if isinstance(data[key], tuple):
                data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Preprocessing":
        return cls(**data)

    def replace(self, **changes) -> "Preprocessing":
        """This contract with some fields changed (the user's flags over what the model's source said), checked.
        A change of None is no change; values may be given in their text forms (`160,320`, `0.5,0.5,0.5`, `1/255`)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TritonizeError(f"unknown preprocessing field(s) {', '.join(sorted(unknown))}; the contract has "
                                 f"{', '.join(f.name for f in fields(self))}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_parameters(self) -> dict[str, str]:
        """`{"preprocess.resize": "256", ...}`: string values, as config.pbtxt parameters carry them."""
        values = {
            "resize": _size_text(self.resize),
            "crop": _size_text(self.crop),
            "mean": ",".join(repr(v) for v in self.mean),
            "std": ",".join(repr(v) for v in self.std),
            "interpolation": self.interpolation,
            "antialias": str(self.antialias).lower(),
            "channel_order": self.channel_order,
            "layout": self.layout,
            "scale": repr(self.scale),
            "crop_offset": self.crop_offset,
        }
        return {PREFIX + k: v for k, v in values.items()}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str], model: str = "model") -> "Preprocessing":
        """The inverse of `to_parameters`; a missing or unreadable contract says how to get one."""
        missing = [PREFIX + k for k in REQUIRED if PREFIX + k not in parameters]
        if missing:
            raise TritonizeError(
                f"{model} carries no preprocessing contract (missing parameters: {', '.join(missing)}); "
                "rebuild the repository with `tritonize repo build`"
            )
        raw = {k.removeprefix(PREFIX): v.strip() for k, v in parameters.items() if k.startswith(PREFIX)}
        try:
            values: dict[str, Any] = {
                "resize": _size(raw["resize"], "resize"),
                "crop": _size(raw["crop"], "crop"),
                "mean": tuple(float(v) for v in raw["mean"].split(",")),
                "std": tuple(float(v) for v in raw["std"].split(",")),
            }
            if "scale" in raw:
                values["scale"] = float(raw["scale"])
        except (ValueError, TritonizeError) as e:
            raise TritonizeError(f"{model} has an unreadable preprocessing contract ({e}); rebuild the repository with `tritonize repo build`") from None
        if "antialias" in raw:
            values["antialias"] = raw["antialias"].lower() in ("1", "true", "yes")
        for key in ("interpolation", "crop_offset"):
            if key in raw:
                values[key] = raw[key]
        for key in ("channel_order", "layout"):
            if key in raw:
                values[key] = raw[key].upper()
        return cls(**values)

    @classmethod
    def parameter_keys(cls) -> tuple[str, ...]:
        return tuple(PREFIX + f for f in cls.__dataclass_fields__)

    # -- the contract's shapes ------------------------------------------------------------------
    @property
    def channels(self) -> int:
        return CHANNEL_ORDERS[self.channel_order]

    @property
    def crop_size(self) -> tuple[int, int]:
        """(H, W) of the model's input."""
        return (self.crop, self.crop) if isinstance(self.crop, int) else self.crop

    @property
    def _resize_pair(self) -> tuple[int, int]:
        """The smallest (H, W) the resize can give (an int resize: its shorter side on both)."""
        return (self.resize, self.resize) if isinstance(self.resize, int) else self.resize

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """The model input's shape without the batch axis."""
        height, width = self.crop_size
        return (self.channels, height, width) if self.layout == "NCHW" else (height, width, self.channels)

    @property
    def pixels_shape(self) -> tuple[int, int, int]:
        """The shape of one image's uint8 pixels after `crop_pixels`, (H, W, C): what a `--preprocess uint8` client
        sends."""
        return (*self.crop_size, self.channels)

    def describe(self) -> str:
        """One line a person reads: `resize 256 (shorter side), center crop 224x224, RGB, bilinear`."""
        resize = (f"resize {self.resize} (shorter side)" if isinstance(self.resize, int)
                  else f"resize to {self.resize[0]}x{self.resize[1]} (HxW)")
        height, width = self.crop_size
        return f"{resize}, center crop {height}x{width}, {self.channel_order}, {self.interpolation}"

    # -- the contract applied -----------------------------------------------------------------
    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after the resize: the shorter side to `resize` rounding as torchvision does, or exactly
        `resize`'s (H, W)."""
        if not isinstance(self.resize, int):
            return self.resize[1], self.resize[0]
        short, long = min(width, height), max(width, height)
        new_long = int(self.resize * long / short)
        return (self.resize, new_long) if width <= height else (new_long, self.resize)

    def crop_pixels(self, image) -> np.ndarray:
        """An RGB PIL image -> uint8 array (H, W, C) in the contract's channels (RGB, or L for one channel; BGR is
        the normalization's reordering): resized and center-cropped, not yet scaled (what a `--preprocess uint8`
        client sends)."""
        if self.channel_order == "L":
            image = image.convert("L")  # before resizing: torchvision pipelines put Grayscale first
        image = image.resize(self.resized_size(*image.size), resample=PIL_FILTERS[self.interpolation])
        width, height = image.size
        crop_height, crop_width = self.crop_size
        if self.crop_offset == "floor":
            top, left = (height - crop_height) // 2, (width - crop_width) // 2
        else:
            top, left = int(round((height - crop_height) / 2.0)), int(round((width - crop_width) / 2.0))
        pixels = np.asarray(image.crop((left, top, left + crop_width, top + crop_height)))  # uint8
        return pixels[..., None] if pixels.ndim == 2 else pixels

    def normalize(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 pixels (..., H, W, C), RGB or L -> float32 model input: scale, mean, std, channel order, layout.
        Leading axes (a batch) are kept; each image's values do not depend on them."""
        x = np.asarray(pixels, dtype=np.float32) / np.float32(1.0 / self.scale)
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        x = (x - mean) / std  # (..., H, W, C), RGB or L
        if self.channel_order == "BGR":
            x = x[..., ::-1]
        if self.layout == "NCHW":
            x = np.moveaxis(x, -1, -3)
        return np.ascontiguousarray(x, dtype=np.float32)

    def __call__(self, image) -> np.ndarray:
        """An RGB PIL image -> float32 array (C, H, W) or (H, W, C) per the layout."""
        return self.normalize(self.crop_pixels(image))
