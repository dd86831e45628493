"""Where the model comes from: `--arch`, one flag with one meaning, resolved here to one ModelSpec.

    NAME                   torchvision (tritonize.sources.torchvision_models)
    timm:NAME              a timm model (timm_models; the `timm` extra)
    hf:DIR_OR_ID           a Hugging Face image classifier (huggingface; the `hf` extra)
    FILE.py:FUNC           the user's code: FUNC() returns the nn.Module (user_code)
    package.module:FUNC    the same, imported from the working directory or sys.path

`resolve_spec` describes the model without keeping it (what the manifest records, with where each fact came from);
`build_model` makes the module in eval mode from that description, the same weights every time. A module handed to the
Python API (`tritonize.export(model)`) has a spec of its own (`user_code.module_spec`) and is exported as given.
"""

from __future__ import annotations

import re

from tritonize.errors import TritonizeError
from tritonize.spec import DEFAULT_ARCH, ModelSpec

# `package.module:FUNC`: dotted identifiers, a colon, an identifier.
_MODULE_FUNC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w.]*$")
PREFIXES = ("timm:", "hf:")
USAGE = ("--arch takes NAME (torchvision), timm:NAME, hf:DIR_OR_ID, FILE.py:FUNC or package.module:FUNC "
         "(FUNC returns the nn.Module)")


def source_of(arch: str) -> str:
    """Which source an `--arch` value names: torchvision, timm, hf or code."""
    if arch.startswith("timm:"):
        return "timm"
    if arch.startswith("hf:"):
        return "hf"
    if ":" in arch:
        return "code"
    return "torchvision"


def resolve_spec(arch: str = DEFAULT_ARCH, weights: str | None = None, labels=None, preprocessing=None) -> ModelSpec:
    """The spec of `arch` with `weights` (None: the source's own; `none`: random init; a path: a checkpoint),
    `labels` (a file or a list; None: the source's, else placeholders) and `preprocessing` (a Preprocessing or a
    mapping of fields over the source's; None: the source's)."""
    arch = arch.strip()
    if not arch:
        raise TritonizeError(f"--arch is empty; {USAGE}")
    source = source_of(arch)
    if source == "timm":
        from tritonize.sources import timm_models

        return timm_models.resolve(arch.removeprefix("timm:"), weights, labels, preprocessing)
    if source == "hf":
        from tritonize.sources import huggingface

        return huggingface.resolve(arch.removeprefix("hf:"), weights, labels, preprocessing)
    if source == "code":
        from tritonize.sources import user_code

        if not (arch.partition(":")[0].endswith(".py") or _MODULE_FUNC.match(arch)):
            prefix = arch.partition(":")[0]
            raise TritonizeError(f"--arch {arch}: unknown source {prefix + ':'!r}; {USAGE}")
        return user_code.resolve(arch, weights, labels, preprocessing)
    from tritonize.sources import torchvision_models

    return torchvision_models.resolve(arch, weights, labels, preprocessing)


def build_model(spec: ModelSpec):
    """The torch module the spec describes, in eval mode, with its weights (random init is seeded)."""
    if spec.source == "timm":
        from tritonize.sources import timm_models as source
    elif spec.source == "hf":
        from tritonize.sources import huggingface as source
    elif spec.source in ("code", "module"):
        from tritonize.sources import user_code as source
    else:
        from tritonize.sources import torchvision_models as source
    return source.build(spec).eval()
