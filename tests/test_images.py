"""Image decoding and preprocessing, checked against torchvision's own transforms (no server needed)."""

from __future__ import annotations

import io
import struct
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

from tritonize.errors import TritonizeError
from tritonize.images import BadImage, batches, decode_rgb, load_images, load_rgb
from tritonize.preprocessing import Preprocessing

PHOTO = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)


def contract_of(weights) -> Preprocessing:
    """The contract as the repository builder writes it: string parameters from the weights' transforms."""
    t = weights.transforms()
    params = {
        "preprocess.resize": str(t.resize_size[0]),
        "preprocess.crop": str(t.crop_size[0]),
        "preprocess.mean": ",".join(str(v) for v in t.mean),
        "preprocess.std": ",".join(str(v) for v in t.std),
        "preprocess.interpolation": t.interpolation.value,
        "preprocess.antialias": str(t.antialias),
        "preprocess.channel_order": "RGB",
        "preprocess.layout": "NCHW",
        "preprocess.scale": str(1 / 255),
    }
    return Preprocessing.from_parameters(params)


@pytest.mark.parametrize("arch,weights", [("resnet18", "IMAGENET1K_V1"), ("wide_resnet101_2", "IMAGENET1K_V1"), ("wide_resnet101_2", "IMAGENET1K_V2")])
def test_preprocessing_matches_the_weights_transforms_on_a_real_photo(arch, weights):
    import torch
    import torchvision
    from torchvision.transforms import v2

    w = torchvision.models.get_model_weights(arch)[weights]
    t = w.transforms()
    pre = contract_of(w)
    assert pre.resize == (232 if weights == "IMAGENET1K_V2" else 256)
    ours = pre(load_rgb(PHOTO))
    photo = Image.open(PHOTO).convert("RGB")
    reference = t(photo).numpy()
    pipeline_v2 = v2.Compose([
        v2.Resize(t.resize_size, interpolation=t.interpolation, antialias=True), v2.CenterCrop(t.crop_size),
        v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(t.mean, t.std),
    ])
    assert ours.shape == (3, 224, 224) and ours.dtype == np.float32
    assert np.abs(ours - reference).max() < 1e-5
    assert np.abs(ours - pipeline_v2(photo).numpy()).max() < 1e-5
    # The famous mistake (mean used as the std) would be far off: the check above can fail.
    wrong = Preprocessing(pre.resize, pre.crop, pre.mean, pre.mean, pre.interpolation)(load_rgb(PHOTO))
    assert np.abs(wrong - reference).max() > 0.1


def _presets() -> dict[str, tuple[str, str]]:
    """One (arch, weights) per distinct preprocessing among the torchvision classification weights the tool
    takes (every arch of torchvision.models; weights without categories are refused), named by its first."""
    import torchvision

    from tritonize.sources.torchvision_models import classification_archs

    found = {}
    for arch in classification_archs():
        for w in torchvision.models.get_model_weights(arch):
            t = w.transforms()
            key = (tuple(t.resize_size), tuple(t.crop_size), t.interpolation, tuple(t.mean), tuple(t.std), t.antialias)
            if w.meta.get("categories") and key not in found:
                found[key] = (arch, w.name)
    return {f"{arch}.{weights}": (arch, weights) for arch, weights in found.values()}


PRESETS = _presets()


def _textured(width: int, height: int):
    """Gradients under fine noise: any misplaced resize or crop changes the pixels."""
    rng = np.random.default_rng(width * height)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // width, yy * 255 // height, (xx + yy) % 256], -1)
    return Image.fromarray(np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8), "RGB")


# 613 and 409 are primes: no resize in the table (224..600) divides into 613/409 exactly, so the long side's
# rounding down matters; the square image makes the crop's offset round (an odd resize - crop, e.g. 255 - 240).
@pytest.mark.parametrize("size", [(613, 409), (409, 409)], ids=["wide", "square"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_weights_preset_matches_torchvision_on_wide_and_square_images(preset, size):
    import torchvision

    from tritonize.sources import resolve_spec

    arch, weights = PRESETS[preset]
    pre = resolve_spec(arch, weights).preprocessing  # what the manifest and every config.pbtxt carry
    # first: a wrong size (e.g. long * short) would make the resize below allocate gigabytes
    assert pre.resized_size(*size) == ((int(pre.resize * 613 / 409), pre.resize) if size[0] == 613 else (pre.resize,) * 2)
    image = _textured(*size)
    reference = torchvision.models.get_model_weights(arch)[weights].transforms()(image).numpy()
    ours = pre(image)
    assert ours.shape == reference.shape == (3, pre.crop, pre.crop)
    assert np.abs(ours - reference).max() <= 1e-6 * max(1.0, np.abs(reference).max())


def test_the_presets_cover_the_contracts_that_differ():
    """The table is torchvision's, not a hand-picked list: resizes, crops, both filters, other means and stds."""
    from tritonize.sources import resolve_spec

    contracts = [resolve_spec(*PRESETS[p]).preprocessing for p in PRESETS]
    assert len(contracts) >= 20 and {c.interpolation for c in contracts} == {"bilinear", "bicubic"}
    assert {c.resize for c in contracts} >= {224, 232, 256, 342, 518, 600} and any(c.mean != contracts[0].mean for c in contracts)


def test_resize_232_and_256_give_different_inputs():
    base = dict(crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    image = load_rgb(PHOTO)
    assert np.abs(Preprocessing(resize=232, **base)(image) - Preprocessing(resize=256, **base)(image)).max() > 0.1


def test_contract_errors_are_one_clear_line():
    with pytest.raises(TritonizeError, match="no preprocessing contract.*preprocess.std.*tritonize repo build"):
        Preprocessing.from_parameters({"preprocess.resize": "256", "preprocess.crop": "224", "preprocess.mean": "0,0,0"}, "onnx_model")
    with pytest.raises(TritonizeError, match="unreadable preprocessing contract"):
        Preprocessing.from_parameters({"preprocess.resize": "big", "preprocess.crop": "224", "preprocess.mean": "0,0,0", "preprocess.std": "1,1,1"})
    with pytest.raises(TritonizeError, match="unknown interpolation"):
        Preprocessing(256, 224, (0, 0, 0), (1, 1, 1), interpolation="fancy")
    with pytest.raises(TritonizeError, match="crop"):
        Preprocessing(200, 224, (0, 0, 0), (1, 1, 1))


def test_bgr_and_nhwc_follow_the_contract():
    image = load_rgb(PHOTO)
    rgb = Preprocessing(256, 224, (0.5, 0.4, 0.3), (0.2, 0.2, 0.2))(image)
    bgr_nhwc = Preprocessing(256, 224, (0.5, 0.4, 0.3), (0.2, 0.2, 0.2), channel_order="BGR", layout="NHWC")(image)
    assert bgr_nhwc.shape == (224, 224, 3)
    np.testing.assert_array_equal(bgr_nhwc[..., ::-1].transpose(2, 0, 1), rgb)


@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "YCbCr", "I;16", "I", "F"])
def test_every_pillow_mode_becomes_rgb(tmp_path, mode):
    rng = np.random.default_rng(0)
    source = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), "RGB")
    image = source.convert(mode) if mode not in ("I;16", "I", "F") else source.convert("L").convert(mode)
    suffix = {"CMYK": ".jpg", "YCbCr": ".jpg", "F": ".tiff", "I": ".tiff"}.get(mode, ".png")
    path = tmp_path / f"img{suffix}"
    image.save(path)
    rgb = load_rgb(path)
    assert rgb.mode == "RGB" and rgb.size == (64, 48)
    x = Preprocessing(32, 32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))(rgb)
    assert x.shape == (3, 32, 32) and np.isfinite(x).all()


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    ramp = np.linspace(0, 65535, 64 * 32).reshape(32, 64).astype(np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(ramp).save(path)
    rgb = np.asarray(load_rgb(path))
    expected = np.rint(ramp / 257.0).astype(np.uint8)
    np.testing.assert_array_equal(rgb[..., 0], expected)
    assert 100 < rgb.mean() < 155  # Pillow's convert("RGB") would clip nearly everything to 255


def test_exif_orientation_is_applied(tmp_path):
    image = Image.new("RGB", (40, 20), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 10, 20))  # a blue band on the left
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    path = tmp_path / "rotated.jpg"
    image.save(path, exif=exif.tobytes(), quality=95)
    shown = load_rgb(path)
    assert shown.size == (20, 40)
    top = np.asarray(shown)[:5].mean(axis=(0, 1))
    assert top[2] > 200 and top[0] < 60  # the left band is now on top


def bad_files(tmp_path):
    """Each bad input kind, named after what must appear in its one-line message."""
    good = tmp_path / "good.jpg"
    Image.open(PHOTO).save(good)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(good.read_bytes()[:4000])
    text = tmp_path / "notes.jpg"
    text.write_text("this is not an image\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)  # 144 Mpx in 17 kB
    huge = tmp_path / "huge.png"
    Image.new("1", (20000, 20000)).save(huge)  # beyond twice Pillow's default: Pillow itself refuses it
    return good, {
        empty: "empty file", truncated: "truncated or corrupt", text: "not an image",
        folder: "is a directory", bomb: "decompression bomb", huge: "decompression bomb",
        tmp_path / "missing.jpg": "no such file",
    }


def test_each_bad_input_gives_one_line_and_the_good_files_are_processed(tmp_path):
    good, bad = bad_files(tmp_path)
    paths = [good, *bad, good]
    loaded = load_images(paths, Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
    assert loaded.names == [str(good), str(good)] and len(loaded.arrays) == 2
    assert len(loaded.failures) == len(bad)
    for line, (path, expected) in zip(loaded.failures, bad.items()):
        assert "\n" not in line and line.startswith(str(path)) and expected in line, line


def test_bytes_decode_as_files_do_with_the_same_reasons(tmp_path):
    """What the server's preprocess model decodes (request bytes) and what the client decodes (files) go
    through one function: same pixels, same one-line reasons, only the name in front differs."""
    good, bad = bad_files(tmp_path)
    np.testing.assert_array_equal(np.asarray(decode_rgb(good.read_bytes(), "IMAGE[0]")), np.asarray(load_rgb(good)))
    for path in (p for p in bad if p.is_file()):
        with pytest.raises(BadImage) as from_file:
            load_rgb(path)
        with pytest.raises(BadImage) as from_bytes:
            decode_rgb(path.read_bytes(), "IMAGE[3]")
        assert str(from_bytes.value) == str(from_file.value).replace(str(path), "IMAGE[3]", 1)


@pytest.mark.parametrize("channel_order,layout", [("RGB", "NCHW"), ("BGR", "NHWC")])
def test_uint8_half_then_normalize_is_the_whole_contract_in_any_batch(tmp_path, channel_order, layout):
    """A `--preprocess uint8` client sends crop_pixels; the server normalizes whole batches of them."""
    pre = Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), channel_order=channel_order, layout=layout)
    gray = tmp_path / "gray.png"
    Image.open(PHOTO).convert("L").resize((300, 200)).save(gray)
    tensors = load_images([PHOTO, gray], pre).arrays
    pixels = load_images([PHOTO, gray], pre, form="uint8").arrays
    assert all(p.dtype == np.uint8 and p.shape == (224, 224, 3) for p in pixels)
    np.testing.assert_array_equal(pre.normalize(np.stack(pixels)), np.stack(tensors))
    encoded = load_images([PHOTO, gray], pre, form="bytes").arrays
    assert [a.item() for a in encoded] == [open(PHOTO, "rb").read(), gray.read_bytes()]


def test_pixel_limit_is_adjustable_and_pillow_global_is_restored(tmp_path):
    from PIL import Image as PILImage

    saved = PILImage.MAX_IMAGE_PIXELS
    path = tmp_path / "big.png"
    Image.new("RGB", (1000, 1000)).save(path)
    with pytest.raises(BadImage, match="1,000,000 pixels is above the limit of 999,999"):
        load_rgb(path, max_pixels=999_999)
    assert load_rgb(path, max_pixels=1_000_000).size == (1000, 1000)
    assert PILImage.MAX_IMAGE_PIXELS == saved


def test_batches_never_exceed_max_batch():
    assert [(s.start, s.stop) for s in batches(10, 4)] == [(0, 4), (4, 8), (8, 10)]
    assert [(s.start, s.stop) for s in batches(2, 0)] == [(0, 1), (1, 2)]
    assert batches(0, 8) == []


def test_calibration_folder_lists_images_in_a_stable_order_and_loads_them_as_one_batch(tmp_path):
    from tritonize.images import image_files, load_batch

    photo = Image.open(PHOTO)
    (tmp_path / "sub").mkdir()
    for name in ("b.JPG", "sub/a.png", "c.webp"):
        photo.save(tmp_path / name)
    (tmp_path / "notes.txt").write_text("not an image")
    files = image_files(tmp_path)
    assert files == [tmp_path / "b.JPG", tmp_path / "c.webp", tmp_path / "sub" / "a.png"]
    pre = Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    batch = load_batch(files, pre)
    assert batch.shape == (3, 3, 224, 224) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch[1], pre(load_rgb(tmp_path / "c.webp")))  # lossless: the same pixels
    empty = load_batch([], pre)
    assert empty.shape == (0, 3, 224, 224) and empty.dtype == np.float32
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(TritonizeError, match="cannot use calibration image .*broken.jpg.*remove it from the image folder"):
        load_batch(image_files(tmp_path), pre)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TritonizeError, match=r"no images in .*empty \(looked for \.jpg, \.jpeg, \.png, .*\); "
                                             "point --calib-images at real photos$"):
        image_files(tmp_path / "empty")


def test_float_and_32_bit_images_are_rounded_and_clipped_into_8_bits():
    """Pillow's own convert() truncates floats and clips 32-bit integers; these round to nearest, and bring the
    16-bit range down as for 16-bit PNGs."""
    def decoded(image) -> np.ndarray:
        encoded = io.BytesIO()
        image.save(encoded, "TIFF")
        return np.asarray(decode_rgb(encoded.getvalue(), "x"))[0, :, 0]

    floats = Image.fromarray(np.array([[-3.2, 0.4, 100.6, 255.6, 300.0]], dtype=np.float32), mode="F")
    np.testing.assert_array_equal(decoded(floats), [0, 0, 101, 255, 255])
    wide = Image.fromarray(np.array([[-1000, 0, 300, 65535, 70000]], dtype=np.int32), mode="I")
    np.testing.assert_array_equal(decoded(wide), [0, 0, 1, 255, 255])


def test_bytes_form_sends_the_file_exactly_as_read_and_tensors_respect_the_pixel_limit(tmp_path):
    path = tmp_path / "padded.png"
    Image.open(PHOTO).save(path)
    path.write_bytes(path.read_bytes() + b"\x00\x00")  # trailing NULs: a fixed-width bytes array would drop them
    pre = Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    (element,) = load_images([path], pre, form="bytes").arrays
    assert element.dtype == object and element.shape == (1,) and element[0] == path.read_bytes()
    small = load_images([path], pre, max_pixels=1000)
    assert small.arrays == [] and len(small.failures) == 1 and "pixels" in small.failures[0]


IMAGENET = Preprocessing(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def _png(path, width: int, height: int, mode: str = "RGB"):
    Image.new(mode, (width, height), "white" if mode != "1" else 1).save(path)
    return path


def test_an_image_no_classifier_needs_is_refused_from_its_header_on_every_path(tmp_path):
    """Resizing the shorter side up to 256 multiplies the pixels of a thin image (1x12000: 786 Mpx, 2.4 GB):
    beyond 1:50 it is refused before it is decoded, in the one line every path gives."""
    thin, tall = _png(tmp_path / "thin.png", 1, 12000), _png(tmp_path / "tall.png", 20000, 20)
    fine = _png(tmp_path / "panorama.png", 5000, 100)  # 1:50 is still a picture
    for path, size, ratio in ((thin, "1x12000", "12000"), (tall, "20000x20", "1000")):
        for form in ("tensor", "uint8"):
            loaded = load_images([path], IMAGENET, form=form)
            [line] = loaded.failures
            assert line.startswith(f"{path}: {size} has an aspect ratio of 1:{ratio}; no classifier needs more than 1:50")
        with pytest.raises(BadImage, match=rf"^IMAGE\[0\]: {size} has an aspect ratio of 1:{ratio};"):
            decode_rgb(path.read_bytes(), "IMAGE[0]", preprocess=IMAGENET)
    assert load_images([fine], IMAGENET).failures == []


def test_the_pixel_limit_counts_the_resized_image(tmp_path):
    """A contract that resizes to 2048: a 100x4000 image (0.4 Mpx, 1:40) would become 2048x81920 = 168 Mpx."""
    path = _png(tmp_path / "strip.png", 100, 4000)
    large = Preprocessing(2048, 224, IMAGENET.mean, IMAGENET.std)
    with pytest.raises(BadImage, match=r"strip\.png: 100x4000 becomes 2048x81920 = 167,772,160 pixels when resized "
                                       r"to 2048 on its shorter side, above the limit of 89,478,485"):
        load_rgb(path, preprocess=large)
    assert load_rgb(path, preprocess=IMAGENET).size == (100, 4000)  # 256x10240 = 2.6 Mpx


def flat_png(width: int, height: int, channels: int, pad: int = 0) -> bytes:
    """A 16-bit PNG of one flat colour (gray or RGB), written row by row (never whole in memory), with `pad` bytes
    in an ancillary chunk (`juNk`: decoders skip it) before the image data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\0" + b"\x80\x00" * (width * channels)  # filter byte, then mid-grey samples
    encoder = zlib.compressobj(9)
    data = b"".join(encoder.compress(row) for _ in range(height)) + encoder.flush()
    header = struct.pack(">IIBBBBB", width, height, 16, {1: 0, 3: 2}[channels], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + (chunk(b"juNk", b"\0" * pad) if pad else b"")
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def test_the_server_spends_at_most_its_memory_on_an_image_whatever_the_file_size():
    """The server judges an image by what decoding it takes, not by the bytes it was sent: a 33 KB 16-bit
    4096x4096 PNG (16.8 Mpx: 92 MB to decode, 5 bytes a pixel) is decoded; a 9000x9000 one padded to 5.5 MB with a
    chunk decoders skip (which met the rule of at most 16 pixels per byte sent) is refused from its header."""
    from tritonize.images import SERVER_MEMORY

    server = dict(bomb_hint="the server refuses it", preprocess=IMAGENET, max_memory=SERVER_MEMORY)
    small = flat_png(4096, 4096, 1)
    assert len(small) < 40_000
    assert np.asarray(decode_rgb(small, "IMAGE[0]", **server))[0, 0].tolist() == [128, 128, 128]
    for channels, mode, cost in ((1, "I;16", 435), (3, "RGB", 365)):
        padded = flat_png(9000, 9000, channels, pad=5_300_000)
        with pytest.raises(BadImage) as refused:
            decode_rgb(padded, "IMAGE[0]", **server)
        assert str(refused.value) == (f"IMAGE[0]: 9000x9000 PNG ({mode}) takes {cost} MB to decode and preprocess, above "
                                      "the 250 MB the server gives one image; the server refuses it")


def test_the_decoding_cost_of_each_step_on_known_answers():
    """Bytes for a 1000x1000 image (a million pixels, 8 MiB of buffers): the step that holds the most decides."""
    from tritonize.images import decoding_cost

    mega, buffers = 1_000_000, 8 * 2**20

    def cost(mode="RGB", fmt="PNG", received=0, transposed=False, preprocess=None, **info):
        image = SimpleNamespace(width=1000, height=1000, mode=mode, format=fmt, info=info,
                                layer=[("1", 2, 2, 0), ("2", 1, 1, 1), ("3", 1, 1, 1)])
        return (decoding_cost(image, preprocess, received, transposed) - buffers) / mega

    assert cost() == 4 and cost(received=mega) == 8  # as Pillow stores RGB (4 bytes); the request's bytes, 4 times
    assert cost("L") == cost("P") == 5 and cost("RGBA") == cost("CMYK") == 8  # the image and its RGB copy
    assert cost("I;16") == 5 and cost("I") == cost("F") == 5  # 8 bits first (2 + 1 or 4 + 1), then L + RGB
    assert cost(transposed=True) == 8 and cost("I;16", transposed=True) == 5  # EXIF: a turned copy
    assert cost(fmt="WEBP") == 16 and cost(fmt="TIFF") == 8  # the decoders' own buffers
    assert cost(fmt="JPEG") == 4 and cost(fmt="JPEG", progressive=1) == 7  # 4:2:0: 1.5 coefficients a pixel
    thin = SimpleNamespace(width=20, height=1000, mode="RGB", format="PNG", info={})
    assert (decoding_cost(thin, IMAGENET) - buffers) == 4 * (20_000 + 256 * 1000 + 256 * 12800)  # resized up


def test_a_bomb_pillow_refuses_itself_is_refused_at_the_limit_that_applies(tmp_path):
    """Above twice its limit, Pillow refuses a file in its own words: 'exceeds limit of 178956970 pixels', its
    threshold for an error, where the limit applied is 89,478,485 (or --max-pixels)."""
    path = _png(tmp_path / "huge.png", 20000, 20000, "1")
    for limit in (None, 100_000_000):
        with pytest.raises(BadImage) as refused:
            load_rgb(path, **({"max_pixels": limit} if limit else {}))
        assert str(refused.value) == (f"{path}: 400,000,000 pixels is above the limit of {limit or 89_478_485:,} "
                                      "(possible decompression bomb); raise --max-pixels if you trust the file")


def test_a_symlink_loop_is_named_as_one(tmp_path):
    """A file that is a link to itself, through another: not 'no such file' (Path.exists() is False for both)."""
    first, second = tmp_path / "first.jpg", tmp_path / "second.jpg"
    first.symlink_to(second)
    second.symlink_to(first)
    for form in ("tensor", "uint8", "bytes"):
        [line] = load_images([first], IMAGENET, form=form).failures
        assert line == f"{first}: a symlink loop (it leads back to itself); point at the image file itself", line


def test_sixteen_bit_images_come_down_to_eight_bits_without_wide_copies():
    """16-bit pixels were divided as float64, rounded and clipped: three 8-byte copies of the image (with the
    16-bit copy, 18 bytes a pixel). What Python and numpy allocate while decoding (tracemalloc: Pillow's own
    buffers are not traced) stays under 2 bytes a pixel: the 8-bit result, and one stripe at a time."""
    import tracemalloc

    ramp = (np.arange(4096 * 4096, dtype=np.uint32) % 65536).astype(np.uint16).reshape(4096, 4096)
    encoded = io.BytesIO()
    Image.fromarray(ramp).save(encoded, "PNG", compress_level=1)
    expected_first_row = np.rint(ramp[0] / 257.0).astype(np.uint8)
    del ramp
    tracemalloc.start()
    try:
        rgb = decode_rgb(encoded.getvalue(), "deep.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rgb.mode == "RGB" and rgb.size == (4096, 4096)
    np.testing.assert_array_equal(np.asarray(rgb.crop((0, 0, 4096, 1)))[0, :, 0], expected_first_row)
    assert peak < 2 * 4096 * 4096, f"{peak / 4096 / 4096:.1f} bytes a pixel"


def test_the_server_decodes_only_the_formats_it_knows_the_cost_of(tmp_path):
    """An icon (ICO) decodes the largest picture inside it, whatever its header says: not on the server. The client
    path reads it."""
    from tritonize.images import SERVER_MEMORY

    icon = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(icon, "ICO", sizes=[(64, 64)])
    with pytest.raises(BadImage, match=r"^IMAGE\[0\]: an image in ICO format, which the server does not decode \(it decodes "
                                       r"JPEG, PNG, WEBP, TIFF, BMP, GIF, PPM\); --preprocess client reads it$"):
        decode_rgb(icon.getvalue(), "IMAGE[0]", max_memory=SERVER_MEMORY)
    assert decode_rgb(icon.getvalue(), "icon.ico").size == (64, 64)
    with pytest.raises(BadImage, match=r"^IMAGE\[0\]: not an image Pillow can read$"):
        decode_rgb(b"GIF89a but no picture", "IMAGE[0]", max_memory=SERVER_MEMORY)


def test_the_decoding_cost_at_its_edges():
    """A progressive MPO (a camera's JPEG) as a JPEG, a JPEG of unknown sampling as 4 full components, odd pixel
    counts rounded up per component, a turned image resized as it will be shown."""
    from tritonize.images import _jpeg_samples, decoding_cost

    buffers = 8 * 2**20

    def image(width=1000, height=1000, mode="RGB", fmt="PNG", **info):
        return SimpleNamespace(width=width, height=height, mode=mode, format=fmt, info=info,
                               layer=[("1", 2, 2, 0), ("2", 1, 1, 1), ("3", 1, 1, 1)])

    assert decoding_cost(image(fmt="MPO", progressive=1)) - buffers == 7_000_000
    unknown = SimpleNamespace(width=3, height=3, mode="RGB", format="JPEG", info={})
    assert _jpeg_samples(unknown, 9) == 36 and decoding_cost(unknown) == 36 + buffers  # 4 samples a pixel, 2 bytes
    assert _jpeg_samples(image(), 9) == 9 + 3 + 3  # 9 x 1/4 is 2.25: 3 for each chroma component
    wide = image(width=300, height=100)
    upright, turned = decoding_cost(wide, IMAGENET), decoding_cost(wide, IMAGENET, transposed=True)
    assert upright - buffers == 4 * (30_000 + 768 * 100 + 768 * 256)  # 300x100 resized to 768x256
    assert turned - buffers == 4 * (30_000 + 256 * 300 + 256 * 768)  # shown as 100x300: resized to 256x768


def test_a_refusal_says_what_the_image_costs_and_that_it_was_turned():
    from tritonize.images import check_memory

    turned = SimpleNamespace(width=4000, height=3000, mode="RGB", format="JPEG", info={}, layer=None)
    with pytest.raises(BadImage) as refused:
        check_memory(turned, "IMAGE[2]", 50_000_000, "the server refuses it", transposed=True)
    assert str(refused.value) == ("IMAGE[2]: 4000x3000 JPEG (RGB) takes 104 MB to decode, turned as its EXIF says, and "
                                  "preprocess, above the 50 MB the server gives one image; the server refuses it")
    check_memory(SimpleNamespace(width=10, height=10, mode="RGB", format="PNG", info={}), "x", 8 * 2**20 + 400)


def test_a_resize_to_exactly_hxw_is_named_so_when_it_is_too_large(tmp_path):
    path = _png(tmp_path / "small.png", 10, 10)
    exact = Preprocessing((20000, 10000), (224, 224), IMAGENET.mean, IMAGENET.std)
    with pytest.raises(BadImage, match=r"becomes 10000x20000 = 200,000,000 pixels when resized to 20000x10000 \(HxW\)"):
        load_rgb(path, preprocess=exact)
    assert load_images([path], exact).failed == [str(path)]  # the contract is what the bound counts, every path


def test_an_unreadable_file_says_what_the_system_said(tmp_path, monkeypatch):
    from pathlib import Path as P

    from tritonize.images import read_image_file

    def refuse(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(P, "read_bytes", refuse)
    with pytest.raises(BadImage, match=r"^x\.jpg: cannot read it \(Permission denied\)$"):
        read_image_file(P("x.jpg"))
    monkeypatch.setattr(P, "read_bytes", lambda self: (_ for _ in ()).throw(OSError("no reason given")))
    with pytest.raises(BadImage, match=r"^x\.jpg: cannot read it \(no reason given\)$"):
        read_image_file(P("x.jpg"))


def test_on_the_server_an_image_turned_by_its_exif_is_refused_when_the_turn_goes_past_the_memory_limit():
    """The turn needs a second copy of the pixels: an image that fits `max_memory` as stored but not once turned is
    refused before the turn, and says so; unturned, the same limit lets it through."""
    import re

    from tritonize.images import BOMB_HINT, decoding_cost

    def encoded(orientation: int) -> bytes:
        exif = Image.Exif()
        exif[0x0112] = orientation
        out = io.BytesIO()
        Image.new("RGB", (64, 48), (200, 10, 10)).save(out, "PNG", exif=exif.tobytes())
        return out.getvalue()

    turned = encoded(6)
    with Image.open(io.BytesIO(turned)) as image:
        # as much as it takes unturned, or turned without counting the bytes received: neither is enough
        limit = max(decoding_cost(image, None, len(turned)), decoding_cost(image, None, 0, transposed=True))
        assert limit < decoding_cost(image, None, len(turned), transposed=True)
    assert decode_rgb(encoded(1), "IMAGE[0]", max_memory=limit).size == (64, 48)
    with pytest.raises(BadImage, match=r"^IMAGE\[0\]: 64x48 PNG \(RGB\) takes [0-9,]+ MB to decode, turned as its EXIF "
                                        r"says, and preprocess, above the [0-9,]+ MB the server gives one image; "
                                        + re.escape(BOMB_HINT) + "$"):
        decode_rgb(turned, "IMAGE[0]", max_memory=limit)


def test_a_refusal_for_size_ends_with_the_hint_of_where_it_runs():
    """The client says to raise --max-pixels, the server names its own setting: the hint given is the one said."""
    out = io.BytesIO()
    Image.new("RGB", (40, 30)).save(out, "PNG")
    with pytest.raises(BadImage, match=r"^IMAGE\[1\]: 40x30 = 1,200 pixels is above the limit of 1,000 \(possible "
                                        r"decompression bomb\); ask the server's owner$"):
        decode_rgb(out.getvalue(), "IMAGE[1]", max_pixels=1000, bomb_hint="ask the server's owner")
