"""What every source does alike: seeded construction, the preprocessing the user gives over the source's, and the
check that a model's output is a batch of logits."""

from __future__ import annotations

import contextlib
from typing import Mapping

from tritonize.errors import TritonizeError
from tritonize.preprocessing import Preprocessing
from tritonize.spec import RANDOM_INIT_SEED

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# What a model whose source knows no preprocessing gets unless the user gives one: torchvision's ImageNet eval.
DEFAULT_PREPROCESSING = Preprocessing(resize=256, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD)
DEFAULT_PREPROCESSING_SOURCE = ("assumed: ImageNet's (resize 256, center crop 224, ImageNet mean/std, bilinear); "
                                "give the model's own")


@contextlib.contextmanager
def seeded():
    """Random init under a fixed seed, without touching the caller's generator: every export of a model gets the
    same weights, so artifacts exported in separate runs (model.pt now, model.onnx later) still agree."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(RANDOM_INIT_SEED)
        yield


@contextlib.contextmanager
def evaluating(module):
    """A module handed over, in eval mode for the block, then each submodule as it was (a notebook goes on training
    it; a frozen batch norm stays frozen). None: nothing to do."""
    if module is None:
        yield
        return
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for submodule, training in modes.items():
            submodule.training = training


def with_given(source: Preprocessing, origin: str, given) -> tuple[Preprocessing, str]:
    """(the contract, where it came from): the source's; a given Preprocessing instead; or with the fields a mapping
    sets (the command line's flags, text forms too; None is no change) over it."""
    if given is None:
        return source, origin
    if isinstance(given, Preprocessing):
        return given, "given (preprocessing=...)"
    if not isinstance(given, Mapping):
        raise TritonizeError(f"preprocessing must be a tritonize.Preprocessing or a mapping of its fields, got "
                             f"{type(given).__name__}")
    changes = {k: v for k, v in given.items() if v is not None}
    if not changes:
        return source, origin
    return source.replace(**changes), f"{origin}; set by the user: {', '.join(sorted(changes))}"


def logits_classes(output, batch: int, what: str) -> int:
    """The number of classes of a model output that is a (batch, classes) tensor; anything else is one line."""
    import torch

    if not isinstance(output, torch.Tensor):
        hint = " (its .logits is: return that)" if hasattr(output, "logits") else ""
        raise TritonizeError(f"{what} returns a {type(output).__name__}{hint}, not a tensor of logits (batch, "
                             "classes); tritonize serves classifiers: make forward() return the logits")
    if output.dim() != 2 or output.shape[0] != batch:
        raise TritonizeError(f"{what} returns shape {list(output.shape)} for a batch of {batch}, not a batch of "
                             "logits (batch, classes); tritonize serves classifiers: end the model with its head "
                             "(flatten and a linear layer, say)")
    if not output.is_floating_point():
        raise TritonizeError(f"{what} returns {output.dtype} values, not logits (floating point)")
    return int(output.shape[1])


def probe(model, input_shape: tuple[int, ...], what: str) -> int:
    """Run the model on a batch of 2 at its input shape; the number of classes, or one line saying what failed."""
    import torch

    try:
        with torch.inference_mode():
            output = model(torch.zeros((2, *input_shape)))
    except Exception as e:  # noqa: BLE001 - the user's forward(): anything can go wrong
        message = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TritonizeError(f"{what} failed on a batch of input shape {[2, *input_shape]} ({type(e).__name__}: "
                             f"{message}); is that its input? Give its preprocessing (input size, channels)") from None
    return logits_classes(output, 2, what)
