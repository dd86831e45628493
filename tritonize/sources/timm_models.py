"""`--arch timm:NAME`: a timm model, with the preprocessing of its pretrained config and, where its classes are
ImageNet's, ImageNet's labels. Needs the `timm` extra.

Weights: None -> timm's pretrained weights (downloaded when built); `none` -> random init; a file -> a
checkpoint, whose head sets the number of classes. `contract` maps timm's data config
(`timm.data.resolve_data_config({}, model=m)`) into the preprocessing contract as timm's own eval transform
(`timm.data.create_transform`) applies it.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.sources import checkpoints
from tritonize.sources.labels import labels_for
from tritonize.sources.shared import seeded, with_given
from tritonize.spec import RANDOM_INIT_SEED, ModelSpec

INSTALL = "pip install 'tritonize[timm]'"
DEFAULT_CROP_PCT = 0.875  # timm's, where a config gives none


def _timm():
    try:
        import timm
        import timm.data
    except ImportError:
        raise TritonizeError(f"--arch timm:NAME needs timm, which is not installed: {INSTALL}") from None
    return timm


def resolve(name: str, weights: str | None = None, labels=None, preprocessing=None) -> ModelSpec:
    timm = _timm()
    if not name or not timm.is_model(name):
        close = difflib.get_close_matches(name.split(".")[0], timm.list_models(), n=5) if name else []
        hint = f" (close: {', '.join(close)})" if close else ""
        raise TritonizeError(f"unknown timm model {name!r}{hint}; see timm.list_models()")
    if weights is None or weights.lower() == "pretrained":
        kind, label = "timm", "pretrained"
    elif weights.lower() == "none":
        kind, label = "none", "none"
    else:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise TritonizeError(f"checkpoint {weights} does not exist; give a state_dict file, `none` (random init) "
                                 "or nothing (timm's pretrained weights)")
        kind, label = "checkpoint", str(path.resolve())

    model = _layout(name)
    config = timm.data.resolve_data_config({}, model=model)
    classes = int(model.num_classes)
    classes_origin = f"timm {name} pretrained_cfg num_classes"
    if kind == "checkpoint":
        classes, classes_origin = _checkpoint_classes(name, Path(label), model, classes, classes_origin)
    subset = timm.data.infer_imagenet_subset(model)
    imagenet = tuple(timm.data.ImageNetInfo(subset).label_descriptions()) if subset else None
    names, labels_origin = labels_for(labels, classes, imagenet, f"timm ImageNetInfo({subset!r}).label_descriptions()")
    pre, pre_origin = with_given(contract(config), f"timm resolve_data_config(model={name}): {_shown(config)}",
                                 preprocessing)
    notes = []
    if kind == "none":
        notes.append(f"random-init weights (seed {RANDOM_INIT_SEED}): the labels are meaningless for predictions")
    return ModelSpec(arch=f"timm:{name}", weights=label, weights_kind=kind, preprocessing=pre, labels=names,
                     labels_source=labels_origin, preprocessing_source=pre_origin, input_shape=pre.input_shape,
                     num_classes=classes, notes=tuple(notes), source="timm",
                     model_source=f"timm.create_model({name!r}, num_classes={classes})",
                     num_classes_source=classes_origin)


def contract(config: dict) -> Preprocessing:
    """timm's data config as the preprocessing contract, the way timm's eval transform applies it: the input
    size divided by crop_pct (floored) is the resize, the shorter side for crop_mode `center` (a square input),
    exactly H x W for `squash`; then the center crop to the input size."""
    channels, height, width = config["input_size"]
    crop_pct = config.get("crop_pct") or DEFAULT_CROP_PCT
    mode = config.get("crop_mode") or "center"
    scaled = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    if mode == "squash":
        resize = scaled
    elif mode == "center" and height == width:
        resize = scaled[0]
    else:
        raise TritonizeError(f"timm's crop_mode {mode!r} on a {height}x{width} input (timm's ResizeKeepRatio"
                             f"{' and padding' if mode == 'border' else ''}) is not a geometry tritonize serves: give "
                             "the preprocessing (resize the shorter side or to exactly HxW, then center crop)")
    if channels not in (1, 3):
        raise TritonizeError(f"the timm model takes {channels} channels; tritonize serves RGB (3) or grayscale (1)")
    return Preprocessing(resize=resize, crop=(height, width), mean=tuple(config["mean"])[:channels],
                         std=tuple(config["std"])[:channels], interpolation=config.get("interpolation") or "bilinear",
                         channel_order="RGB" if channels == 3 else "L")


def _shown(config: dict) -> str:
    keys = ("input_size", "crop_pct", "crop_mode", "interpolation", "mean", "std")
    return ", ".join(f"{k}={config[k]}" for k in keys if k in config)


def _layout(name: str, num_classes: int | None = None):
    """The model laid out on the meta device: its config and parameter shapes, no memory, no initialization."""
    import torch

    timm = _timm()
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, **kwargs)


def _checkpoint_classes(name: str, path: Path, model, classes: int, origin: str) -> tuple[int, str]:
    def layout(num_classes: int | None) -> dict:
        return checkpoints.shapes((model if num_classes is None else _layout(name, num_classes)).state_dict())

    return checkpoints.checkpoint_classes(path, layout, classes, origin, f"timm:{name}")


def build(spec: ModelSpec):
    timm = _timm()
    name = spec.arch.removeprefix("timm:")
    if spec.weights_kind == "timm":
        try:
            return timm.create_model(name, pretrained=True)
        except Exception as e:  # noqa: BLE001 - huggingface_hub's and urllib's errors when offline, a missing file in the cache
            raise TritonizeError(f"cannot download timm's pretrained weights for {name} ({type(e).__name__}: "
                                 f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); when offline use "
                                 "`--weights none` (random init) or `--weights PATH` (a local checkpoint)") from None
    with seeded():
        model = timm.create_model(name, pretrained=False, num_classes=spec.num_classes)
    if spec.weights_kind == "checkpoint":
        checkpoints.load_weights(model, Path(spec.weights), spec.arch)
    return model
