"""ModelSpec: the one place that knows the model being deployed.

It carries what every later stage needs (tensor names, input shape, preprocessing, labels) into the manifest, with
where each fact came from. The sources (tritonize.sources: torchvision, timm, Hugging Face, the user's code) resolve
`--arch` / `--weights` / `--labels` to it and build the module from it. Later stages read it back from the manifest
(`Manifest.load(dir).spec`); they never re-derive it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

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
    arch: str  # what --arch named: a torchvision name, timm:NAME, hf:DIR_OR_ID, /abs/FILE.py:FUNC, package.module:FUNC
    weights: str  # the source's weights name ("IMAGENET1K_V2"), "none", a checkpoint path, ...
    weights_kind: str  # "torchvision" | "timm" | "hf" | "code" | "module" (the Python API's) | "none" | "checkpoint"
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
    source: str = "torchvision"  # torchvision | timm | hf | code | module (tritonize.sources)
    model_source: str = ""  # how the module is made
    num_classes_source: str = ""  # where the number of classes came from (a checkpoint's head, the model's output)

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
