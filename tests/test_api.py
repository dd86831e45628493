"""tritonize from Python (tritonize/api.py): each stage under its command's name, with the command's options; the
commands are a layer over these functions."""

from __future__ import annotations

import enum
import inspect

import pytest
import typer

import tritonize
from tritonize import api
from tritonize.cli import app

# The command's preprocessing flags are the API's `preprocessing=` mapping (tritonize.options.contract_changes).
CONTRACT_FLAGS = {"resize", "crop", "mean", "std", "interpolation", "antialias", "channel_order", "layout", "pixel_scale",
                  "crop_offset"}
# API function -> (its command's path, the parameters only one of the two has)
COMMANDS = {
    "export": (("export",), {"arch", "model", "preprocessing", *CONTRACT_FLAGS}),
    "build": (("build",), {"arch", "model", "preprocessing", *CONTRACT_FLAGS}),
    "convert_trt": (("convert", "trt"), set()),
    "repo_build": (("repo", "build"), set()),
    "repo_check": (("repo", "check"), {"as_json", "in_image"}),  # how the command prints; a GPU box's extra check
    "client_classify": (("client", "classify"), {"as_json"}),
    "client_compare": (("client", "compare"), {"as_json"}),
}


def _command(path):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _plain(value):
    return value.value if isinstance(value, enum.Enum) else value


@pytest.mark.parametrize("function", sorted(COMMANDS))
def test_each_function_takes_its_command_s_options_with_the_same_defaults(function):
    path, only_one = COMMANDS[function]
    command = {p.name: _plain(p.default) for p in _command(path).params if p.name not in only_one}
    signature = inspect.signature(getattr(api, function)).parameters
    ours = {n: p.default for n, p in signature.items() if n not in only_one}
    assert set(ours) == set(command)
    defaults = {n: d for n, d in ours.items() if d is not inspect.Parameter.empty}
    # The API says None where the command's default is a module constant it fills in (the url, max_pixels).
    differing = {n: (d, command[n]) for n, d in defaults.items() if d != command[n] and not
                 (d is None and n in ("url", "max_pixels", "ready_timeout")) and str(d) != str(command[n])}
    assert not differing


def test_the_package_names_the_api():
    assert callable(tritonize.export) and callable(tritonize.serve)  # the subpackages are callable as the functions
    import tritonize.export as package

    assert package is tritonize.export and tritonize.build is api.build and tritonize.repo_build is api.repo_build
    assert set(tritonize.__all__) >= set(COMMANDS) | {"serve", "Preprocessing", "TritonizeError"}
    with pytest.raises(AttributeError):
        tritonize.no_such_thing  # noqa: B018


def test_a_module_handed_over_is_exported_in_eval_mode_and_left_as_it_was(tmp_path):
    """A notebook's model in training mode (one batch norm frozen): exported as in eval mode, verified, recorded as a
    module; then every submodule back in its own mode, and the same weights again are up to date."""
    import torch

    from tests.suite_model import suite_classifier
    from tritonize.manifest import Manifest
    from tritonize.stage import StageStatus

    model = suite_classifier().train()
    model.bn1.eval()
    result = tritonize.export(model, artifacts=tmp_path, format="torchscript", max_batch=2)
    assert result.status is StageStatus.done
    assert model.training and model.stem.training and not model.bn1.training
    spec = Manifest.load(tmp_path).spec
    assert spec.source == "module" and spec.weights.startswith("sha256:") and spec.labels[0] == "class 0"
    assert tritonize.export(model, artifacts=tmp_path, format="torchscript", max_batch=2).status is StageStatus.up_to_date
    with torch.no_grad():
        model.fc.bias += 1  # trained further: another model
    with pytest.raises(tritonize.TritonizeError, match="holds artifacts of another model"):
        tritonize.export(model, artifacts=tmp_path, format="torchscript", max_batch=2)
