"""ModelSpec: the one place that knows the model being deployed.

It resolves the user's `--arch` / `--weights` against torchvision, builds the torch module, and
carries what every later stage needs (tensor names, input shape, preprocessing, labels) into the
manifest. Later stages read it back from the manifest (`Manifest.load(dir).spec`); they never re-derive it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing

DEFAULT_ARCH = "wide_resnet101_2"
# Names the artifacts use. TorchScript gets Triton's libtorch `<name>__<index>` convention.
INPUT_NAME = "input"
OUTPUT_NAME = "output"
TORCHSCRIPT_INPUT_NAME = "input__0"
TORCHSCRIPT_OUTPUT_NAME = "output__0"
RANDOM_INIT_SEED = 0


@dataclass(frozen=True)
class ModelSpec:
    arch: str
    weights: str  # torchvision weights name ("IMAGENET1K_V2"), "none", or a checkpoint path
    weights_kind: str  # "torchvision" | "none" | "checkpoint"
    preprocessing: Preprocessing
    labels: tuple[str, ...]
    labels_source: str
    input_name: str = INPUT_NAME
    output_name: str = OUTPUT_NAME
    input_shape: tuple[int, ...] = (3, 224, 224)  # without the batch axis
    dtype: str = "float32"
    num_classes: int = 1000
    preprocessing_source: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def pretrained(self) -> bool:
        return self.weights_kind != "none"

    def with_preprocessing(self, **changes) -> "ModelSpec":
        """This model with fields of its preprocessing contract set by the user (`export --crop ...`, the Python
        API), over what its source said: the input shape and the record of where the contract came from follow.
        A change of None is no change."""
        given = {k: v for k, v in changes.items() if v is not None}
        if not given:
            return self
        pre = self.preprocessing.replace(**given)
        source = f"{self.preprocessing_source}; set by the user: {', '.join(sorted(given))}"
        return replace(self, preprocessing=pre, input_shape=pre.input_shape, preprocessing_source=source)

    def to_dict(self) -> dict[str, Any]:
        """JSON-shaped (lists, not tuples), so it compares equal to what the manifest holds."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelSpec":
        data = dict(data)
        pre = Preprocessing.from_dict(data.pop("preprocessing"))
        for key in ("labels", "input_shape", "notes"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(preprocessing=pre, **data)


def classification_archs() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def resolve_spec(arch: str = DEFAULT_ARCH, weights: str | None = None) -> ModelSpec:
    """Check `arch` and `weights` against torchvision and describe the model, without building it.

    weights: None -> the arch's DEFAULT pretrained weights; "none" -> random init; an existing
    file path -> a local state_dict checkpoint; anything else -> a torchvision weights name.
    """
    import torchvision

    archs = classification_archs()
    if arch not in archs:
        close = [a for a in archs if arch.lower().split("_")[0] in a][:5]
        hint = f" (close: {', '.join(close)})" if close else ""
        raise TritonizeError(
            f"unknown arch {arch!r}: not a torchvision classification model{hint}; "
            "see torchvision.models.list_models(module=torchvision.models)"
        )
    enum = torchvision.models.get_model_weights(arch)
    default = enum.DEFAULT
    if weights is None or weights.upper() == "DEFAULT":
        chosen, kind, label = default, "torchvision", default.name
    elif weights.lower() == "none":
        chosen, kind, label = None, "none", "none"
    elif Path(weights).expanduser().exists() or "/" in weights or weights.endswith((".pt", ".pth")):
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

    # Random-init and checkpoint models keep the DEFAULT weights' preprocessing and categories:
    # it is the contract the arch was designed for, and the manifest says where it came from.
    source = chosen or default
    transforms = source.transforms()
    notes = []
    if kind == "none":
        notes.append(f"random-init weights (seed {RANDOM_INIT_SEED}): the labels are meaningless for predictions")
    if kind == "checkpoint":
        notes.append(f"checkpoint weights: preprocessing and labels assumed from {type(default).__name__}.{default.name}")
    preprocessing = Preprocessing(
        resize=int(transforms.resize_size[0]),
        crop=int(transforms.crop_size[0]),
        mean=tuple(float(v) for v in transforms.mean),
        std=tuple(float(v) for v in transforms.std),
        interpolation=transforms.interpolation.value,
        antialias=bool(transforms.antialias),
    )
    return ModelSpec(
        arch=arch,
        weights=label,
        weights_kind=kind,
        preprocessing=preprocessing,
        labels=tuple(source.meta["categories"]),
        labels_source=f"torchvision {type(source).__name__}.{source.name} meta['categories']",
        preprocessing_source=f"torchvision {type(source).__name__}.{source.name}.transforms()",
        input_shape=preprocessing.input_shape,
        num_classes=len(source.meta["categories"]),
        notes=tuple(notes),
    )


def build_model(spec: ModelSpec):
    """The torch module in eval mode, with the weights the spec names."""
    import torch
    import torchvision

    if spec.weights_kind == "torchvision":
        try:
            model = torchvision.models.get_model(spec.arch, weights=spec.weights)
        except OSError as e:  # URLError, socket errors, a read-only cache dir
            raise TritonizeError(
                f"cannot download pretrained weights {spec.arch}/{spec.weights} ({e}); when offline use "
                "`--weights none` (random init) or `--weights PATH` (a local state_dict checkpoint)"
            ) from None
    else:
        # Random init is seeded: every export of an arch gets the same weights, so artifacts
        # exported in separate runs (model.pt now, model.onnx later) still agree.
        with torch.random.fork_rng():
            torch.manual_seed(RANDOM_INIT_SEED)
            model = torchvision.models.get_model(spec.arch, weights=None, num_classes=spec.num_classes)
        if spec.weights_kind == "checkpoint":
            _load_checkpoint(model, Path(spec.weights), spec.arch)
    return model.eval()


def _load_checkpoint(model, path: Path, arch: str) -> None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle errors, truncated zip, non-tensor objects refused by weights_only
        raise TritonizeError(f"cannot read checkpoint {path}: {str(e).splitlines()[0]}; it must be a state_dict saved with torch.save") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise TritonizeError(f"checkpoint {path} holds a {type(state).__name__}, not a state_dict")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise TritonizeError(f"checkpoint {path} does not match {arch}: {first}") from None
