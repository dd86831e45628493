"""End to end, a Hugging Face image classifier from a local directory (a tiny ViT saved with save_pretrained, 3
labels with a comma, quotes and an accent, an image processor that resizes to exactly 32x32 bicubic): export ->
repo build -> the real embedded Triton -> `client classify` prints its labels on every backend and path, and
`client compare` finds the backends agreeing. TorchScript by tracing (transformers' models do not script)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.sources.served import classify_everywhere, compare_backends, served
from tests.sources.test_timm_and_hf import save_vit

LABELS = {0: "cat, tabby", 1: 'say "cheese"', 2: "café"}


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    save_vit(root / "vit", {"height": 32, "width": 32}, LABELS,
             {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 3})
    result = run_cli("export", "--arch", f"hf:{root / 'vit'}", "--max-batch", "4", "--artifacts", root / "build")
    assert result.exit_code == 0, result.output
    with served(root / "build", root / "models") as server:
        yield root, server


def test_the_manifest_carries_the_processor_s_exact_resize_and_the_labels(hf_model):
    root, _ = hf_model
    manifest = json.loads((root / "build" / "manifest.json").read_text())
    model = manifest["model"]
    assert model["preprocessing"]["resize"] == [32, 32] and model["preprocessing"]["crop"] == 32
    assert manifest["labels"] == list(LABELS.values()) and model["source"] == "hf"
    assert manifest["artifacts"]["torchscript"]["method"] == "trace"  # scripting fails on transformers' models
    assert manifest["artifacts"]["onnx"]["status"] == "verified"


def test_classify_prints_the_labels_on_every_path(hf_model):
    root, server = hf_model
    classify_everywhere(server, root / "build", list(LABELS.values()))


def test_the_backends_agree(hf_model):
    compare_backends(hf_model[1])
