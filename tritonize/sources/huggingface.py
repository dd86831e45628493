"""`--arch hf:DIR_OR_ID`: a Hugging Face transformers image classifier (AutoModelForImageClassification), from a
directory written by `save_pretrained` or a hub id where downloads work. Needs the `hf` extra.

Labels come from `config.id2label` (transformers' defaults, LABEL_0 ..., are no names: placeholders then), the
preprocessing from the image processor's config (preprocessor_config.json), mapped by `contract`. The exported
graph takes the pixel values and returns the logits tensor (`Logits`), not the output dataclass.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from tritonize.errors import TritonizeError
from tritonize.preprocessing import PIL_FILTERS, Preprocessing
from tritonize.sources import checkpoints
from tritonize.sources.labels import labels_for
from tritonize.sources.shared import DEFAULT_PREPROCESSING, DEFAULT_PREPROCESSING_SOURCE, seeded, with_given
from tritonize.spec import RANDOM_INIT_SEED, ModelSpec

INSTALL = "pip install 'tritonize[hf]'"
RESAMPLE = {number: name for name, number in reversed(PIL_FILTERS.items())}  # PIL's numbers -> the contract's names
# The image processor settings `contract` reads; others that are on and change the image are refused.
UNDERSTOOD = {"do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor",
              "do_normalize", "image_mean", "image_std", "do_convert_rgb", "crop_pct"}
CONVNEXT_WARP = 384  # ConvNextImageProcessor: from this shortest_edge on, it resizes to S x S and crops nothing
IGNORED = {"image_processor_type", "processor_class", "feature_extractor_type", "auto_map", "_processor_class",
           "input_data_format", "data_format", "default_to_square", "return_tensors", "device", "disable_grouping",
           "image_seq_length", "crop_to_patches", "do_reduce_labels", "reduce_labels"}


def _transformers():
    try:
        import transformers
    except ImportError:
        raise TritonizeError(f"--arch hf:DIR_OR_ID needs transformers, which is not installed: {INSTALL}") from None
    transformers.logging.set_verbosity_error()  # its warnings about unused weights and the like are not ours to print
    return transformers


def resolve(where: str, weights: str | None = None, labels=None, preprocessing=None) -> ModelSpec:
    transformers = _transformers()
    location = str(Path(where).expanduser().resolve()) if Path(where).expanduser().is_dir() else where
    config = _config(transformers, location)
    if weights is None:
        kind, label = "hf", location
    elif weights.lower() == "none":
        kind, label = "none", "none"
    else:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise TritonizeError(f"checkpoint {weights} does not exist; give a state_dict file, `none` (random init) "
                                 f"or nothing (the weights of {where})")
        kind, label = "checkpoint", str(path.resolve())
    classes, classes_origin = int(config.num_labels), f"{location} config.json num_labels"
    if kind == "checkpoint":
        classes, classes_origin = _checkpoint_classes(transformers, config, location, Path(label), classes, classes_origin)
    named = [config.id2label[i] for i in range(len(config.id2label))] if len(config.id2label) == classes else None
    if named and all(name == f"LABEL_{i}" for i, name in enumerate(named)):
        named = None  # transformers' defaults
    names, labels_origin = labels_for(labels, classes, named, f"{location} config.json id2label")
    processor = _processor(transformers, location)
    if processor is None:
        pre, origin = DEFAULT_PREPROCESSING, f"{location} has no image processor config: {DEFAULT_PREPROCESSING_SOURCE}"
    else:
        pre, origin = contract(processor, int(getattr(config, "num_channels", 3))), \
            f"{location} preprocessor_config.json ({processor.get('image_processor_type', 'image processor')})"
    pre, pre_origin = with_given(pre, origin, preprocessing)
    notes = []
    if kind == "none":
        notes.append(f"random-init weights (seed {RANDOM_INIT_SEED}): the labels are meaningless for predictions")
    return ModelSpec(arch=f"hf:{location}", weights=label, weights_kind=kind, preprocessing=pre, labels=names,
                     labels_source=labels_origin, preprocessing_source=pre_origin, input_shape=pre.input_shape,
                     num_classes=classes, notes=tuple(notes), source="hf",
                     model_source=f"transformers AutoModelForImageClassification ({type(config).__name__}), the "
                                  "logits of its output",
                     num_classes_source=classes_origin)


def contract(processor: dict, channels: int = 3) -> Preprocessing:
    """An image processor's settings (preprocessor_config.json) as the preprocessing contract, the way its
    resize, center crop, rescale and normalize apply them: `size` {"shortest_edge": S} resizes the shorter side,
    {"height", "width"} to exactly that; `crop_size` is the center crop (without one, the resize is the input);
    ConvNext's `crop_pct` resizes the shorter side to S / crop_pct and crops S x S (below 384; from 384, S x S
    exactly). Their center crop floors an odd margin (`crop_offset` "floor")."""
    active = {k for k, v in processor.items() if v not in (None, False) and k not in UNDERSTOOD | IGNORED}
    if active:
        raise TritonizeError(f"the image processor's {', '.join(sorted(active))} is not in tritonize's preprocessing "
                             "contract (resize, center crop, rescale, normalize): give the preprocessing")
    if not processor.get("do_resize", True):
        raise TritonizeError("the image processor does not resize (do_resize false): a served model takes one input "
                             "size, so give the preprocessing")
    resize = _hw(processor.get("size"), "size")
    if processor.get("crop_pct") is not None:  # ConvNext's own resize (ConvNextImageProcessor.resize)
        if not isinstance(resize, int):
            raise TritonizeError(f"the image processor's crop_pct goes with size {{'shortest_edge': S}}, not "
                                 f"{processor.get('size')!r}: give the preprocessing")
        shortest = resize
        if shortest < CONVNEXT_WARP:  # the shorter side to S / crop_pct, then the center S x S
            resize, crop = int(shortest / float(processor["crop_pct"])), (shortest, shortest)
        else:  # warped to S x S
            resize, crop = (shortest, shortest), (shortest, shortest)
    elif processor.get("do_center_crop"):
        crop = _hw(processor.get("crop_size"), "crop_size")
        if not isinstance(crop, tuple):
            crop = (crop, crop)
    elif isinstance(resize, tuple):
        crop = resize
    else:
        raise TritonizeError(f"the image processor resizes the shorter side to {resize} and crops nothing: the "
                             "input size would follow each image's aspect; give the preprocessing")
    mean = processor.get("image_mean") or (0.0,) * channels
    std = processor.get("image_std") or (1.0,) * channels
    if not processor.get("do_normalize", True):
        mean, std = (0.0,) * channels, (1.0,) * channels
    scale = float(processor.get("rescale_factor", 1 / 255)) if processor.get("do_rescale", True) else 1.0
    resample = processor.get("resample", 2)
    if int(resample) not in RESAMPLE:
        raise TritonizeError(f"the image processor's resample {resample!r} is not a Pillow filter tritonize knows")
    return Preprocessing(resize=resize, crop=crop, mean=tuple(mean), std=tuple(std),
                         interpolation=RESAMPLE[int(resample)], scale=scale,
                         channel_order="RGB" if channels == 3 else "L", crop_offset="floor")


def _hw(size, what: str):
    """{"shortest_edge": S} -> S; {"height": H, "width": W} -> (H, W); an int (older configs) -> S."""
    if isinstance(size, int):
        return size
    if isinstance(size, dict):
        if set(size) == {"shortest_edge"}:
            return int(size["shortest_edge"])
        if set(size) == {"height", "width"}:
            return int(size["height"]), int(size["width"])
    raise TritonizeError(f"the image processor's {what} {size!r} is not a size tritonize serves ({{'shortest_edge': "
                         "S}} or {'height': H, 'width': W}); give the preprocessing")


def _config(transformers, location: str):
    try:
        config = transformers.AutoConfig.from_pretrained(location)
    except (OSError, ValueError) as e:  # no such directory or hub id, no network, not a transformers config
        raise TritonizeError(f"hf:{location} is neither a directory written by save_pretrained nor a hub id that "
                             f"can be downloaded here ({_first_line(e)})") from None
    if type(config) not in transformers.AutoModelForImageClassification._model_mapping:
        raise TritonizeError(f"hf:{location} is a {type(config).__name__}, which AutoModelForImageClassification "
                             "does not take: not an image classifier")
    return config


def _processor(transformers, location: str) -> dict | None:
    local = Path(location) / "preprocessor_config.json"
    if Path(location).is_dir() and not local.is_file():
        return None
    try:
        return transformers.AutoImageProcessor.from_pretrained(location).to_dict()
    except (OSError, ValueError) as e:
        raise TritonizeError(f"cannot read the image processor of hf:{location} ({_first_line(e)})") from None


def _checkpoint_classes(transformers, config, location, path: Path, classes: int, origin: str) -> tuple[int, str]:
    def layout(num_classes: int | None) -> dict:
        return checkpoints.shapes(_layout(transformers, config, num_classes).state_dict())

    return checkpoints.checkpoint_classes(path, layout, classes, origin, f"hf:{location}")


def _layout(transformers, config, num_labels: int | None = None):
    if num_labels is not None:
        config = _with_classes(config, num_labels)
    with torch.device("meta"):
        return transformers.AutoModelForImageClassification.from_config(config)


def _with_classes(config, num_labels: int):
    """The config with another head size (transformers renames the labels LABEL_0 ... then)."""
    if num_labels == config.num_labels:
        return config
    config = copy.deepcopy(config)
    config.num_labels = num_labels
    return config


class Logits(torch.nn.Module):
    """Pixel values in, the logits tensor out (not transformers' output dataclass): what is exported."""

    def __init__(self, classifier):
        super().__init__()
        self.classifier = classifier

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(pixel_values=pixel_values).logits


def build(spec: ModelSpec):
    transformers = _transformers()
    location = spec.arch.removeprefix("hf:")
    if spec.weights_kind == "hf":
        try:
            model = transformers.AutoModelForImageClassification.from_pretrained(location)
        except (OSError, ValueError) as e:
            raise TritonizeError(f"cannot load the weights of hf:{location} ({_first_line(e)})") from None
    else:
        config = _config(transformers, location)
        config = _with_classes(config, spec.num_classes)
        with seeded():
            model = transformers.AutoModelForImageClassification.from_config(config)
        if spec.weights_kind == "checkpoint":
            checkpoints.load_weights(model, Path(spec.weights), spec.arch)
    return Logits(model.eval())


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
