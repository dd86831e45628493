"""manifest.py: the typed schema round-trips, refuses what it cannot read, and stays a flat JSON file."""

from __future__ import annotations

import json

import pytest

from tests.conftest import plan_entry
from tritonize.errors import TritonizeError
from tritonize.manifest import SCHEMA_VERSION, ExportedArtifact, Manifest, Plan, Status, manifest_path
from tritonize.sources import resolve_spec
from tritonize.verify import verify_runner


@pytest.fixture
def manifest(tmp_path) -> Manifest:
    import numpy as np

    ref = np.eye(8, 12)
    report = verify_runner(lambda b: ref[: len(b)], np.zeros((8, 1)), ref)
    m = Manifest(tmp_path, model=resolve_spec("resnet18", "none"))
    m.record("onnx", ExportedArtifact(
        status=Status.verified, format="onnx", file="model.onnx", size_bytes=10, sha256="a" * 64, input_name="input",
        output_name="output", verification=report, options={"max_batch": 8}, created="2026-01-01T00:00:00+00:00",
        details={"opset": 18, "timings": {"export": {"seconds": 1.0}}},
    ))
    m.record("tensorrt", plan_entry("waiting_for_gpu"))
    return m


def test_round_trip_gives_equal_typed_entries(manifest):
    loaded = Manifest.load(manifest.directory)
    assert loaded == manifest
    assert isinstance(loaded.onnx, ExportedArtifact) and isinstance(loaded.plan, Plan)
    assert loaded.plan.status is Status.waiting_for_gpu and loaded.plan.profile.max == 32
    assert loaded.spec.preprocessing.crop == 224 and loaded.torchscript is None


def test_the_file_is_flat_json_with_a_schema_version(manifest):
    data = json.loads(manifest_path(manifest.directory).read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    onnx = data["artifacts"]["onnx"]
    assert onnx["status"] == "verified" and onnx["opset"] == 18 and "details" not in onnx  # details sit at the top
    assert onnx["verification"]["passed"] is True
    assert "file" not in data["artifacts"]["tensorrt"]  # a plan waiting for a GPU has no file


def test_unknown_schema_version_is_refused_with_one_clear_line(manifest):
    path = manifest_path(manifest.directory)
    data = json.loads(path.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(TritonizeError, match=f"schema version {SCHEMA_VERSION + 1}, this tritonize reads version {SCHEMA_VERSION}"):
        Manifest.load(manifest.directory)


def test_unknown_status_and_unknown_artifact_are_refused(manifest):
    path = manifest_path(manifest.directory)
    data = json.loads(path.read_text())
    data["artifacts"]["tensorrt"]["status"] = "waiting for a GPU"
    path.write_text(json.dumps(data))
    with pytest.raises(TritonizeError, match="artifact 'tensorrt'.*unknown status 'waiting for a GPU'"):
        Manifest.load(manifest.directory)
    data["artifacts"] = {"mystery": {"status": "verified"}}
    path.write_text(json.dumps(data))
    with pytest.raises(TritonizeError, match="artifact 'mystery' this tritonize does not know"):
        Manifest.load(manifest.directory)


def test_missing_or_unreadable_manifest_names_the_command_to_run(tmp_path):
    with pytest.raises(TritonizeError, match="no manifest at .* run `tritonize export --artifacts"):
        Manifest.load(tmp_path)
    manifest_path(tmp_path).write_text("{not json")
    with pytest.raises(TritonizeError, match="cannot read manifest"):
        Manifest.load(tmp_path)
    assert Manifest.load_or_empty(tmp_path / "nowhere").artifacts == {}


def test_an_entry_goes_only_under_its_key(manifest):
    with pytest.raises(TypeError, match="takes a ExportedArtifact"):
        manifest.record("onnx", manifest.plan)


def test_publish_and_file_problem(manifest, tmp_path):
    """publish() puts file and entry in place together; file_problem() compares the file's sha256,
    so a changed file of the same size, a missing one and a pending entry are all reported."""
    from dataclasses import replace

    from tritonize.files import sha256_file

    staged = tmp_path / ".model.onnx.staged"
    staged.write_bytes(b"0123456789")
    entry = replace(manifest.onnx, sha256=sha256_file(staged))
    assert manifest.publish("onnx", entry, staged) == tmp_path / "model.onnx" and not staged.exists()
    loaded = Manifest.load(tmp_path)
    assert loaded.onnx.status is Status.verified and loaded.file_problem(loaded.onnx) is None
    (tmp_path / "model.onnx").write_bytes(b"9876543210")  # same size, other bytes
    assert "model.onnx has sha256" in loaded.file_problem(loaded.onnx)
    assert "was being published" in loaded.file_problem(replace(loaded.onnx, status=Status.pending))
    (tmp_path / "model.onnx").unlink()
    assert loaded.file_problem(loaded.onnx) == "model.onnx is missing"
