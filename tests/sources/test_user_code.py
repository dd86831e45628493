"""`--arch FILE.py:FUNC` and `package.module:FUNC`: the user's own module, and every way it can be wrong, through the
real CLI: one line, a non-zero exit, nothing written."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from tests.conftest import SMALL_ARCH, error_line, run_cli
from tritonize.sources import build_model, resolve_spec

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=8)
        self.fc = nn.Linear(4, classes)

    def forward(self, images):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.conv(images), 1), 1))


def make():
    return Net()
"""


def _write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_s_function_is_the_model(tmp_path):
    _write(tmp_path / "net.py", NET)
    result = run_cli("export", "--arch", f"{tmp_path / 'net.py'}:make", "--format", "onnx", "--max-batch", "3",
                     "--artifacts", tmp_path / "o")
    assert result.exit_code == 0, result.output
    model = json.loads((tmp_path / "o" / "manifest.json").read_text())["model"]
    assert model["source"] == "code" and model["arch"] == f"{tmp_path / 'net.py'}:make"
    assert model["weights_kind"] == "code" and model["num_classes"] == 5
    assert model["model_source"] == f"make() in {tmp_path / 'net.py'}"
    assert model["num_classes_source"] == "the model's output on a batch of input shape [3, 224, 224]"
    assert model["preprocessing_source"].startswith("assumed: ImageNet's")


def test_a_module_s_function_is_imported_from_the_working_directory(tmp_path, monkeypatch):
    """`package.module:FUNC` as `python -m` finds it: the working directory first. A class works as FUNC too, and
    its file imports its neighbours."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    _write(tmp_path / "mypkg" / "nets.py", NET)
    monkeypatch.chdir(tmp_path)
    spec = resolve_spec("mypkg.nets:Net", None)
    assert spec.arch == "mypkg.nets:Net" and spec.num_classes == 5 and spec.model_source == "Net() in module mypkg.nets"
    # Random init under the seed: the same weights each time the model is built.
    first, second = build_model(spec).state_dict(), build_model(spec).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_random_init_is_seeded_and_the_caller_s_generator_untouched():
    torch.manual_seed(99)
    expected = torch.rand(1)
    torch.manual_seed(99)
    build_model(resolve_spec(SMALL_ARCH, "none"))
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize("arch, code, message", [
    ("tf:resnet50", None, "'tf:' is no source (timm:, hf:) and no module named 'tf' can be imported"),
    ("s3://bucket/model:f", None, "unknown source 's3:'"),
    ("{dir}/nope.py:make", None, "nope.py does not exist"),
    ("{dir}/net.py:missing", NET, "has no 'missing'; it has: Net, make"),
    ("{dir}/boom.py:make", "raise RuntimeError('no GPU here')",
     "boom.py raised RuntimeError while being imported: no GPU here"),
    ("{dir}/raises.py:make", "def make():\n    raise ValueError('bad config')",
     "raises.py:make raised ValueError: bad config"),
    ("{dir}/dict.py:make", "def make():\n    return {'weights': 1}",
     "dict.py:make returned a dict, not a torch.nn.Module"),
    ("{dir}/notfunc.py:make", "make = 3", "notfunc.py:make: make is a int, not a function that returns the model"),
    ("{dir}/features.py:make", "import torch\ndef make():\n    return torch.nn.Conv2d(3, 8, 3)",
     "returns shape [2, 8, 222, 222] for a batch of 2, not a batch of logits (batch, classes)"),
    ("{dir}/tuple.py:make", "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                            "        return x.mean((2, 3)), x\ndef make():\n    return M()", "returns a tuple"),
    ("{dir}/mnist.py:make",
     "import torch\ndef make():\n    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))",
     "failed on a batch of input shape [2, 3, 224, 224] (RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
])
def test_bad_code_models_are_one_line(tmp_path, arch, code, message):
    if code is not None:
        _write(tmp_path / arch.split("/")[-1].split(":")[0], code)
    arch = arch.replace("{dir}", str(tmp_path))
    line = error_line(run_cli("export", "--arch", arch, "--weights", "none", "--artifacts", tmp_path / "o"))
    assert message in line, line
    assert not (tmp_path / "o").exists()


def test_an_empty_arch(tmp_path):
    assert "--arch is empty" in error_line(run_cli("export", "--arch", " ", "--artifacts", tmp_path / "o"))
