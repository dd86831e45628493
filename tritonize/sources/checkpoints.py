"""Checkpoints (`--weights PATH`): weights only, in the forms people save them.

- a plain state_dict (`torch.save(model.state_dict(), PATH)`);
- a dict that holds one (`{"state_dict": ...}` as Lightning writes it, `{"model": ...}`, `{"model_state_dict": ...}`);
- keys behind a prefix: DDP's `module.`, Lightning's attribute name (`model.`), or both;
- `.safetensors`.

Nothing is unpickled: torch.load runs with weights_only, so a whole pickled model (`torch.save(model)`) is refused,
saying how to save its state_dict instead. The classifier head's shape in the checkpoint sets the number of classes
(`head_classes`); any other difference is one line naming the first keys that differ (`mismatch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from tritonize.errors import TritonizeError

# Where a state_dict sits inside a training checkpoint, in the order they are tried.
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "state_dict_ema")
SHOWN = 3  # keys named per kind of difference


def read_state_dict(path: Path) -> dict:
    """The tensors of a checkpoint file, keyed as saved (prefixes are matched to a model by `fit_keys`)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise TritonizeError(f"checkpoint {path} does not exist; give a state_dict file, a weights name or `none`")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise TritonizeError("reading a .safetensors checkpoint needs the safetensors package: "
                                 "pip install safetensors") from None
        try:
            return dict(load_file(str(path), device="cpu"))
        except Exception as e:  # noqa: BLE001 - safetensors' own errors (a header it cannot parse, a truncated file)
            raise TritonizeError(f"cannot read checkpoint {path}: {_first_line(e)}; it must be a safetensors file "
                                 "of tensors") from None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle errors, truncated zip, objects weights_only refuses
        objects = _pickled_objects(path)
        if objects:
            raise TritonizeError(
                f"checkpoint {path} holds pickled Python objects ({', '.join(objects[:2])}): a whole model saved with "
                "torch.save(model)? tritonize reads weights only, since unpickling runs code; save the weights "
                f"instead: torch.save(model.state_dict(), {str(path)!r})") from None
        raise TritonizeError(f"cannot read checkpoint {path}: {_first_line(e)}; it must be a state_dict saved with "
                             "torch.save(model.state_dict(), PATH), or a .safetensors file") from None
    return _unwrap(data, path)


def _pickled_objects(path: Path) -> list[str]:
    """The classes a pickle would have to import (torch reads them without running anything)."""
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # noqa: BLE001 - not a zip checkpoint at all
        return []


def _unwrap(data, path: Path) -> dict:
    import torch

    def tensors_only(value) -> bool:
        return isinstance(value, Mapping) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())

    if tensors_only(data):
        return dict(data)
    if isinstance(data, Mapping):
        for key in CONTAINER_KEYS:
            if tensors_only(data.get(key)):
                return dict(data[key])
        keys = ", ".join(map(str, list(data)[:6]))
        raise TritonizeError(f"checkpoint {path} holds a dict with keys {keys}, none of them a state_dict (parameter "
                             "names to tensors); save one with torch.save(model.state_dict(), PATH)")
    raise TritonizeError(f"checkpoint {path} holds a {type(data).__name__}, not a state_dict; save one with "
                         "torch.save(model.state_dict(), PATH)")


def fit_keys(state: Mapping, model_keys) -> dict:
    """The checkpoint's keys with the prefix taken off that makes most of them the model's: DDP's `module.`,
    Lightning's attribute (`model.`), both. Keys outside that prefix (a Lightning loss's weights) are left out."""
    model_keys = set(model_keys)
    best, hits = dict(state), len(set(state) & model_keys)
    prefixes = {".".join(k.split(".")[:depth]) + "." for k in state for depth in (1, 2, 3) if k.count(".") >= depth}
    for prefix in sorted(prefixes, key=len):
        stripped = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        found = len(set(stripped) & model_keys)
        if found > hits:
            best, hits = stripped, found
    return best


def shapes(state: Mapping) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items()}


def head_classes(state: Mapping, model: Mapping[str, tuple], classes: int) -> tuple[int, str] | None:
    """(the checkpoint's number of classes, its head's first key) when it differs from the model only in the head:
    every key whose shape differs has the model's `classes` as its first dimension, the checkpoint one other number
    there, and the rest of the shape alike."""
    differ = [k for k, shape in model.items() if k in state and tuple(state[k].shape) != shape]
    found = set()
    for key in differ:
        ours, theirs = model[key], tuple(state[key].shape)
        if ours[:1] != (classes,) or not theirs or theirs[1:] != ours[1:]:
            return None
        found.add(theirs[0])
    return (found.pop(), differ[0]) if len(found) == 1 else None


def mismatch(state: Mapping, model: Mapping[str, tuple]) -> str | None:
    """One line naming the first keys that differ (shape, missing, unexpected), or None when the checkpoint fits."""
    differ = [f"{k} (checkpoint {list(state[k].shape)}, model {list(s)})" for k, s in model.items()
              if k in state and tuple(state[k].shape) != s]
    missing = [k for k in model if k not in state]
    unexpected = [k for k in state if k not in model]
    parts = []
    for words, keys in (("shapes differ for", differ), ("missing from the checkpoint:", missing),
                        ("not in the model:", unexpected)):
        if keys:
            more = f" (and {len(keys) - SHOWN} more)" if len(keys) > SHOWN else ""
            parts.append(f"{words} {', '.join(keys[:SHOWN])}{more}")
    return "; ".join(parts) or None


def checkpoint_classes(path: Path, layout, classes: int, origin: str, what: str) -> tuple[int, str]:
    """(the number of classes, where it came from) for a checkpoint of the model `what` names. `layout(n)` gives the
    model's parameter shapes with an n-class head (n None: its own), or None where the source cannot make one. A
    checkpoint whose head alone differs sets the classes; any other difference is one line naming the keys."""
    model = layout(None)
    state = fit_keys(read_state_dict(path), model)
    head = head_classes(state, model, classes)
    hint = ""
    if head:
        other = layout(head[0])
        if other is None:
            hint = f" (FUNC could make its {head[0]}-class head if it took num_classes=N)"
        else:
            classes, key = head
            origin, model = f"checkpoint {path}: {key} {list(state[key].shape)}", other
    problem = mismatch(state, model)
    if problem:
        raise TritonizeError(f"checkpoint {path} does not match {what}{hint}: {problem}")
    return classes, origin


def load_weights(model, path: Path, what: str) -> None:
    """Load the checkpoint into `model` (strict: every key, every shape), or one line naming what differs."""
    state = fit_keys(read_state_dict(path), model.state_dict().keys())
    problem = mismatch(state, shapes(model.state_dict()))
    if problem:
        raise TritonizeError(f"checkpoint {path} does not match {what}: {problem}")
    model.load_state_dict(state, strict=True)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
