"""The user's own code: `--arch FILE.py:FUNC` or `package.module:FUNC`, and a module handed to the Python API.

FUNC() returns the nn.Module (a class works too); it is called under a fixed seed, so random init is the same in
every run, and with `num_classes=N` when it takes that argument and a checkpoint's head has N classes. The source
knows no preprocessing and no labels: the user gives them, else the defaults, which the manifest names as such.
The number of classes is the model's output size on a batch at the input shape.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import replace
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.sources import checkpoints
from tritonize.sources.labels import labels_for
from tritonize.sources.shared import (
    DEFAULT_PREPROCESSING,
    DEFAULT_PREPROCESSING_SOURCE,
    evaluating,
    probe,
    seeded,
    with_given,
)
from tritonize.spec import ModelSpec

MODULE_ARCH = "python:"  # the arch of a module handed to the Python API: `python:package.Class`


def resolve(arch: str, weights: str | None = None, labels=None, preprocessing=None) -> ModelSpec:
    target, func_name = _locate(arch)
    kind, label = _weights(weights)
    pre, pre_origin = with_given(DEFAULT_PREPROCESSING, DEFAULT_PREPROCESSING_SOURCE, preprocessing)
    spec = ModelSpec(arch=f"{target}:{func_name}", weights=label, weights_kind=kind, preprocessing=pre,
                     labels=(), labels_source="", preprocessing_source=pre_origin, input_shape=pre.input_shape,
                     num_classes=0, source="code", model_source=_describe(target, func_name))
    model = _call(spec)
    classes = probe(model.eval(), spec.input_shape, spec.arch)
    classes_origin = f"the model's output on a batch of input shape {list(spec.input_shape)}"
    if kind == "checkpoint":
        classes, classes_origin = _fit_checkpoint(spec, model, classes, classes_origin)
    names, labels_origin = labels_for(labels, classes, None, "")
    notes = ("random-init weights (FUNC's own initialization, seed 0): the labels are meaningless for predictions",) \
        if kind == "none" else ()
    return replace(spec, num_classes=classes, num_classes_source=classes_origin, labels=names,
                   labels_source=labels_origin, notes=notes)


def module_spec(model, labels=None, preprocessing=None) -> ModelSpec:
    """The spec of a module handed to the Python API: its class names it, a hash of its weights tells one training
    from another (so an export of other weights is not taken as up to date)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TritonizeError(f"tritonize.export takes a torch.nn.Module, got {type(model).__name__}")
    pre, pre_origin = with_given(DEFAULT_PREPROCESSING, DEFAULT_PREPROCESSING_SOURCE, preprocessing)
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    with evaluating(model):
        classes = probe(model, pre.input_shape, name)
    names, labels_origin = labels_for(labels, classes, None, "")
    return ModelSpec(arch=MODULE_ARCH + name, weights=f"sha256:{weights_digest(model)[:16]}", weights_kind="module",
                     preprocessing=pre, labels=names, labels_source=labels_origin, preprocessing_source=pre_origin,
                     input_shape=pre.input_shape, num_classes=classes, source="module",
                     model_source=f"a {name} handed to tritonize.export()",
                     num_classes_source=f"the model's output on a batch of input shape {list(pre.input_shape)}")


def weights_digest(model) -> str:
    import torch

    digest = hashlib.sha256()
    for key, value in model.state_dict().items():
        digest.update(key.encode())
        digest.update(value.detach().cpu().contiguous().flatten().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def build(spec: ModelSpec):
    if spec.source == "module":
        raise TritonizeError(f"{spec.arch} was handed to tritonize.export() from Python; tritonize cannot build it "
                             "again: export it again from Python (tritonize.export(model, ...))")
    model = _call(spec, num_classes=spec.num_classes)
    if spec.weights_kind == "checkpoint":
        checkpoints.load_weights(model, Path(spec.weights), spec.arch)
    return model


def _locate(arch: str) -> tuple[str, str]:
    """(the file's absolute path or the module's name, FUNC), checked to exist."""
    target, _, func_name = arch.rpartition(":")
    if not target or not func_name:
        raise TritonizeError(f"--arch {arch}: expected FILE.py:FUNC or package.module:FUNC")
    if target.endswith(".py"):
        path = Path(target).expanduser()
        if not path.is_file():
            raise TritonizeError(f"--arch {arch}: {path} does not exist")
        return str(path.resolve()), func_name
    return target, func_name


def _describe(target: str, func_name: str) -> str:
    return f"{func_name}() in {target}" if target.endswith(".py") else f"{func_name}() in module {target}"


def _weights(weights: str | None) -> tuple[str, str]:
    if weights is None:
        return "code", "as FUNC returns it"
    if weights.lower() == "none":
        return "none", "none"
    path = Path(weights).expanduser()
    if not path.is_file():
        raise TritonizeError(f"checkpoint {weights} does not exist; give a state_dict file or `none` (the model as "
                             "FUNC returns it, seeded)")
    return "checkpoint", str(path.resolve())


@contextlib.contextmanager
def _importable(*directories: str):
    """The user's file imports its neighbours, and `package.module` is found in the working directory, as
    `python -m` would find it."""
    added = [d for d in directories if d not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(d)


def _load_module(target: str, arch: str):
    if target.endswith(".py"):
        name = "tritonize_user_" + hashlib.sha256(target.encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, target)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up here
        try:
            with _importable(str(Path(target).parent)):
                spec.loader.exec_module(module)
        except BaseException as e:
            del sys.modules[name]
            if isinstance(e, KeyboardInterrupt):
                raise
            raise TritonizeError(f"{target} raised {type(e).__name__} while being imported: {_first_line(e)}") from None
        return module
    try:
        with _importable(os.getcwd()):
            return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name and (target == e.name or target.startswith(e.name + ".")):  # not one the module imports
            prefix = target.split(".")[0]
            raise TritonizeError(f"--arch {arch}: {prefix + ':'!r} is no source (timm:, hf:) and no module named "
                                 f"{e.name!r} can be imported for package.module:FUNC (from the working directory or "
                                 "sys.path); give FILE.py:FUNC for a file") from None
        raise TritonizeError(f"module {target} raised ModuleNotFoundError while being imported: {_first_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - the user's module: anything can go wrong while it is imported
        raise TritonizeError(f"module {target} raised {type(e).__name__} while being imported: {_first_line(e)}") from None


def _function(spec: ModelSpec):
    """FUNC itself (a dotted name walks attributes: `Class.factory`)."""
    target, _, func_name = spec.arch.rpartition(":")
    module = _load_module(target, spec.arch)
    func = module
    for part in func_name.split("."):
        func = getattr(func, part, None)
        if func is None:
            callables = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:8]
            raise TritonizeError(f"{target} has no {func_name!r}; it has: {', '.join(callables) or 'no functions'}")
    return func


def _call(spec: ModelSpec, num_classes: int | None = None):
    """FUNC's module, made under the seed; `num_classes` is passed when FUNC takes it."""
    import torch

    func = _function(spec)
    if isinstance(func, torch.nn.Module):
        return func
    if not callable(func):
        raise TritonizeError(f"{spec.arch}: {spec.arch.rpartition(':')[2]} is a {type(func).__name__}, not a function "
                             "that returns the model")
    kwargs = {}
    if num_classes and _takes(func, "num_classes"):
        kwargs["num_classes"] = num_classes
    try:
        with seeded():
            model = func(**kwargs)
    except Exception as e:  # noqa: BLE001 - the user's FUNC: anything can go wrong
        raise TritonizeError(f"{spec.arch} raised {type(e).__name__}: {_first_line(e)}") from None
    if not isinstance(model, torch.nn.Module):
        raise TritonizeError(f"{spec.arch} returned a {type(model).__name__}, not a torch.nn.Module; FUNC must return "
                             "the model")
    return model


def _takes(func, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _fit_checkpoint(spec: ModelSpec, model, classes: int, origin: str) -> tuple[int, str]:
    """A checkpoint whose head differs sets the classes where FUNC takes num_classes; otherwise it must fit."""
    takes = _takes(_function(spec), "num_classes")

    def layout(num_classes: int | None):
        if num_classes is None:
            return checkpoints.shapes(model.state_dict())
        return checkpoints.shapes(_call(spec, num_classes=num_classes).state_dict()) if takes else None

    return checkpoints.checkpoint_classes(Path(spec.weights), layout, classes, origin, spec.arch)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
