"""The contract applied by tritonize (Pillow and numpy) against the source libraries' own transforms, on real photos
(tests/data/photos, matplotlib's grace_hopper.jpg). torchvision's transforms on a PIL image are the oracle of every
geometry: the same Pillow calls, so the inputs agree to float rounding. Its tensor path (uint8 tensors, antialiased
resize in torch) is another implementation; how far it is from Pillow's is measured and bounded here, and written in
docs/preprocessing.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tritonize.images import load_rgb
from tritonize.preprocessing import Preprocessing

PHOTOS = sorted((Path(__file__).parent / "data" / "photos").glob("*.jpg"))
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
CONTRACTS = {
    "shorter side, square crop (torchvision ImageNet)": Preprocessing(256, 224, **IMAGENET),
    "shorter side, bicubic, 299 (inception)": Preprocessing(342, 299, **IMAGENET, interpolation="bicubic"),
    "shorter side, non-square crop": Preprocessing(200, (160, 192), **IMAGENET),
    "exact HxW, no crop (Hugging Face ViT)": Preprocessing((224, 224), 224, (0.5,) * 3, (0.5,) * 3),
    "exact non-square HxW then crop": Preprocessing((180, 340), (160, 320), **IMAGENET, interpolation="bicubic"),
    "grayscale 28x28 (MNIST-like)": Preprocessing((28, 28), 28, (0.1307,), (0.3081,), channel_order="L"),
    "BGR, NHWC": Preprocessing(256, 224, **IMAGENET, channel_order="BGR", layout="NHWC"),
}


def photos() -> list[Path]:
    import matplotlib.cbook

    return [*PHOTOS, Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))]


def torchvision_transform(contract: Preprocessing, tensor_path: bool = False):
    """The torchvision pipeline a user would write for this contract."""
    import torch
    from torchvision import transforms as T

    mode = T.InterpolationMode(contract.interpolation)
    steps = [T.Grayscale()] if contract.channel_order == "L" else []
    if tensor_path:
        steps.append(T.PILToTensor())  # uint8 CHW: the resize runs in torch
    steps += [T.Resize(contract.resize, interpolation=mode, antialias=contract.antialias), T.CenterCrop(contract.crop)]
    steps += [T.ConvertImageDtype(torch.float32)] if tensor_path else [T.ToTensor()]
    steps.append(T.Normalize(contract.mean, contract.std))
    pipeline = T.Compose(steps)

    def run(image: Image.Image) -> np.ndarray:
        x = pipeline(image).numpy()
        if contract.channel_order == "BGR":
            x = x[::-1]
        return np.moveaxis(x, 0, -1) if contract.layout == "NHWC" else x

    return run


def test_there_are_enough_real_photos_of_both_orientations_and_a_grayscale_one():
    sizes = [Image.open(p).size for p in photos()]
    assert len(sizes) >= 6
    assert any(w > h for w, h in sizes) and any(w < h for w, h in sizes)
    assert any(Image.open(p).mode == "L" for p in photos())


@pytest.mark.parametrize("name", CONTRACTS)
def test_tritonize_gives_what_torchvision_gives_on_pil_images(name):
    contract = CONTRACTS[name]
    oracle = torchvision_transform(contract)
    for photo in photos():
        image = load_rgb(photo)
        ours, theirs = contract(image), oracle(image)
        assert ours.shape == theirs.shape == contract.input_shape, photo.name
        # The same Pillow resize and crop, the same float32 arithmetic: equal (measured: 0.0 on every photo).
        assert np.abs(ours - theirs).max() < 1e-6, (photo.name, np.abs(ours - theirs).max())


# Measured on these photos (torchvision 0.29, Pillow 13): the tensor path's antialiased resize differs from Pillow's
# by at most 0.018 in normalized units with bilinear (about one uint8 level) and 0.154 with bicubic (its overshoot
# is clamped at another step: up to 9 levels on sharp edges); 0.0034 at most on average over an image.
TENSOR_PATH_MAX, TENSOR_PATH_MEAN = 0.2, 0.005


@pytest.mark.parametrize("name", CONTRACTS)
def test_torchvisions_tensor_path_is_close_to_pillows_and_the_gap_is_bounded(name):
    contract = CONTRACTS[name]
    oracle = torchvision_transform(contract, tensor_path=True)
    gaps = []
    for photo in photos():
        image = load_rgb(photo)
        diff = np.abs(contract(image) - oracle(image))
        gaps.append((diff.max(), diff.mean()))
    assert max(g[0] for g in gaps) < TENSOR_PATH_MAX, gaps
    assert max(g[1] for g in gaps) < TENSOR_PATH_MEAN, gaps
    assert max(g[0] for g in gaps) > 1e-3  # a different implementation: were it equal, the test above would be the one


# -- timm: its own eval transform, from its own data config ------------------------------------------------------
# Models whose configs differ: input size, crop_pct, interpolation, mean/std.
TIMM_MODELS = ("resnet10t", "vit_tiny_patch16_224", "inception_v3", "convnext_atto", "deit_tiny_patch16_224")


@pytest.mark.parametrize("name", TIMM_MODELS)
def test_tritonize_gives_what_timms_create_transform_gives(name):
    pytest.importorskip("timm", reason="timm is an optional extra (pip install 'tritonize[timm]')")
    import timm.data
    import torch

    from tritonize.sources.timm_models import contract

    with torch.device("meta"):  # the config only: no weights
        model = timm.create_model(name, pretrained=False)
    config = timm.data.resolve_data_config({}, model=model)
    ours, theirs = contract(config), timm.data.create_transform(**config)
    for photo in photos():
        image = load_rgb(photo)
        expected = theirs(image).numpy()
        assert ours(image).shape == expected.shape == ours.input_shape, (name, photo.name)
        assert np.abs(ours(image) - expected).max() < 1e-6, (name, photo.name, config)


# -- Hugging Face: the image processor, in both of its backends --------------------------------------------------
HF_PROCESSORS = {  # the settings of common checkpoints' preprocessor_config.json
    "ViT (exact 224x224)": ("ViTImageProcessor", dict(size={"height": 224, "width": 224})),
    "DeiT (256x256, crop 224, bicubic)": ("DeiTImageProcessor", dict(size={"height": 256, "width": 256},
                                          crop_size={"height": 224, "width": 224}, do_center_crop=True, resample=3)),
    "CLIP (shortest edge 224, crop 224)": ("CLIPImageProcessor", dict(size={"shortest_edge": 224},
                                           crop_size={"height": 224, "width": 224})),
    "BiT (shortest edge 256, crop 224)": ("BitImageProcessor", dict(size={"shortest_edge": 256},
                                          crop_size={"height": 224, "width": 224})),
    "ConvNext (crop_pct 0.875)": ("ConvNextImageProcessor", dict(size={"shortest_edge": 224}, crop_pct=0.875)),
    "ConvNext (384, warped)": ("ConvNextImageProcessor", dict(size={"shortest_edge": 384})),
}
# transformers' default backend resizes in torch (antialiased), another implementation than Pillow: measured on these
# photos (transformers 5.24) at most 0.055 (ConvNext's bicubic warp up to 384: about 3 uint8 levels on edges), 0.008
# to 0.031 for the others, and 0.0006 at most on average over an image. Its Pil backend gives our tensors exactly.
HF_TORCH_MAX, HF_TORCH_MEAN = 0.08, 0.002


@pytest.mark.parametrize("backend", ["Pil", "torchvision"])
@pytest.mark.parametrize("name", HF_PROCESSORS)
def test_tritonize_gives_what_the_hugging_face_image_processor_gives(name, backend):
    transformers = pytest.importorskip("transformers", reason="transformers is an optional extra (pip install "
                                                              "'tritonize[hf]')")
    from tritonize.sources.huggingface import contract

    cls, settings = HF_PROCESSORS[name]
    processor = getattr(transformers, cls + ("Pil" if backend == "Pil" else ""))(**settings)
    ours = contract(processor.to_dict())
    gaps = []
    for photo in photos():
        image = load_rgb(photo)
        expected = processor(images=image, return_tensors="np")["pixel_values"][0]
        assert ours(image).shape == expected.shape == ours.input_shape, (name, photo.name)
        gaps.append(np.abs(ours(image) - expected))
    if backend == "Pil":  # the same Pillow resize, its crop offsets: equal to float rounding
        assert max(g.max() for g in gaps) < 1e-5, name
    else:
        assert max(g.max() for g in gaps) < HF_TORCH_MAX and max(g.mean() for g in gaps) < HF_TORCH_MEAN, name


def test_an_odd_crop_margin_is_split_as_each_library_splits_it():
    """rocket.jpg, 640x427, resized to 256 on its shorter side is 383 wide: a margin of 159 around a 224 crop.
    torchvision (and timm) start the crop at round(79.5) = 80, Hugging Face at 159 // 2 = 79: each contract follows
    its library, so a Hugging Face model gets the pixels it was trained on."""
    from torchvision import transforms as T

    rocket = load_rgb(PHOTOS[0].parent / "rocket.jpg")
    torchvision_like = Preprocessing(256, 224, **IMAGENET)
    hf_like = torchvision_like.replace(crop_offset="floor")
    resized = rocket.resize(torchvision_like.resized_size(*rocket.size), Image.BILINEAR)
    assert resized.size == (383, 256)
    assert (torchvision_like.crop_pixels(rocket) == np.asarray(T.CenterCrop(224)(resized))).all()
    assert (hf_like.crop_pixels(rocket) == np.asarray(resized.crop((79, 16, 303, 240)))).all()
    assert not (hf_like.crop_pixels(rocket) == torchvision_like.crop_pixels(rocket)).all()
