"""config.py: every config `repo build` generates, whole, for hand-made manifest entries, against the reviewed
copy in tests/golden/configs.json (TRITONIZE_UPDATE_GOLDEN=1 rewrites it; review the diff). That Triton loads
these configs is tested by serving them (tests/serve, tests/client)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from tests.conftest import plan_entry
from tests.golden import Golden
from tritonize.manifest import ExportedArtifact, FileRef, Gate, PrecisionVariant, ServingGates, Status
from tritonize.model_repository import BACKENDS, PREPROCESSORS, parse_config
from tritonize.repository_builder.config import config_text, ensemble_config, model_config, preprocessor_config
from tritonize.repository_builder.options import RepoOptions
from tritonize.sources import resolve_spec
from tritonize.verify import verify_runner

CONFIGS = Golden("configs")
SHA = "ab" * 32


@cache
def spec():
    """resnet18's spec, resolved when a test needs it: resolving imports torchvision (seconds), which every worker
    would otherwise pay at collection."""
    return resolve_spec("resnet18", "none")


OPTIONS = RepoOptions(preferred=(4, 8, 16, 32), queue_delay_us=250, instances=2)


def _report():
    """Verified at batches 1, 7 and 32: `repo build` serves these at most at batch 32 (the plan at its profile max)."""
    ref = np.eye(32, 10)
    return verify_runner(lambda b: ref[: len(b)], np.zeros((32, 1)), ref)


ONNX = ExportedArtifact(status=Status.verified, format="onnx", file="model.onnx", size_bytes=1, sha256="0" * 64,
                        input_name="input", output_name="output", verification=_report(), options={},
                        created="2026-01-01T00:00:00+00:00")
TORCHSCRIPT = replace(ONNX, format="torchscript", file="model.pt", input_name="input__0", output_name="output__0")
PLAN = plan_entry(profile={"min": 1, "opt": 8, "max": 16}, tensorrt_version="10.3.0.26", triton_release="24.08",
                  version_compatible=True)
INT8_CPU = PrecisionVariant(
    status=Status.verified, precision="int8", file="model_int8_cpu.onnx", size_bytes=1, sha256="1" * 64,
    input_name="input", output_name="output", verification=_report(), source=FileRef("model.onnx", "0" * 64),
    inputs={}, created="2026-01-01T00:00:00+00:00",
    cpu_serving=ServingGates(agreement=Gate(True, "top-1 99.0% >= 98%"), speed=Gate(True, "1.9x FP32 >= 1.2x"),
                             fp32=FileRef("model.onnx", "0" * 64), settings={}, measured="2026-01-01T00:00:00+00:00"))
ENTRIES = {"onnx_model": ONNX, "torch_model": TORCHSCRIPT, "trt_model": PLAN, "onnx_int8_model": INT8_CPU}


@pytest.mark.parametrize("name", ENTRIES)
@pytest.mark.parametrize("kind", ["auto", "cpu", "gpu"])
def test_each_backends_config(name, kind):
    cfg = model_config(BACKENDS[name], spec(), ENTRIES[name], OPTIONS, kind, SHA)
    CONFIGS.check(config_text(cfg, "Generated for a test.\n\nA second paragraph.").splitlines())


def test_without_warmup_and_with_one_preferred_size():
    options = RepoOptions(max_batch=8, preferred=(4, 16), warmup=False)
    CONFIGS.check(config_text(model_config(BACKENDS["onnx_model"], spec(), ONNX, options, "cpu", SHA)).splitlines())


@pytest.mark.parametrize("pre", PREPROCESSORS, ids=lambda p: p.name)
def test_preprocessing_models_and_their_ensembles(pre):
    pre_cfg = preprocessor_config(pre, spec(), 32, OPTIONS, SHA)
    CONFIGS.check(config_text(pre_cfg).splitlines())
    for name in ("onnx_model", "trt_model"):  # trt_model's plan caps the ensemble at its profile max
        classifier = model_config(BACKENDS[name], spec(), ENTRIES[name], OPTIONS, "gpu", SHA)
        CONFIGS.check(config_text(ensemble_config(pre.ensemble(BACKENDS[name]), pre_cfg, classifier, spec(), SHA)).splitlines())


def test_the_text_parses_back_to_the_same_message(tmp_path):
    cfg = model_config(BACKENDS["trt_model"], spec(), PLAN, OPTIONS, "gpu", SHA)
    path = tmp_path / "config.pbtxt"
    path.write_text(config_text(cfg, "a header"))
    assert parse_config(path) == cfg


def test_a_plan_whose_tensorrt_version_is_unknown_says_so_with_an_empty_parameter():
    cfg = model_config(BACKENDS["trt_model"], spec(), replace(PLAN, tensorrt_version=None), OPTIONS, "gpu", SHA)
    assert cfg.parameters["source.tensorrt_version"].string_value == ""
