"""`--weights PATH` in the forms people save: a plain state_dict, Lightning's {"state_dict": ...} with its prefix,
DDP's `module.`, .safetensors; the head's shape sets the number of classes; anything else that differs is one line
naming the keys; a whole pickled model is refused without being unpickled. Through the real CLI, on real
torchvision models and the suite's own classifier."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision

from tests.conftest import SMALL_ARCH, error_line, run_cli
from tests.suite_model import SuiteClassifier
from tritonize.errors import TritonizeError
from tritonize.sources import build_model, checkpoints, resolve_spec


def _fine_tuned(classes: int = 10, seed: int = 7) -> dict:
    """resnet18 with a new head, as a fine-tuning script leaves it."""
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(weights=None)
    model.fc = torch.nn.Linear(model.fc.in_features, classes)
    return model.state_dict()


def test_a_resnet18_fine_tuned_to_10_classes_exports_with_10_placeholder_labels(tmp_path):
    """The issue's opening example: `torch.save(model.state_dict(), "ft10.pt")`, then `tritonize export --arch
    resnet18 --weights ft10.pt` (it said `size mismatch for fc.weight` before)."""
    state = _fine_tuned()
    torch.save(state, tmp_path / "ft10.pt")
    result = run_cli("export", "--arch", "resnet18", "--weights", tmp_path / "ft10.pt", "--format", "torchscript",
                     "--max-batch", "2", "--artifacts", tmp_path / "build")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
    model = manifest["model"]
    assert model["num_classes"] == 10 and model["input_shape"] == [3, 224, 224]
    assert model["num_classes_source"] == f"checkpoint {tmp_path / 'ft10.pt'}: fc.weight [10, 512]"
    assert manifest["labels"] == [f"class {i}" for i in range(10)] and "placeholders" in model["labels_source"]
    loaded = torch.jit.load(str(tmp_path / "build" / "model.pt"))
    x = torch.randn(2, 3, 224, 224)
    reference = torchvision.models.resnet18(num_classes=10).eval()
    reference.load_state_dict(state)
    with torch.inference_mode():
        assert torch.allclose(loaded(x), reference(x), atol=1e-4)  # the checkpoint's weights, not a random init


@pytest.mark.parametrize("form", ["lightning", "ddp", "lightning+ddp", "model key", "safetensors"])
def test_checkpoint_forms_load_the_same_weights(tmp_path, form):
    state = _fine_tuned(classes=4)
    if form == "lightning":  # LightningModule with `self.model = resnet18(...)`, and a loss with weights of its own
        saved = {"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.4.0",
                 "state_dict": {**{f"model.{k}": v for k, v in state.items()}, "criterion.weight": torch.ones(4)}}
    elif form == "ddp":
        saved = {f"module.{k}": v for k, v in state.items()}
    elif form == "lightning+ddp":
        saved = {"state_dict": {f"model.module.{k}": v for k, v in state.items()}}
    elif form == "model key":  # timm's and DeiT's training scripts
        saved = {"model": state, "optimizer": {"lr": torch.tensor(0.1)}, "epoch": 9}
    path = tmp_path / ("ckpt.safetensors" if form == "safetensors" else "ckpt.pt")
    if form == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(saved, path)
    spec = resolve_spec("resnet18", str(path))
    assert spec.num_classes == 4 and spec.weights_kind == "checkpoint"
    loaded = build_model(spec).state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)


def test_a_whole_pickled_model_is_refused_without_unpickling(tmp_path):
    torch.save(torchvision.models.resnet18(weights=None), tmp_path / "whole.pt")  # torch.save(model)
    line = error_line(run_cli("export", "--arch", "resnet18", "--weights", tmp_path / "whole.pt", "--artifacts",
                              tmp_path / "o"))
    assert "holds pickled Python objects (torch" in line and "a whole model saved with torch.save(model)?" in line
    assert "unpickling runs code" in line
    assert f"torch.save(model.state_dict(), '{tmp_path / 'whole.pt'}')" in line
    assert not (tmp_path / "o").exists()


def test_another_mismatch_names_the_first_keys_that_differ(tmp_path):
    state = _fine_tuned()
    state["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
    del state["bn1.running_var"]
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "bad.pt")
    line = error_line(run_cli("export", "--arch", "resnet18", "--weights", tmp_path / "bad.pt", "--artifacts",
                              tmp_path / "o"))
    assert line == (f"error: checkpoint {tmp_path / 'bad.pt'} does not match resnet18: shapes differ for "
                    "layer1.0.conv1.weight (checkpoint [64, 64, 1, 1], model [64, 64, 3, 3]), fc.weight (checkpoint "
                    "[10, 512], model [1000, 512]), fc.bias (checkpoint [10], model [1000]); missing from the "
                    "checkpoint: bn1.running_var; not in the model: extra.weight")
    assert not (tmp_path / "o").exists()


def test_not_a_state_dict_says_what_it_holds(tmp_path):
    torch.save({"epoch": 3, "optimizer": {"lr": 0.1}}, tmp_path / "opt.pt")
    with pytest.raises(TritonizeError, match=r"holds a dict with keys epoch, optimizer, none of them a state_dict"):
        checkpoints.read_state_dict(tmp_path / "opt.pt")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(TritonizeError, match=r"cannot read checkpoint .*bad.safetensors"):
        checkpoints.read_state_dict(tmp_path / "bad.safetensors")


def test_head_classes_only_when_the_head_alone_differs():
    model = {"fc.weight": (1000, 512), "fc.bias": (1000,), "conv.weight": (64, 3, 7, 7)}
    head = {"fc.weight": torch.zeros(10, 512), "fc.bias": torch.zeros(10), "conv.weight": torch.zeros(64, 3, 7, 7)}
    assert checkpoints.head_classes(head, model, 1000) == (10, "fc.weight")
    assert checkpoints.head_classes({**head, "conv.weight": torch.zeros(32, 3, 7, 7)}, model, 1000) is None
    assert checkpoints.head_classes({**head, "fc.bias": torch.zeros(11)}, model, 1000) is None
    assert checkpoints.head_classes({**head, "fc.weight": torch.zeros(10, 256)}, model, 1000) is None
    assert checkpoints.head_classes({k: torch.zeros(s) for k, s in model.items()}, model, 1000) is None


def test_a_code_models_checkpoint_head_sets_its_classes_through_num_classes(tmp_path):
    """FUNC(num_classes=N) makes the checkpoint's head; the suite's classifier takes num_classes."""
    torch.manual_seed(3)
    state = SuiteClassifier(num_classes=7).state_dict()
    torch.save({"state_dict": {f"net.{k}": v for k, v in state.items()}}, tmp_path / "seven.ckpt")
    spec = resolve_spec(SMALL_ARCH, str(tmp_path / "seven.ckpt"))
    assert spec.num_classes == 7 and spec.num_classes_source.endswith("fc.weight [7, 8]")
    assert all(torch.equal(build_model(spec).state_dict()[k], v) for k, v in state.items())


def test_a_code_model_whose_func_takes_no_num_classes_says_what_would_make_the_head(tmp_path):
    (tmp_path / "fixed.py").write_text("from tests.suite_model import SuiteClassifier\n\n\ndef make():\n"
                                       "    return SuiteClassifier()\n")
    torch.save(SuiteClassifier(num_classes=7).state_dict(), tmp_path / "seven.pt")
    with pytest.raises(TritonizeError) as refused:
        resolve_spec(f"{tmp_path / 'fixed.py'}:make", str(tmp_path / "seven.pt"))
    assert str(refused.value) == (f"checkpoint {tmp_path / 'seven.pt'} does not match {tmp_path / 'fixed.py'}:make "
                                  "(FUNC could make its 7-class head if it took num_classes=N): shapes differ for "
                                  "fc.weight (checkpoint [7, 8], model [1000, 8]), fc.bias (checkpoint [7], model "
                                  "[1000])")
