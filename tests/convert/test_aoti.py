"""`tritonize convert aoti`: the ExportedProgram compiled with AOTInductor (once per run: `aoti_artifacts`), verified
against eager, skipped when up to date, waiting for a GPU box for a GPU package, refused for a release that cannot
serve it."""

from __future__ import annotations

import json

import torch

from tests.conftest import error_line, run_cli
from tritonize import aoti
from tritonize.manifest import Manifest, Status
from tritonize.model_repository import AOTI_MODEL


def test_the_package_is_compiled_from_the_verified_program_and_verified_against_eager(aoti_artifacts):
    manifest = Manifest.load(aoti_artifacts)
    entry, program = manifest.aoti, manifest.exported_program
    assert entry.status is Status.verified and entry.device == "cpu"
    assert (entry.source.file, entry.source.sha256) == (program.file, program.sha256)
    assert entry.compiler == torch.__version__ and entry.target.triton_release >= AOTI_MODEL.batching_release
    assert sorted(map(int, entry.verification.batches)) == [1, 7, 32] and entry.verification.passed
    assert entry.verification.worst_rel_to_scale < 1e-4
    package = aoti_artifacts / entry.file
    assert manifest.file_problem(entry) is None and aoti.device(package) == "cpu"
    # the names Triton's pytorch backend binds, read from the package's own call spec
    assert (entry.input_name, entry.output_name) == ("ARGS[0]", "RESULT") == (AOTI_MODEL.default_input, AOTI_MODEL.default_output)
    loaded = torch._inductor.aoti_load_package(str(package))
    assert loaded.loader.get_call_spec() == aoti.archived_call_spec(package)
    # compiled with a dynamic batch: any batch runs, also one never verified
    assert loaded(torch.zeros(5, 3, 224, 224)).shape == (5, 1000)
    # progress while it compiled, and no inductor files left beside the artifacts
    said = (aoti_artifacts / "convert.txt").read_text()
    assert "compile model.pt2 with AOTInductor for the CPU" in said and "✓ published" in said
    assert not list(aoti_artifacts.glob(".inductor-*"))


def test_a_package_of_the_same_program_and_compiler_is_up_to_date(aoti_copy):
    package = aoti_copy / Manifest.load(aoti_copy).aoti.file
    before = package.stat().st_mtime_ns
    again = run_cli("convert", "aoti", "--artifacts", aoti_copy)
    assert again.exit_code == 0, again.output
    assert "model_aoti.pt2 is up to date (same ExportedProgram sha256" in again.output
    assert "aoti: up to date" in again.output and package.stat().st_mtime_ns == before


def test_a_gpu_package_on_a_machine_without_one_waits_with_the_command_to_run_there(aoti_copy):
    result = run_cli("convert", "aoti", "--device", "gpu", "--artifacts", aoti_copy)
    line = error_line(result, 3)
    command = f"tritonize convert aoti --device gpu --triton-release {Manifest.load(aoti_copy).aoti.target.triton_release} --artifacts {aoti_copy}"
    assert line == f"error: torch cannot compile a GPU package here; on the GPU box run: {command}"
    entry = Manifest.load(aoti_copy).aoti
    assert entry.status is Status.waiting_for_gpu and entry.device == "gpu" and entry.gpu_command == command
    assert entry.file is None  # nothing vouched for: the CPU package's file stays, the manifest no longer serves it
    # the same wait again: exit 3 again, nothing compiled
    assert run_cli("convert", "aoti", "--device", "gpu", "--artifacts", aoti_copy).exit_code == 3

    built = run_cli("repo", "build", "--artifacts", aoti_copy, aoti_copy / "models")
    assert built.exit_code == 0, built.output
    assert f"skipped aoti_model: its GPU package is waiting_for_gpu (on a GPU box run `{command}`)" in built.output
    note = (aoti_copy / "models" / "aoti_model.not-built.txt").read_text()
    assert command in note and "compiled on a GPU box" in note
    assert not (aoti_copy / "models" / "aoti_model").exists()


def test_a_release_before_26_05_gets_no_package_and_the_cli_says_why(aoti_copy):
    for release in ("25.10", "26.03", "26.04"):
        line = error_line(run_cli("convert", "aoti", "--triton-release", release, "--artifacts", aoti_copy))
        assert line.startswith(f"error: --triton-release {release}: Triton {release} cannot serve aoti_model: its pytorch "
                               "backend serves a PT2 package (platform torch_aoti) of a one-input classifier from 26.05")
        assert line.endswith("give --triton-release 26.05 or later")
    assert Manifest.load(aoti_copy).aoti.status is Status.verified  # untouched


def test_without_an_exported_program_it_names_the_export_to_run(artifacts_copy):
    data = json.loads((artifacts_copy / "manifest.json").read_text())
    del data["artifacts"]["exported_program"]
    (artifacts_copy / "manifest.json").write_text(json.dumps(data))
    line = error_line(run_cli("convert", "aoti", "--artifacts", artifacts_copy))
    assert line == (f"error: {artifacts_copy}/manifest.json has no verified ExportedProgram to compile: run `tritonize "
                    f"export --format exported_program --artifacts {artifacts_copy}` first")


def test_call_spec_names_follow_pytorch_backend_26_05():
    """pytorch_backend r26.05 src/pt2/model_state.cc LoadModel on call specs as torch writes them."""
    leaf = {"type": None, "context": None, "children_spec": []}
    tuple_of = lambda *c: {"type": "builtins.tuple", "context": "null", "children_spec": list(c)}  # noqa: E731
    dict_of = lambda keys, *c: {"type": "builtins.dict", "context": json.dumps(keys), "children_spec": list(c)}  # noqa: E731
    spec = lambda node: json.dumps([1, node])  # noqa: E731
    one = [spec(tuple_of(tuple_of(leaf), dict_of([]))), spec(leaf)]
    assert aoti.tensor_names(one) == (["ARGS[0]"], ["RESULT"])
    many = [spec(tuple_of(tuple_of(leaf, tuple_of(leaf, leaf), dict_of(["a"], leaf)), dict_of(["k"], leaf))),
            spec(dict_of(["x", "y"], leaf, tuple_of(leaf, leaf)))]
    assert aoti.tensor_names(many) == (["ARGS[0]", "ARGS[1][0]", "ARGS[1][1]", "ARGS[2][a]", "KWARGSk"],
                                       ["RESULT[x]", "RESULT[y][0]", "RESULT[y][1]"])
