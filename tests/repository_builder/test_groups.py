"""What `repo build` and `repo check` conclude about a group holds for each member: every version, every step of an
ensemble, every backend. Each member fails alone in turn, then all of them."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import run_cli
from tests.repository_builder.helpers import copy_repo, edit_config
from tritonize.repository_builder import check_repository


@pytest.fixture
def repo(small_repo, tmp_path):
    return copy_repo(small_repo, tmp_path / "models")


def _errors(findings, model: str) -> list[str]:
    return sorted(f.message for f in findings if f.severity == "error" and f.model == model)


@pytest.mark.parametrize("missing", [("1",), ("2",), ("3",), ("1", "2", "3")])
def test_every_version_must_hold_the_model_file(repo, missing):
    """Three versions of onnx_model; its model file taken from one of them in turn, then from all."""
    model = repo / "onnx_model"
    for version in ("2", "3"):
        shutil.copytree(model / "1", model / version, copy_function=os.link)
    for version in missing:
        (model / version / "model.onnx").unlink()
    assert _errors(check_repository(repo), "onnx_model") == [f"version {v}/ has no model.onnx" for v in missing]


@pytest.mark.parametrize("wrong", [(0,), (1,), (0, 1)])
def test_every_step_of_an_ensemble_must_name_a_model_of_the_repository(repo, wrong):
    def rename(c):
        for index in wrong:
            c.ensemble_scheduling.step[index].model_name += "_gone"
    edit_config(repo / "onnx_classifier", rename)
    names = ["preprocess", "onnx_model"]
    assert _errors(check_repository(repo), "onnx_classifier") == sorted(
        f"step {i + 1} names model '{names[i]}_gone', which is not in the repository" for i in wrong)


@pytest.mark.parametrize("wrong", [(0,), (1,), (0, 1)])
def test_every_step_must_map_all_its_inputs(repo, wrong):
    """A step whose input_map names another tensor key: each step in turn, then both."""
    def remap(c):
        for index in wrong:
            mapping = c.ensemble_scheduling.step[index].input_map
            key = next(iter(mapping))
            mapping["other"] = mapping.pop(key)
    edit_config(repo / "onnx_classifier", remap)
    errors = _errors(check_repository(repo), "onnx_classifier")
    models, inputs = ["preprocess", "onnx_model"], ["IMAGE", "input"]
    assert errors == sorted([f"step {i + 1}: 'other' is not an input of {models[i]} (its inputs: {inputs[i]})" for i in wrong]
                            + [f"step {i + 1}: {models[i]}'s input(s) {inputs[i]} are not mapped" for i in wrong])


@pytest.mark.parametrize("missing", [("model.pt",), ("model.onnx",), ("model.pt", "model.onnx")])
def test_repo_build_builds_every_model_whose_artifact_is_there_and_refuses_when_none_is(artifacts_copy, tmp_path, missing):
    for name in missing:
        (artifacts_copy / name).unlink()
    result = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models", "--no-ensembles")
    built = {"model.pt": "torch_model", "model.onnx": "onnx_model"}
    if len(missing) == 2:
        assert result.exit_code == 1 and "no model to build" in result.output
        assert not (tmp_path / "models").exists()
        return
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "models").iterdir() if p.is_dir()) == \
        [model for file, model in built.items() if file not in missing]
