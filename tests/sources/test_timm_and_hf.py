"""`--arch timm:NAME` and `--arch hf:DIR_OR_ID`: what each source says (input size, preprocessing, labels, classes)
and where the manifest says it came from; a missing extra, a name that does not exist and a model that is not an
image classifier are one line each. The mappings into the preprocessing contract are checked against the
libraries' own transforms on real photos in tests/test_preprocessing_oracles.py."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import error_line, run_cli
from tritonize.errors import TritonizeError
from tritonize.sources import huggingface, resolve_spec, timm_models

# --- timm ------------------------------------------------------------------------------------------------------

def test_timm_resnet10t_takes_176_pixels_bicubic_with_imagenet_labels():
    spec = resolve_spec("timm:resnet10t", "none")
    pre = spec.preprocessing
    assert spec.input_shape == (3, 176, 176) and spec.num_classes == 1000 and spec.source == "timm"
    assert (pre.resize, pre.crop, pre.interpolation) == (201, 176, "bicubic")  # floor(176 / 0.875)
    assert pre.mean == (0.485, 0.456, 0.406) and spec.labels[1] == "goldfish, Carassius auratus"
    assert spec.labels_source == "timm ImageNetInfo('imagenet-1k').label_descriptions()"
    assert spec.preprocessing_source.startswith("timm resolve_data_config(model=resnet10t): input_size=(3, 176, 176)")
    assert spec.model_source == "timm.create_model('resnet10t', num_classes=1000)"


@pytest.mark.parametrize("config, expected", [
    ({"input_size": (3, 224, 224), "crop_pct": 0.9, "crop_mode": "center", "interpolation": "bicubic",
      "mean": (0.5,) * 3, "std": (0.5,) * 3}, {"resize": 248, "crop": 224, "interpolation": "bicubic"}),
    ({"input_size": (3, 160, 320), "crop_pct": 1.0, "crop_mode": "squash", "interpolation": "bilinear",
      "mean": (0.5,) * 3, "std": (0.5,) * 3}, {"resize": (160, 320), "crop": (160, 320)}),
    ({"input_size": (1, 64, 64), "crop_pct": 0.875, "crop_mode": "center", "interpolation": "bilinear",
      "mean": (0.5,), "std": (0.25,)}, {"resize": 73, "crop": 64, "channel_order": "L", "mean": (0.5,)}),
    ({"input_size": (3, 299, 299), "crop_pct": None, "interpolation": "bilinear", "mean": (0.5,) * 3,
      "std": (0.5,) * 3}, {"resize": 341, "crop": 299}),  # timm's defaults: crop_pct 0.875, crop_mode center
])
def test_timm_data_configs_map_into_the_contract(config, expected):
    pre = timm_models.contract(config)
    assert {k: getattr(pre, k) for k in expected} == expected


@pytest.mark.parametrize("config", [
    {"input_size": (3, 160, 320), "crop_pct": 0.875, "crop_mode": "center", "mean": (0.5,) * 3, "std": (0.5,) * 3},
    {"input_size": (3, 224, 224), "crop_pct": 0.875, "crop_mode": "border", "mean": (0.5,) * 3, "std": (0.5,) * 3},
])
def test_timm_geometries_outside_the_contract_are_refused(config):
    with pytest.raises(TritonizeError, match="is not a geometry tritonize serves: give the preprocessing"):
        timm_models.contract(config)


def test_a_timm_name_that_does_not_exist(tmp_path):
    line = error_line(run_cli("export", "--arch", "timm:resnet10z", "--artifacts", tmp_path / "o"))
    assert "unknown timm model 'resnet10z' (close: " in line and "resnet10t" in line
    assert not (tmp_path / "o").exists()


def test_a_timm_checkpoint_s_head_sets_the_classes(tmp_path):
    import timm
    import torch

    torch.manual_seed(5)
    torch.save({"model": timm.create_model("resnet10t", num_classes=4).state_dict()}, tmp_path / "t4.pth")
    spec = resolve_spec("timm:resnet10t", str(tmp_path / "t4.pth"))
    assert spec.num_classes == 4 and spec.labels == ("class 0", "class 1", "class 2", "class 3")
    assert spec.num_classes_source == f"checkpoint {tmp_path / 't4.pth'}: fc.weight [4, 512]"


@pytest.mark.parametrize("arch, module, install", [("timm:resnet10t", "timm", "pip install 'tritonize[timm]'"),
                                                   ("hf:google/vit-base-patch16-224", "transformers",
                                                    "pip install 'tritonize[hf]'")])
def test_a_missing_extra_is_one_line_naming_the_install(tmp_path, monkeypatch, arch, module, install):
    monkeypatch.setitem(sys.modules, module, None)  # what `import timm` meets where it is not installed
    line = error_line(run_cli("export", "--arch", arch, "--artifacts", tmp_path / "o"))
    assert line.endswith(f"which is not installed: {install}")


# --- Hugging Face ------------------------------------------------------------------------------------------------

def save_vit(directory, size: dict, labels: dict | None, processor: dict | None = None, image_size: int = 32,
             channels: int = 3):
    """A tiny ViT image classifier saved with save_pretrained, with its image processor's config."""
    from transformers import AutoModelForImageClassification, ViTConfig, ViTImageProcessor

    config = ViTConfig(image_size=image_size, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, num_channels=channels, num_labels=len(labels or {0: 0, 1: 1}),
                       **({"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if labels else {}))
    AutoModelForImageClassification.from_config(config).save_pretrained(directory)
    ViTImageProcessor(size=size, **(processor or {})).save_pretrained(directory)
    return directory


def test_hf_labels_and_exact_resizing_come_from_its_configs(tmp_path):
    labels = {0: "cat, tabby", 1: 'say "cheese"', 2: "café"}
    save_vit(tmp_path / "vit", {"height": 32, "width": 32}, labels,
             {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 3})
    spec = resolve_spec(f"hf:{tmp_path / 'vit'}", None)
    pre = spec.preprocessing
    assert spec.labels == ("cat, tabby", 'say "cheese"', "café") and spec.num_classes == 3
    assert (pre.resize, pre.crop, pre.interpolation, pre.mean) == ((32, 32), 32, "bicubic", (0.5, 0.5, 0.5))
    assert spec.arch == f"hf:{tmp_path / 'vit'}" and spec.weights_kind == "hf"
    assert spec.labels_source == f"{tmp_path / 'vit'} config.json id2label"
    assert spec.preprocessing_source == f"{tmp_path / 'vit'} preprocessor_config.json (ViTImageProcessor)"


@pytest.mark.parametrize("processor, expected", [
    ({"size": {"shortest_edge": 256}, "do_center_crop": True, "crop_size": {"height": 224, "width": 224}},
     {"resize": 256, "crop": 224}),
    ({"size": {"height": 160, "width": 320}, "do_rescale": False, "do_normalize": False},
     {"resize": (160, 320), "crop": (160, 320), "scale": 1.0, "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}),
    ({"size": 384, "do_center_crop": True, "crop_size": 384, "resample": 1},
     {"resize": 384, "interpolation": "lanczos"}),
])
def test_hf_processor_configs_map_into_the_contract(processor, expected):
    pre = huggingface.contract({"image_mean": [0.5] * 3, "image_std": [0.5] * 3, **processor})
    assert {k: getattr(pre, k) for k in expected} == expected


@pytest.mark.parametrize("processor, message", [
    ({"size": {"shortest_edge": 224}}, "crops nothing"),
    ({"size": {"shortest_edge": 224, "longest_edge": 1333}}, "is not a size tritonize serves"),
    ({"size": {"height": 32, "width": 32}, "crop_pct": 0.875}, "crop_pct goes with size {'shortest_edge': S}, not "
                                                                 "{'height': 32, 'width': 32}"),
    ({"size": {"height": 32, "width": 32}, "do_resize": False}, "does not resize"),
])
def test_hf_processor_settings_outside_the_contract_are_refused(processor, message):
    with pytest.raises(TritonizeError, match=message):
        huggingface.contract(processor)


def test_hf_defaults_labels_are_placeholders_and_a_directory_without_a_processor_says_so(tmp_path):
    save_vit(tmp_path / "vit", {"height": 32, "width": 32}, None)
    (tmp_path / "vit" / "preprocessor_config.json").unlink()
    spec = resolve_spec(f"hf:{tmp_path / 'vit'}", "none", preprocessing={"resize": 36, "crop": 32})
    assert spec.labels == ("class 0", "class 1") and "placeholders" in spec.labels_source
    assert spec.preprocessing_source.startswith(f"{tmp_path / 'vit'} has no image processor config: assumed")
    assert spec.preprocessing_source.endswith("set by the user: crop, resize") and spec.input_shape == (3, 32, 32)


@pytest.mark.parametrize("what, message", [
    ("nothing", "is neither a directory written by save_pretrained nor a hub id that can be downloaded here"),
    ("text model", "BertConfig, which AutoModelForImageClassification does not take: not an image classifier"),
])
def test_hf_bad_sources_are_one_line(tmp_path, what, message):
    where = tmp_path / "model"
    if what == "text model":
        from transformers import BertConfig

        BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                   intermediate_size=8).save_pretrained(where)
    line = error_line(run_cli("export", "--arch", f"hf:{where}", "--artifacts", tmp_path / "o"))
    assert message in line, line
    assert not (tmp_path / "o").exists()


def test_the_manifest_records_the_hf_sources_facts(tmp_path):
    save_vit(tmp_path / "vit", {"height": 32, "width": 32}, {0: "a", 1: "b", 2: "c"})
    result = run_cli("export", "--arch", f"hf:{tmp_path / 'vit'}", "--format", "onnx", "--max-batch", "2",
                     "--artifacts", tmp_path / "o")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["labels"] == ["a", "b", "c"] and manifest["model"]["num_classes_source"].endswith("num_labels")
