"""The preprocessing contract: how an image becomes a model's input, as one validated type.

It is taken from the torchvision weights' own transforms (`spec.resolve_spec`), recorded in the
manifest (`ModelSpec.preprocessing`), written into every config.pbtxt as string parameters
(`to_parameters`) and read back from a served model's config by the client (`from_parameters`).
Applying it (`__call__`) does what torchvision's `ImageClassification` does to a PIL image (resize
the shorter side, center crop, scale to [0, 1], normalize), with Pillow and numpy so the client
needs no torch. It is two halves, `crop_pixels` (geometry, uint8) then `normalize` (values), so a
client can do the first and the server the second (`--preprocess uint8`) with this same code: the
repository's preprocessing models run this very file (`repo build` places a copy of it beside them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from tritonize.errors import TritonizeError

PREFIX = "preprocess."
# torchvision InterpolationMode value -> Pillow resampling filter (the mapping torchvision uses for PIL).
PIL_FILTERS = {"nearest": 0, "nearest-exact": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
REQUIRED = ("resize", "crop", "mean", "std")


@dataclass(frozen=True)
class Preprocessing:
    resize: int  # the shorter side is resized to this
    crop: int  # then center-cropped to crop x crop
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"  # torchvision InterpolationMode value
    antialias: bool = True  # Pillow always antialiases; torchvision does the same for PIL images
    channel_order: str = "RGB"
    layout: str = "NCHW"
    scale: float = 1 / 255  # pixel values are scaled to [0, 1] before mean/std

    def __post_init__(self):
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if self.interpolation not in PIL_FILTERS:
            raise TritonizeError(f"unknown interpolation {self.interpolation!r} in the preprocessing contract; expected one of {', '.join(PIL_FILTERS)}")
        if self.channel_order not in ("RGB", "BGR") or self.layout not in ("NCHW", "NHWC"):
            raise TritonizeError(f"unsupported channel order/layout {self.channel_order}/{self.layout} in the preprocessing contract (RGB|BGR, NCHW|NHWC)")
        if not 0 < self.crop <= self.resize:
            raise TritonizeError(f"preprocessing contract has crop {self.crop} and resize {self.resize}; the crop must be positive and not larger than the resize")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise TritonizeError(f"preprocessing contract needs 3 means and 3 positive stds, got mean={self.mean} std={self.std}")

    # -- the contract as data -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Preprocessing":
        return cls(**data)

    def to_parameters(self) -> dict[str, str]:
        """`{"preprocess.resize": "256", ...}`: string values, as config.pbtxt parameters carry them."""
        values = {
            "resize": str(self.resize),
            "crop": str(self.crop),
            "mean": ",".join(repr(v) for v in self.mean),
            "std": ",".join(repr(v) for v in self.std),
            "interpolation": self.interpolation,
            "antialias": str(self.antialias).lower(),
            "channel_order": self.channel_order,
            "layout": self.layout,
            "scale": repr(self.scale),
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
            values["antialias"] = raw["antialias"].lower() in ("1", "true", "yes")
        if "interpolation" in raw:
            values["interpolation"] = raw["interpolation"]
        for key in ("channel_order", "layout"):
            if key in raw:
                values[key] = raw[key].upper()
        return cls(**values)

    @classmethod
    def parameter_keys(cls) -> tuple[str, ...]:
        return tuple(PREFIX + f for f in cls.__dataclass_fields__)

    # -- the contract applied -----------------------------------------------------------------
    @property
    def input_shape(self) -> tuple[int, int, int]:
        """The model input's shape without the batch axis."""
        return (3, self.crop, self.crop) if self.layout == "NCHW" else (self.crop, self.crop, 3)

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after resizing the shorter side to `resize`, rounding as torchvision does."""
        short, long = min(width, height), max(width, height)
        new_long = int(self.resize * long / short)
        return (self.resize, new_long) if width <= height else (new_long, self.resize)

    def crop_pixels(self, image) -> np.ndarray:
        """An RGB PIL image -> uint8 array (crop, crop, 3), RGB: resized and center-cropped, not yet scaled
        (what a `--preprocess uint8` client sends)."""
        image = image.resize(self.resized_size(*image.size), resample=PIL_FILTERS[self.interpolation])
        width, height = image.size
        top = int(round((height - self.crop) / 2.0))
        left = int(round((width - self.crop) / 2.0))
        return np.asarray(image.crop((left, top, left + self.crop, top + self.crop)))  # RGB: uint8

    def normalize(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 RGB pixels (..., H, W, 3) -> float32 model input: scale, mean, std, channel order, layout.
        Leading axes (a batch) are kept; each image's values do not depend on them."""
        x = np.asarray(pixels, dtype=np.float32) / np.float32(1.0 / self.scale)
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        x = (x - mean) / std  # (..., H, W, 3), RGB
        if self.channel_order == "BGR":
            x = x[..., ::-1]
        if self.layout == "NCHW":
            x = np.moveaxis(x, -1, -3)
        return np.ascontiguousarray(x, dtype=np.float32)

    def __call__(self, image) -> np.ndarray:
        """An RGB PIL image -> float32 array (C, H, W) or (H, W, C) per the layout."""
        return self.normalize(self.crop_pixels(image))
