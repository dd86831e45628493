"""spec.py: the model's description from torchvision, without building the model."""

from __future__ import annotations

import pytest

from tritonize.errors import TritonizeError
from tritonize.sources import resolve_spec
from tritonize.spec import ModelSpec


def test_random_init_keeps_the_default_weights_contract():
    spec = resolve_spec("wide_resnet101_2", "none")
    assert spec.weights_kind == "none" and not spec.pretrained
    # wide_resnet101_2's DEFAULT is IMAGENET1K_V2: resize 232, bilinear, crop 224.
    assert (spec.preprocessing.resize, spec.preprocessing.crop, spec.preprocessing.interpolation) == (232, 224, "bilinear")
    assert spec.input_shape == (3, 224, 224) and spec.num_classes == len(spec.labels) == 1000
    assert "random-init" in spec.notes[0] and "IMAGENET1K_V2" in spec.preprocessing_source


def test_named_weights_choose_their_own_transforms():
    v1 = resolve_spec("wide_resnet101_2", "IMAGENET1K_V1")
    assert v1.weights == "IMAGENET1K_V1" and v1.preprocessing.resize == 256 and v1.pretrained
    assert resolve_spec("wide_resnet101_2", "Wide_ResNet101_2_Weights.IMAGENET1K_V1") == v1
    assert resolve_spec("resnet18").weights == "IMAGENET1K_V1"  # the DEFAULT, without downloading anything


def test_round_trip_through_the_manifest_form():
    spec = resolve_spec("resnet18", "none")
    assert ModelSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("arch, weights, message", [
    ("resnet_nonexistent", "none", "unknown arch 'resnet_nonexistent'"),
    ("resnet18", "IMAGENET9K", "unknown weights 'IMAGENET9K' for resnet18: choose one of IMAGENET1K_V1"),
    ("resnet18", "/nonexistent/ckpt.pth", "checkpoint /nonexistent/ckpt.pth does not exist"),
    ("vgg16", "IMAGENET1K_FEATURES", "weights IMAGENET1K_FEATURES of vgg16 have no categories"),
])
def test_bad_choices_say_what_to_do(arch, weights, message):
    with pytest.raises(TritonizeError, match=message.replace(".", r"\.")):
        resolve_spec(arch, weights)
