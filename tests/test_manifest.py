"""manifest.py: the typed schema round-trips, refuses what it cannot read, and stays a flat JSON file."""

from __future__ import annotations

import json

import pytest

from tests.conftest import plan_entry
from tritonize.errors import TritonizeError
from tritonize.manifest import SCHEMA_VERSION, ExportedArtifact, Manifest, Plan, Status, manifest_path
from tritonize.spec import resolve_spec
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
