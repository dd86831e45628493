"""The export stage against real torchvision models, real TorchScript and real onnxruntime."""

from __future__ import annotations

import json
import socket
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tests.conftest import SMALL, SMALL_ARCH, SMALL_LABELS, run_cli
from tests.interrupt import killed_after_rename, stop_at_rename
from tritonize.errors import TritonizeError
from tritonize.export import ExportOptions, export_artifacts
from tritonize.files import sha256_file
from tritonize.manifest import Manifest
from tritonize.sources import build_model, resolve_spec
from tritonize.verify import Tolerance, verification_inputs, verify_runner


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _leftovers(path: Path) -> list[str]:
    return [p.name for p in path.iterdir() if ".tmp-" in p.name]


def test_export_writes_verified_artifacts_and_manifest(small_artifacts):
    m = _manifest(small_artifacts)
    assert m["model"]["arch"] == SMALL_ARCH and m["model"]["weights_kind"] == "none"
    assert m["model"]["preprocessing"]["resize"] == 256 and m["model"]["preprocessing"]["crop"] == 224
    assert m["model"]["preprocessing"]["std"] == [0.229, 0.224, 0.225]
    assert len(m["labels"]) == 1000 and m["labels"][1] == "goldfish" and "labels" not in m["model"]
    assert m["model"]["source"] == "code" and m["model"]["labels_source"] == f"--labels {SMALL_LABELS}"
    assert m["tritonize"] == version("tritonize") and list(m)[-2:] == ["artifacts", "labels"]  # labels last
    for key, name in (("torchscript", "model.pt"), ("onnx", "model.onnx")):
        entry = m["artifacts"][key]
        assert entry["file"] == name and entry["status"] == "verified"
        assert entry["sha256"] == sha256_file(small_artifacts / name)
        report = entry["verification"]
        assert report["passed"] and sorted(report["batches"], key=int) == ["1", "7", "32"]
        assert report["worst_rel_to_scale"] < 1e-4 and report["top1_agreement"] == 1.0
        assert report["batch_invariance"]["passed"]
        assert {"export", "verify"} <= set(entry["timings"])
    assert m["artifacts"]["onnx"]["opset"] == 18 and m["artifacts"]["onnx"]["simplified"] == "onnxsim"
    assert {"torch", "onnx", "onnxsim", "onnxruntime"} <= set(m["artifacts"]["onnx"]["tools"])
    assert _leftovers(small_artifacts) == []


def test_onnx_has_a_symbolic_batch_axis_and_runs_at_1_7_32(small_artifacts):
    model = onnx.load(str(small_artifacts / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    assert not any(i.external_data for i in model.graph.initializer)  # one self-contained file
    session = ort.InferenceSession(str(small_artifacts / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 7, 32):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), dtype=np.float32)
        assert session.run(["output"], {"input": x})[0].shape == (batch, 1000)


def test_torchscript_matches_eager_at_another_batch(small_artifacts):
    spec = Manifest.load(small_artifacts).model  # the labels stand after the artifacts in the file
    module = torch.jit.load(str(small_artifacts / "model.pt"))
    x = torch.from_numpy(verification_inputs(spec.input_shape, 3, spec.preprocessing.mean, spec.preprocessing.std, seed=5))
    with torch.inference_mode():
        scripted, eager = module(x).numpy(), build_model(spec)(x).numpy()  # random init is seeded
    assert np.abs(scripted - eager).max() / np.abs(eager).max() < 1e-4


def test_the_exported_program_is_verified_and_recorded(small_artifacts):
    """torch.export's .pt2 (asked for with --format exported_program, or all): published after torch.export.load ran
    it at batches 1, 7 and 32 against eager, recorded with the figures and the program's own tensor names."""
    entry = _manifest(small_artifacts)["artifacts"]["exported_program"]
    assert entry["file"] == "model.pt2" and entry["format"] == "exported_program" and entry["status"] == "verified"
    assert entry["sha256"] == sha256_file(small_artifacts / "model.pt2")
    report = entry["verification"]
    assert report["passed"] and sorted(report["batches"], key=int) == ["1", "7", "32"]
    assert report["worst_rel_to_scale"] < 1e-4 and report["top1_agreement"] == 1.0 and report["batch_invariance"]["passed"]
    assert (entry["input_name"], entry["output_name"]) == ("x", "linear")  # the placeholder and the last node of resnet18
    assert entry["batch_range"] == [1, 4096] and {"export", "verify"} <= set(entry["timings"])
    assert Manifest.load(small_artifacts).exported_program.file == "model.pt2"


def test_the_exported_program_keeps_a_dynamic_batch(small_artifacts):
    spec = Manifest.load(small_artifacts).model
    with open(small_artifacts / "model.pt2", "rb") as f:
        program = torch.export.load(f)
    (batch, bounds), = ((str(s), (r.lower, r.upper)) for s, r in program.range_constraints.items())
    assert bounds == (1, 4096)
    x = torch.from_numpy(verification_inputs(spec.input_shape, 5, spec.preprocessing.mean, spec.preprocessing.std, seed=3))
    with torch.inference_mode():
        got, eager = program.module()(x).numpy(), build_model(spec)(x).numpy()
    assert got.shape == (5, 1000) and np.abs(got - eager).max() / np.abs(eager).max() < 1e-4


def test_formats_are_a_list_and_the_exported_program_is_asked_for(tmp_path):
    """The default writes what Triton serves (TorchScript, ONNX); the .pt2 only when asked for."""
    assert ExportOptions().formats == ("torchscript", "onnx")
    result = run_cli("export", *SMALL, "--max-batch", "2", "--artifacts", tmp_path,
                     "--format", " exported_program, torchscript")
    assert result.exit_code == 0, result.output
    assert sorted(_manifest(tmp_path)["artifacts"]) == ["exported_program", "torchscript"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "model.pt", "model.pt2"]


def test_verification_catches_a_perturbed_graph(small_artifacts, tmp_path):
    """Nudge one weight of the real ONNX graph by 1 %: verification must fail."""
    model = onnx.load(str(small_artifacts / "model.onnx"))
    weight = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    array = onnx.numpy_helper.to_array(weight) * 1.01
    weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    good = ort.InferenceSession(str(small_artifacts / "model.onnx"), providers=["CPUExecutionProvider"])
    bad = ort.InferenceSession(str(tmp_path / "bad.onnx"), providers=["CPUExecutionProvider"])
    x = verification_inputs((3, 224, 224), 7, (0.5,) * 3, (0.25,) * 3)
    reference = good.run(["output"], {"input": x})[0]
    report = verify_runner(lambda b: bad.run(["output"], {"input": b})[0], x, reference)
    assert not report.passed and report.worst_rel_to_scale > 1e-3
    assert verify_runner(lambda b: good.run(["output"], {"input": b})[0], x, reference).passed


def test_verification_catches_batch_dependent_outputs():
    """A model left in training mode normalizes with batch statistics: outputs depend on the batch."""
    spec = resolve_spec(SMALL_ARCH, "none")
    model = build_model(spec).train()
    x = verification_inputs(spec.input_shape, 8, spec.preprocessing.mean, spec.preprocessing.std)
    with torch.no_grad():
        reference = build_model(spec).eval()(torch.from_numpy(x)).numpy()

    def run(batch):
        with torch.no_grad():
            return model(torch.from_numpy(batch)).numpy()

    report = verify_runner(run, x, reference, batches=[2, 8])
    assert not report.passed and not report.invariance_passed


def test_failed_verification_publishes_nothing_and_keeps_previous_artifacts(artifacts_copy):
    before = {name: sha256_file(artifacts_copy / name) for name in ("model.onnx", "manifest.json")}
    spec = resolve_spec(SMALL_ARCH, "none")
    impossible = Tolerance(max_rel_to_scale=0.0)  # any real float difference fails it
    options = ExportOptions(formats=("onnx",), force=True, tolerance=impossible)
    with pytest.raises(TritonizeError, match="failed verification.*was not published"):
        export_artifacts(spec, artifacts_copy, options)
    assert {name: sha256_file(artifacts_copy / name) for name in before} == before
    assert _leftovers(artifacts_copy) == []


def test_ctrl_c_before_publishing_leaves_the_previous_artifacts_and_no_temporary(artifacts_copy):
    """Ctrl-C of the real `tritonize export` with the new model.pt written and verified under its temporary
    name, right before the first publish step (its entry recorded as pending)."""

    before = {name: sha256_file(artifacts_copy / name) for name in ("model.pt", "manifest.json")}
    status = stop_at_rename(artifacts_copy, "before", 1, "ctrl-c", "export", "--format", "torchscript", *SMALL,
                            "--max-batch", "2", "--artifacts", artifacts_copy)
    assert status not in (None, 0)
    assert {name: sha256_file(artifacts_copy / name) for name in before} == before
    assert _leftovers(artifacts_copy) == []


def test_export_killed_between_publish_steps_never_disagrees_with_its_manifest(artifacts_copy, tmp_path):
    """kill -9 of the real `tritonize export` right after each publish step (entry recorded as pending,
    file renamed into place, entry recorded as verified): the manifest never vouches for a file it
    does not describe, `repo check` says so while the entry is pending, and the next export redoes it."""
    from tritonize.manifest import Manifest, Status
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path / "models"
    build_repository(artifacts_copy, repo, RepoOptions(kind="cpu", models=("torch_model",), warmup=False, ensembles=False))
    export = ["export", "--format", "torchscript", *SMALL, "--max-batch", "2",
              "--artifacts", artifacts_copy]
    before = sha256_file(artifacts_copy / "model.pt")
    for renames in (1, 2, 3):  # each export starts from what the killed one before it left
        assert killed_after_rename(artifacts_copy, renames, *export, *(["--force"] if renames == 1 else []))
        entry = Manifest.load(artifacts_copy).torchscript
        on_disk = sha256_file(artifacts_copy / "model.pt")
        check = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
        flagged = [line for line in check.output.splitlines() if line.startswith("error: artifacts: model.pt")]
        if renames < 3:
            assert entry.status is Status.pending and len(flagged) == 1, check.output
            assert on_disk == (before if renames == 1 else entry.sha256)
        else:
            assert entry.status is Status.verified and entry.sha256 == on_disk != before and not flagged
    result = run_cli(*export)
    assert result.exit_code == 0 and "model.pt is up to date" in result.output
    assert _leftovers(artifacts_copy) == []


def test_rerun_skips_up_to_date_artifacts(artifacts_copy):
    before = (artifacts_copy / "model.onnx").stat().st_mtime_ns
    result = run_cli("export", *SMALL, "--artifacts", artifacts_copy)
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output
    assert (artifacts_copy / "model.onnx").stat().st_mtime_ns == before


def test_an_up_to_date_export_removes_what_a_killed_one_left_and_names_what_a_running_one_writes(artifacts_copy):
    import os
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = artifacts_copy / f".model.onnx.tmp-{dead.pid}"  # a killed export's half-written ONNX (33 MB for resnet18)
    running = artifacts_copy / f".model.pt.tmp-{os.getppid()}"  # the temporary of an export that still runs
    for path in (killed, running):
        path.write_bytes(b"half-written")
    result = run_cli("export", *SMALL, "--artifacts", artifacts_copy)
    assert result.exit_code == 0 and "model.onnx is up to date" in result.output, result.output
    assert _leftovers(artifacts_copy) == [running.name]
    assert f"removed {killed.name}, left by an interrupted run (pid {dead.pid})" in result.output
    assert f"{running.name} belongs to a running process (pid {os.getppid()})" in result.output


def test_another_model_in_the_same_directory_needs_force(artifacts_copy):
    result = run_cli("export", "--arch", "resnet34", "--weights", "none", "--artifacts", artifacts_copy)
    assert result.exit_code == 1
    assert "holds artifacts of another model" in result.output and "--force" in result.output


def test_local_checkpoint_is_exported_and_recorded(tmp_path):
    torch.manual_seed(123)
    state = build_model(resolve_spec(SMALL_ARCH, "none")).state_dict()
    torch.save(state, tmp_path / "ckpt.pth")
    out = tmp_path / "out"
    result = run_cli("export", "--format", "onnx", "--arch", SMALL_ARCH, "--weights", tmp_path / "ckpt.pth", "--artifacts", out)
    assert result.exit_code == 0, result.output
    m = _manifest(out)
    assert m["model"]["weights_kind"] == "checkpoint" and m["model"]["weights"].endswith("ckpt.pth")
    # The exported graph carries the checkpoint's weights, not a fresh random init.
    fc = next(t for t in onnx.load(str(out / "model.onnx")).graph.initializer if tuple(t.dims) == (1000,))
    assert np.allclose(onnx.numpy_helper.to_array(fc), state["fc.bias"].numpy())


# --- bad input through the real CLI: one line, non-zero exit, no traceback ------------------------

def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_unknown_arch(tmp_path):
    _one_line_error(run_cli("export", "--arch", "resnet_nonexistent", "--weights", "none", "--artifacts", tmp_path), "unknown arch")


def test_unknown_weights_name(tmp_path):
    _one_line_error(run_cli("export", "--arch", "resnet18", "--weights", "IMAGENET9K", "--artifacts", tmp_path),
                    "unknown weights", "IMAGENET1K_V1")


def test_unreadable_checkpoint(tmp_path):
    (tmp_path / "broken.pth").write_bytes(b"this is not a checkpoint")
    _one_line_error(run_cli("export", "--arch", SMALL_ARCH, "--weights", tmp_path / "broken.pth", "--artifacts", tmp_path / "o"),
                    "cannot read checkpoint")
    assert not (tmp_path / "o" / "model.onnx").exists()


def test_checkpoint_of_another_arch(tmp_path):
    torch.save(build_model(resolve_spec("resnet34", "none")).state_dict(), tmp_path / "r34.pth")
    _one_line_error(run_cli("export", "--arch", "resnet18", "--weights", tmp_path / "r34.pth", "--artifacts", tmp_path / "o"),
                    "does not match resnet18", "not in the model: layer1.2.conv1.weight")


def test_missing_checkpoint_file(tmp_path):
    _one_line_error(run_cli("export", "--arch", SMALL_ARCH, "--weights", tmp_path / "nope.pth", "--artifacts", tmp_path),
                    "does not exist")


def test_unwritable_output_directory(tmp_path):
    (tmp_path / "a-file").write_text("x")
    _one_line_error(run_cli("export", *SMALL, "--artifacts", tmp_path / "a-file" / "out"),
                    "cannot write to output directory")


@pytest.mark.parametrize("value", ["tensorflow", "onnx,pt2", ","])
def test_unknown_format(tmp_path, value):
    result = run_cli("export", "--format", value, "--artifacts", tmp_path)
    assert result.exit_code == 2 and "Invalid value for '--format'" in result.output
    assert "choose from torchscript, onnx, exported_program, or all" in result.output and not list(tmp_path.iterdir())


def _online() -> bool:
    try:
        socket.create_connection(("download.pytorch.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(_online(), reason="the machine is online: default weights would download")
def test_default_weights_offline_give_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))  # no cached weights
    _one_line_error(run_cli("export", "--arch", "resnet18", "--artifacts", tmp_path / "o"),
                    "cannot download pretrained weights", "--weights none")
    assert not (tmp_path / "o" / "model.onnx").exists()


@pytest.mark.slow
def test_wide_resnet101_2_exports_end_to_end(tmp_path):
    """The default model exports and verifies. Verified up to batch 8, not 32: what is wide_resnet101_2's own here (its
    V2 transforms, 500 MB files) does not depend on the batch, the batch-32 verification is the small models' tests'
    and `make demo`'s, and at 32 this one test took two minutes of one core."""
    out = tmp_path / "wrn"
    result = run_cli("export", "--arch", "wide_resnet101_2", "--weights", "none", "--artifacts", out, "--max-batch", "8")
    assert result.exit_code == 0, result.output
    m = _manifest(out)
    assert m["model"]["preprocessing"]["resize"] == 232  # IMAGENET1K_V2 transforms
    for key in ("torchscript", "onnx"):
        assert m["artifacts"][key]["verification"]["passed"]
        assert m["artifacts"][key]["size_bytes"] > 400e6
