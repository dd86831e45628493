"""End to end, the user's own code: `--arch FILE.py:FUNC` for a model that takes exactly 3x160x320 (a linear layer
on its flattened features: no other size runs), with the preprocessing flags and a JSON labels file: export -> repo
build -> the real embedded Triton -> `client classify` prints the labels on every backend and path, `client compare`
finds the backends agreeing. (The 1x28x28 grayscale model from Python: tests/sources/test_docs_example.py.)"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.conftest import error_line, run_cli
from tests.sources.served import classify_everywhere, compare_backends, served

NET = """
import torch
from torch import nn


class Wide(nn.Module):
    \"\"\"Takes 3x160x320 and nothing else: 8x20x40 features, pooled to 8x5x10, flattened into the head.\"\"\"

    def __init__(self, num_classes=4):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 5, stride=8, padding=2), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AvgPool2d(4))
        self.head = nn.Linear(8 * 5 * 10, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def make(num_classes=4):
    return Wide(num_classes)
"""
LABELS = {"0": "road, wet", "1": 'road, "dry"', "2": "snow ❄", "3": "gravel: loose"}


@pytest.fixture(scope="module")
def code_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    (root / "wide.py").write_text(textwrap.dedent(NET))
    (root / "labels.json").write_text(json.dumps(LABELS, ensure_ascii=False), encoding="utf-8")
    result = run_cli("export", "--arch", f"{root / 'wide.py'}:make", "--weights", "none", "--labels",
                     root / "labels.json", "--resize", "180,340", "--crop", "160,320", "--mean", "0.5,0.5,0.5",
                     "--std", "0.25,0.25,0.25", "--max-batch", "4", "--artifacts", root / "build")
    assert result.exit_code == 0, result.output
    with served(root / "build", root / "models") as server:
        yield root, server


def labels() -> list[str]:
    return [LABELS[str(i)] for i in range(len(LABELS))]


def test_the_manifest_carries_the_input_the_user_set(code_model):
    root, _ = code_model
    manifest = json.loads((root / "build" / "manifest.json").read_text())
    model = manifest["model"]
    assert model["input_shape"] == [3, 160, 320] and model["preprocessing"]["resize"] == [180, 340]
    assert model["preprocessing_source"].endswith("set by the user: crop, mean, resize, std")
    assert model["num_classes_source"] == "the model's output on a batch of input shape [3, 160, 320]"
    assert manifest["labels"] == labels() and manifest["artifacts"]["torchscript"]["method"] == "script"


def test_classify_prints_the_labels_on_every_path(code_model):
    root, server = code_model
    classify_everywhere(server, root / "build", labels())


def test_the_backends_agree(code_model):
    compare_backends(code_model[1])


def test_without_the_flags_the_model_is_refused_in_one_line(code_model, tmp_path):
    """The default input (ImageNet's 3x224x224) cannot run it: the line says what failed and what to give."""
    root, _ = code_model
    line = error_line(run_cli("export", "--arch", f"{root / 'wide.py'}:make", "--artifacts", tmp_path / "o"))
    assert "failed on a batch of input shape [2, 3, 224, 224] (RuntimeError: mat1 and mat2 shapes cannot be " in line
    assert line.endswith("is that its input? Give its preprocessing (input size, channels)")
