"""End to end, the issue's user: torchvision's resnet18 fine-tuned to 10 classes, saved with
`torch.save(model.state_dict(), "ft10.pt")`, with a labels file of awkward names (commas, quotes, a colon, non-ASCII,
leading spaces): export -> repo build -> the real embedded Triton -> `client classify` prints those labels on every
backend and preprocessing path, and `client compare` finds the backends agreeing."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.sources.served import classify_everywhere, compare_backends, served

LABELS = ["tabby, cat", 'the "cheese" plate', "café crème", "naïve:colon:label", "日本の猫",
          "  two leading spaces", "back\\slash", "'single quoted'", "fish 🐟", "plain"]


@pytest.fixture(scope="module")
def ft10(tmp_path_factory):
    import torch
    import torchvision

    root = tmp_path_factory.mktemp("ft10")
    torch.manual_seed(10)
    model = torchvision.models.resnet18(weights=None)
    model.fc = torch.nn.Linear(model.fc.in_features, 10)
    torch.save(model.state_dict(), root / "ft10.pt")
    (root / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    result = run_cli("export", "--arch", "resnet18", "--weights", root / "ft10.pt", "--labels", root / "labels.txt",
                     "--max-batch", "4", "--artifacts", root / "build")
    assert result.exit_code == 0, result.output
    with served(root / "build", root / "models") as server:
        yield root, server


def test_the_manifest_says_where_each_fact_came_from(ft10):
    root, _ = ft10
    manifest = json.loads((root / "build" / "manifest.json").read_text())
    model = manifest["model"]
    assert manifest["labels"] == LABELS and model["labels_source"] == f"--labels {root / 'labels.txt'}"
    assert model["num_classes"] == 10
    assert model["num_classes_source"] == f"checkpoint {root / 'ft10.pt'}: fc.weight [10, 512]"
    assert model["source"] == "torchvision" and model["weights_kind"] == "checkpoint"
    assert model["preprocessing_source"] == "torchvision ResNet18_Weights.IMAGENET1K_V1.transforms()"
    assert (root / "models" / "onnx_model" / "labels.txt").read_text(encoding="utf-8") == "\n".join(LABELS) + "\n"


def test_classify_prints_the_user_s_labels_on_every_path(ft10):
    root, server = ft10
    classify_everywhere(server, root / "build", LABELS)


def test_the_backends_agree(ft10):
    compare_backends(ft10[1])
