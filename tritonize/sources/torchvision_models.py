"""`--arch NAME`: a torchvision classification model, with its weights' own preprocessing and categories.

Weights: None -> the arch's DEFAULT pretrained weights (downloaded when built); `none` -> random init; an
existing file -> a checkpoint, whose head sets the number of classes; anything else -> a torchvision weights name.
"""

from __future__ import annotations

from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.sources import checkpoints
from tritonize.sources.labels import labels_for
from tritonize.sources.shared import seeded, with_given
from tritonize.spec import RANDOM_INIT_SEED, ModelSpec


def classification_archs() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def resolve(arch: str, weights: str | None = None, labels=None, preprocessing=None) -> ModelSpec:
    """Check `arch` and `weights` against torchvision and describe the model; a checkpoint is read (its shapes
    decide the head), the model is not built."""
    import torchvision

    archs = classification_archs()
    if arch not in archs:
        close = [a for a in archs if arch.lower().split("_")[0] in a][:5]
        hint = f" (close: {', '.join(close)})" if close else ""
        raise TritonizeError(
            f"unknown arch {arch!r}: not a torchvision classification model{hint}; "
            "see torchvision.models.list_models(module=torchvision.models), or name another source "
            "(timm:NAME, hf:DIR_OR_ID, FILE.py:FUNC)"
        )
    enum = torchvision.models.get_model_weights(arch)
    default = enum.DEFAULT
    if weights is None or weights.upper() == "DEFAULT":
        chosen, kind, label = default, "torchvision", default.name
    elif weights.lower() == "none":
        chosen, kind, label = None, "none", "none"
    elif Path(weights).expanduser().exists() or "/" in weights or weights.endswith((".pt", ".pth", ".safetensors", ".ckpt")):
        path = Path(weights).expanduser()
        if not path.is_file():
            raise TritonizeError(f"checkpoint {weights} does not exist; give a state_dict file, a weights name or `none`")
        chosen, kind, label = None, "checkpoint", str(path.resolve())
    else:
        name = weights.split(".")[-1]  # accept "Wide_ResNet101_2_Weights.IMAGENET1K_V2" too
        try:
            chosen = enum[name]
        except KeyError:
            names = ", ".join(w.name for w in enum)
            raise TritonizeError(
                f"unknown weights {weights!r} for {arch}: choose one of {names}, `none` or a checkpoint path"
            ) from None
        kind, label = "torchvision", chosen.name
        if not chosen.meta.get("categories"):
            classifiers = ", ".join(w.name for w in enum if w.meta.get("categories"))
            raise TritonizeError(f"weights {chosen.name} of {arch} have no categories (a feature extractor, not a "
                                 f"classifier): choose one of {classifiers}, `none` or a checkpoint path")

    # Random-init and checkpoint models keep the DEFAULT weights' preprocessing: it is the contract the arch was
    # designed for, and the manifest says where it came from.
    source = chosen or default
    categories = tuple(source.meta["categories"])
    weights_name = f"torchvision {type(source).__name__}.{source.name}"
    classes, classes_origin = len(categories), f"{weights_name} meta['categories']"
    notes = []
    if kind == "none":
        notes.append(f"random-init weights (seed {RANDOM_INIT_SEED}): the labels are meaningless for predictions")
    if kind == "checkpoint":
        classes, classes_origin = _checkpoint_classes(arch, Path(label), classes, classes_origin)
        notes.append(f"checkpoint weights: preprocessing assumed from {weights_name}")
    transforms = source.transforms()
    crop = int(transforms.crop_size[0])
    pre, pre_origin = with_given(Preprocessing(
        resize=int(transforms.resize_size[0]),
        crop=crop,
        mean=tuple(float(v) for v in transforms.mean),
        std=tuple(float(v) for v in transforms.std),
        interpolation=transforms.interpolation.value,
        antialias=bool(transforms.antialias),
    ), f"{weights_name}.transforms()", preprocessing)
    names, labels_origin = labels_for(labels, classes, categories, f"{weights_name} meta['categories']")
    return ModelSpec(
        arch=arch,
        weights=label,
        weights_kind=kind,
        preprocessing=pre,
        labels=names,
        labels_source=labels_origin,
        preprocessing_source=pre_origin,
        input_shape=pre.input_shape,
        num_classes=classes,
        notes=tuple(notes),
        source="torchvision",
        model_source=f"torchvision.models.get_model({arch!r}, num_classes={classes})",
        num_classes_source=classes_origin,
    )


def _checkpoint_classes(arch: str, path: Path, classes: int, origin: str) -> tuple[int, str]:
    """The checkpoint's head sets the classes (checkpoints.checkpoint_classes); the model is laid out on the meta
    device: no memory, no initialization."""
    import torch
    import torchvision

    def layout(num_classes: int | None) -> dict:
        with torch.device("meta"):
            model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes or classes)
        return checkpoints.shapes(model.state_dict())

    return checkpoints.checkpoint_classes(path, layout, classes, origin, arch)


def build(spec: ModelSpec):
    """The torch module with the weights the spec names."""
    import torchvision

    if spec.weights_kind == "torchvision":
        try:
            return torchvision.models.get_model(spec.arch, weights=spec.weights)
        except OSError as e:  # URLError, socket errors, a read-only cache dir
            raise TritonizeError(
                f"cannot download pretrained weights {spec.arch}/{spec.weights} ({e}); when offline use "
                "`--weights none` (random init) or `--weights PATH` (a local state_dict checkpoint)"
            ) from None
    with seeded():
        model = torchvision.models.get_model(spec.arch, weights=None, num_classes=spec.num_classes)
    if spec.weights_kind == "checkpoint":
        checkpoints.load_weights(model, Path(spec.weights), spec.arch)
    return model
