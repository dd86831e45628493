"""aoti_model in the repository: its config as Triton's pytorch backend reads it (checked per release in that
backend's source: model_repository's AOTI_MODEL), built from the package compiled once per run, and `repo check`'s
rules about it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conftest import record, run_cli
from tests.repository_builder.helpers import edit_config
from tritonize.manifest import Manifest, Target
from tritonize.model_repository import AOTI_MODEL, parse_config
from tritonize.releases import release_info
from tritonize.repository_builder import RepoOptions, build_repository, check_repository


def _target(artifacts, release: str) -> None:
    """The package recorded as made for `release` (what `convert aoti --triton-release` records; the compiled code
    does not depend on it)."""
    entry = Manifest.load(artifacts).aoti
    record(artifacts, AOTI_MODEL.artifact, replace(entry, target=Target(release, release_info(release).image)))


def _findings(repo, artifacts=None, **kwargs):
    return [(f.severity.value, f.model, f.message) for f in check_repository(repo, artifacts, **kwargs)]


@pytest.fixture
def built(aoti_copy):
    repo = aoti_copy / "models"
    build_repository(aoti_copy, repo, RepoOptions())
    return repo


def test_the_package_is_served_as_triton_s_pytorch_backend_reads_it(built, aoti_copy):
    entry = Manifest.load(aoti_copy).aoti
    cfg = parse_config(built / "aoti_model" / "config.pbtxt")
    assert (cfg.backend, cfg.platform) == ("pytorch", "torch_aoti")
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("ARGS[0]", [3, 224, 224])]
    assert [(t.name, list(t.dims), t.label_filename) for t in cfg.output] == [("RESULT", [1000], "labels.txt")]
    assert cfg.max_batch_size == 32 and list(cfg.dynamic_batching.preferred_batch_size) == [4, 8, 16, 32]
    assert [g.kind for g in cfg.instance_group] == [2]  # KIND_CPU: a CPU package runs nowhere else
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert (params["source.triton_release"], params["source.device"], params["source.torch_version"]) == (
        entry.target.triton_release, "cpu", entry.compiler)
    assert sorted(p.name for p in (built / "aoti_model").iterdir()) == ["1", "config.pbtxt", "configs", "labels.txt"]
    assert sorted(p.name for p in (built / "aoti_model" / "configs").iterdir()) == ["cpu.pbtxt"]
    assert (built / "aoti_model" / "1" / "model.pt2").samefile(aoti_copy / entry.file)
    assert {"aoti_classifier", "aoti_classifier_uint8"} <= {p.name for p in built.iterdir()}
    assert _findings(built, aoti_copy) == []


def test_before_26_07_it_is_served_without_batching_and_repo_check_refuses_batching(aoti_copy):
    repo = aoti_copy / "models"
    _target(aoti_copy, "26.05")
    result = run_cli("repo", "build", "--artifacts", aoti_copy, repo)
    assert result.exit_code == 0, result.output
    assert "aoti_model: Triton 26.05 does not batch it (from 26.07): max_batch_size 0" in result.output
    text = (repo / "aoti_model" / "config.pbtxt").read_text()
    assert "# Triton 26.05's pytorch backend does not batch torch_aoti models (from 26.07): max_batch_size 0" in text
    # the evidence, in the note and in what build said
    evidence = ("pytorch_backend's README up to r26.06: \"Support for batch sizes greater than 1 ... has not been "
                "completed\"; release 2.71.0 (26.07): \"PyTorch backend: Enabled PyTorch 2 batching\"")
    assert evidence in text and evidence in " ".join(result.output.split())
    cfg = parse_config(repo / "aoti_model" / "config.pbtxt")
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [1, 3, 224, 224] and list(cfg.output[0].dims) == [1, 1000]
    assert [(w.batch_size, list(w.inputs["ARGS[0]"].dims)) for w in cfg.model_warmup] == [(1, [1, 3, 224, 224])]
    assert parse_config(repo / "aoti_classifier" / "config.pbtxt").max_batch_size == 0
    assert _findings(repo, aoti_copy) == []

    def batching(c):
        c.max_batch_size = 8
        c.dynamic_batching.max_queue_delay_microseconds = 100
        c.ClearField("model_warmup")
        del c.input[0].dims[0]
        del c.output[0].dims[0]

    edit_config(repo / "aoti_model", batching)
    found = [f for f in _findings(repo) if f[1] == "aoti_model" and f[0] == "error"]
    assert found == [("error", "aoti_model", "max_batch_size 8; dynamic_batching: Triton 26.05's pytorch backend does not "
                                             "batch PT2 models (its README: batch sizes above 1 and sequence batching not "
                                             "completed; batching from 26.07)")]
    assert not [f for f in _findings(repo, triton_release="26.07") if f[1] == "aoti_model"]


def test_a_release_that_cannot_serve_it_gets_no_aoti_model(aoti_copy):
    _target(aoti_copy, "26.04")
    result = run_cli("repo", "build", "--artifacts", aoti_copy, aoti_copy / "models")
    assert result.exit_code == 0, result.output
    assert "skipped aoti_model: Triton 26.04 cannot serve aoti_model: its pytorch backend serves a PT2 package" in result.output
    assert not (aoti_copy / "models" / "aoti_model").exists()


def test_repo_check_reads_the_package(built):
    model = built / "aoti_model"

    def rename(name):
        def change(c):
            c.input[0].name = name
            c.ClearField("model_warmup")
        return change

    edit_config(model, rename("INPUT__0"))  # the ordinal names the same tensor
    assert not [f for f in _findings(built) if f[1] == "aoti_model"]
    edit_config(model, rename("input"))
    edit_config(model, lambda c: c.instance_group[0].__setattr__("kind", 1))  # KIND_GPU
    edit_config(model, lambda c: c.output[0].dims.__setitem__(0, 10))
    found = {f[2] for f in _findings(built) if f[1] == "aoti_model"}
    assert "input 'input' is not a tensor Triton's pytorch backend binds for model.pt2: ARGS[0] (or INPUT__0 ...)" in found
    assert ("model.pt2 was compiled for the CPU, but an instance group is KIND_GPU: those instances cannot run it"
            in found)
    assert "output 'RESULT': config dims [10], model.pt2 returns [1000] (batch axis excluded)" in found
    assert {f[2] for f in _findings(built, triton_release="26.03") if f[1] == "aoti_model"} >= {
        "Triton 26.03 cannot serve aoti_model: its pytorch backend serves a PT2 package (platform torch_aoti) of a "
        "one-input classifier from 26.05 (26.03 and 26.04 bind the inputs to the package's two call-spec strings, so one "
        "input does not load), and batches it from 26.07 (release 2.71.0: \"Enabled PyTorch 2 batching\")"}
