"""Image decoding and the preprocessing contract by property: every Pillow mode and byte order that
`decode_rgb` accepts, in every lossless format that stores it, gives the pixels an independent rule
says; sizes on either side of every limit, with our limit and Pillow's own set either way; the
contract's round trips."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st
from hypothesis.extra import numpy as hnp

from tritonize.images import DEFAULT_MAX_PIXELS, MAX_ASPECT, BadImage, check_size, decode_rgb
from tritonize.preprocessing import PIL_FILTERS, Preprocessing

shapes = st.tuples(st.integers(1, 6), st.integers(1, 6))

# (format, the mode written, numpy dtype of its raw bytes): 16 bits in both byte orders, 32-bit integers, floats
WIDE = [("PNG", "I;16", "<u2"), ("PNG", "I;16B", ">u2"), ("TIFF", "I;16", "<u2"), ("TIFF", "I;16L", "<u2"),
        ("TIFF", "I;16B", ">u2"), ("PPM", "I;16", "<u2"), ("TIFF", "I", "<i4"), ("PPM", "I", "<i4"),
        ("TIFF", "F", "<f4"), ("PPM", "F", "<f4")]
# 8-bit modes (channels) and the lossless formats that store each
NARROW = [("L", 1, ("PNG", "TIFF", "BMP", "PPM")), ("LA", 2, ("PNG", "TIFF")), ("RGB", 3, ("PNG", "TIFF", "BMP", "PPM", "WEBP")),
          ("RGBA", 4, ("PNG", "TIFF", "WEBP")), ("CMYK", 4, ("TIFF",)), ("YCbCr", 3, ("TIFF",)), ("LAB", 3, ("TIFF",))]


def _encode(image, fmt: str) -> bytes:
    data = io.BytesIO()
    image.save(data, fmt, **({"lossless": True, "exact": True} if fmt == "WEBP" else {}))  # exact: keeps transparent RGB
    return data.getvalue()


@pytest.mark.parametrize("case", WIDE, ids=lambda case: "-".join(case[:2]))
@given(data=st.data())
def test_wide_modes_in_either_byte_order_scale_into_8_bits(case, data):
    """16 and 32-bit integers: value / 257, rounded, clipped (65535 is white; a byte swap or a /256 shows);
    floats: rounded and clipped. Grey in all three channels."""
    from PIL import Image

    fmt, mode, dtype = case
    if dtype == "<f4":
        elements = st.floats(-50, 300, width=32)
    elif mode == "I":
        elements = st.integers(-1000, 70_000)
    else:
        elements = st.integers(0, 65535)
    values = data.draw(hnp.arrays(np.dtype(dtype), shapes, elements=elements))
    raw = values.astype(dtype).tobytes()
    image = Image.frombytes(mode, values.shape[::-1], raw)
    rgb = np.asarray(decode_rgb(_encode(image, fmt), "x"))
    scaled = values.astype(np.float64) if dtype == "<f4" else values.astype(np.float64) / 257
    expected = np.clip(np.floor(scaled + 0.5) if dtype != "<f4" else np.rint(scaled), 0, 255).astype(np.uint8)
    assert rgb.shape == (*values.shape, 3) and rgb.dtype == np.uint8
    assert np.array_equal(rgb, np.repeat(expected[..., None], 3, axis=2)), (fmt, mode, values, rgb[..., 0])


@given(case=st.sampled_from(NARROW), data=st.data())
def test_eight_bit_modes_decode_to_their_rgb_in_every_lossless_format(case, data):
    """Grey becomes grey, RGB(A) keeps its colour channels (alpha dropped, as torchvision's loader does),
    other colour spaces are Pillow's conversion of the very same pixels."""
    from PIL import Image

    mode, channels, formats = case
    fmt = data.draw(st.sampled_from(formats))
    values = data.draw(hnp.arrays(np.uint8, st.tuples(st.integers(1, 6), st.integers(1, 6), st.just(channels))))
    image = Image.frombytes(mode, (values.shape[1], values.shape[0]), values.tobytes())
    rgb = np.asarray(decode_rgb(_encode(image, fmt), "x"))
    if mode in ("L", "LA"):
        expected = np.repeat(values[..., :1], 3, axis=2)
    elif mode in ("RGB", "RGBA"):
        expected = values[..., :3]
    else:
        expected = np.asarray(image.convert("RGB"))
    assert np.array_equal(rgb, expected), (fmt, mode)


@given(shape=shapes, bits=st.sampled_from(["1", "P"]), fmt=st.sampled_from(["PNG", "TIFF", "BMP"]), seed=st.integers(0, 99))
def test_bilevel_and_palette_images_decode_to_their_colours(shape, bits, fmt, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    if bits == "1":
        image = Image.fromarray(rng.integers(0, 2, shape, dtype=np.uint8).astype(bool))
        expected = np.repeat((np.asarray(image, np.uint8) * 255)[..., None], 3, axis=2)
    else:
        palette = rng.integers(0, 256, (256, 3), dtype=np.uint8)
        indices = rng.integers(0, 256 if fmt != "BMP" else 2, shape, dtype=np.uint8)
        image = Image.frombytes("P", shape[::-1], indices.tobytes())
        image.putpalette(palette.tobytes())
        expected = palette[indices]
    assert np.array_equal(np.asarray(decode_rgb(_encode(image, fmt), "x")), expected)


limits = st.sampled_from([None, 1, 1000, DEFAULT_MAX_PIXELS, 10**12])


def _at_the_aspect_edge(short: int, off: int, tall: bool) -> tuple[int, int]:
    long = MAX_ASPECT * short + off
    return (short, long) if tall else (long, short)


sizes = st.one_of(st.tuples(st.integers(1, 120), st.integers(1, 120)),
                  st.builds(_at_the_aspect_edge, st.integers(1, 3), st.integers(-1, 1), st.booleans()))


@given(size=sizes, margin=st.integers(-1, 1), pillow=limits)
def test_the_pixel_and_aspect_limits_hold_at_their_edges_whatever_pillows_own_limit(size, margin, pillow):
    """Refused exactly when above our limit (one pixel under, at, one over) or longer than MAX_ASPECT times
    the shorter side; Pillow's global limit (off, tiny, default, huge) changes nothing and is put back."""
    from PIL import Image

    width, height = size
    data = _encode(Image.new("L", (width, height), 7), "PNG")
    max_pixels = max(1, width * height + margin)  # (--max-pixels is at least 1)
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = pillow
    try:
        refused = None
        try:
            decode_rgb(data, "x", max_pixels=max_pixels)
        except BadImage as e:
            refused = str(e)
        assert Image.MAX_IMAGE_PIXELS == pillow
    finally:
        Image.MAX_IMAGE_PIXELS = saved
    too_many = width * height > max_pixels
    too_long = max(width, height) > MAX_ASPECT * min(width, height)
    assert (refused is not None) == (too_many or too_long), (width, height, max_pixels, refused)
    if too_many:
        assert f"{width}x{height} = {width * height:,} pixels is above the limit of {max_pixels:,}" in refused
    elif too_long:
        assert f"aspect ratio of 1:{max(width, height) / min(width, height):.0f}" in refused


@given(short=st.integers(1, 40), ratio=st.integers(1, 8), resize=st.integers(1, 300), margin=st.integers(-1, 1),
       tall=st.booleans())
def test_the_resized_image_counts_against_the_limit_at_its_edge(short, ratio, resize, margin, tall):
    """A small image whose shorter side grows to `resize`: refused exactly when its resized pixels pass the limit."""
    width, height = (short, short * ratio) if tall else (short * ratio, short)
    pre = Preprocessing(resize=resize, crop=1, mean=(0, 0, 0), std=(1, 1, 1))
    resized = pre.resized_size(width, height)
    assert min(resized) == resize and abs(max(resized) / resize - ratio) < 1 / resize + 1e-9
    max_pixels = max(width * height, resized[0] * resized[1] + margin)
    try:
        check_size(width, height, "x", max_pixels, preprocess=pre)
        refused = False
    except BadImage as e:
        refused = True
        assert f"becomes {resized[0]}x{resized[1]}" in str(e)
    assert refused == (resized[0] * resized[1] > max_pixels)


STORED = [(mode, fmt) for mode in ("1", "L", "P", "RGB", "RGBA", "I;16", "I") for fmt in ("PNG", "TIFF", "WEBP")
          if (mode, fmt) != ("I", "PNG") and (fmt != "WEBP" or mode in ("L", "P", "RGB", "RGBA"))]


@given(stored=st.sampled_from(STORED), size=st.tuples(st.integers(1, 60), st.integers(1, 60)), margin=st.integers(-1, 1))
def test_the_server_memory_bound_holds_at_its_edge(stored, size, margin):
    """Refused exactly when decoding would take more than the memory given (one byte under, at, one over what
    `decoding_cost` says for the opened file, the file's bytes included), with the size, mode and cost in the line."""
    from PIL import Image

    from tritonize.images import decoding_cost

    mode, fmt = stored
    assume(max(size) <= MAX_ASPECT * min(size))
    data = _encode(Image.new(mode, size), fmt)
    pre = Preprocessing(resize=8, crop=4, mean=(0, 0, 0), std=(1, 1, 1))
    with Image.open(io.BytesIO(data)) as opened:
        cost = decoding_cost(opened, pre, len(data))
    try:
        decode_rgb(data, "x", preprocess=pre, max_memory=cost + margin)
        refused = None
    except BadImage as e:
        refused = str(e)
    assert (refused is not None) == (margin < 0), refused
    if refused:
        assert refused.startswith(f"x: {size[0]}x{size[1]} {fmt} (") and f"takes {cost / 1e6:,.0f} MB" in refused


# ------------------------------------------------------------------------------------------ preprocessing

contracts = st.builds(
    lambda resize, crop_share, mean, std, interpolation, antialias, order, layout, scale: Preprocessing(
        resize=resize, crop=max(1, resize * crop_share // 100), mean=mean, std=std, interpolation=interpolation,
        antialias=antialias, channel_order=order, layout=layout, scale=scale),
    st.integers(1, 600), st.integers(1, 100),
    st.tuples(*[st.floats(-1e3, 1e3, allow_nan=False)] * 3), st.tuples(*[st.floats(1e-6, 1e3)] * 3),
    st.sampled_from(sorted(PIL_FILTERS)), st.booleans(), st.sampled_from(["RGB", "BGR"]), st.sampled_from(["NCHW", "NHWC"]),
    st.floats(1e-6, 1.0),
)


@given(contract=contracts)
def test_the_contract_round_trips_through_parameters_and_dicts_exactly(contract):
    assert Preprocessing.from_parameters(contract.to_parameters()) == contract
    assert Preprocessing.from_dict(contract.to_dict()) == contract
    padded = {k: f" {v.upper() if k.endswith(('channel_order', 'layout')) else v} " for k, v in contract.to_parameters().items()}
    assert Preprocessing.from_parameters(padded) == contract


@given(contract=contracts, seed=st.integers(0, 2**16), batch=st.integers(1, 3))
def test_normalize_inverts_exactly_enough_and_ignores_the_batch(contract, seed, batch):
    """Per pixel, (value * scale - mean) / std in the contract's channel order and layout: undone, the pixels
    come back; a batch gives each image's own result."""
    pixels = np.random.default_rng(seed).integers(0, 256, (batch, 2, 3, 3), dtype=np.uint8)
    x = contract.normalize(pixels)
    assert x.dtype == np.float32 and x.shape == (batch, *((3, 2, 3) if contract.layout == "NCHW" else (2, 3, 3)))
    hwc = np.moveaxis(x, -3, -1) if contract.layout == "NCHW" else x
    rgb = hwc[..., ::-1] if contract.channel_order == "BGR" else hwc
    back = (rgb.astype(np.float64) * np.asarray(contract.std) + np.asarray(contract.mean)) / contract.scale
    tolerance = 1e-4 * (1 + np.abs(np.asarray(contract.mean)) / contract.scale + 255) + 1e-3
    assert np.all(np.abs(back - pixels) <= tolerance)
    assert np.array_equal(contract.normalize(pixels[:1])[0], x[0])


@given(width=st.integers(1, 80), height=st.integers(1, 80), resize=st.integers(1, 40), crop_share=st.integers(1, 100))
def test_crop_pixels_is_always_crop_by_crop_and_centred(width, height, resize, crop_share):
    from PIL import Image

    assume(max(width, height) <= MAX_ASPECT * min(width, height))
    crop = max(1, resize * crop_share // 100)
    pre = Preprocessing(resize=resize, crop=crop, mean=(0, 0, 0), std=(1, 1, 1), interpolation="nearest")
    columns = np.tile(np.arange(width, dtype=np.uint8)[None, :], (height, 1))
    out = pre.crop_pixels(Image.fromarray(columns).convert("RGB"))
    assert out.shape == (crop, crop, 3) and out.dtype == np.uint8
    resized_width, _ = pre.resized_size(width, height)
    if resized_width == width:  # no horizontal resampling: the crop's columns are the centre ones
        left = int(round((width - crop) / 2.0))
        assert list(out[0, :, 0]) == list(range(left, left + crop))


@pytest.mark.parametrize("mode", ["I;16", "I;16B"])
def test_white_is_white_in_either_byte_order(mode):
    """The simplest case of the property above, kept by name: 65535 is 255, 257 is 1, 128 is 0."""
    from PIL import Image

    raw = np.array([[65535, 257, 128]], dtype="<u2" if mode == "I;16" else ">u2").tobytes()
    rgb = np.asarray(decode_rgb(_encode(Image.frombytes(mode, (3, 1), raw), "TIFF"), "x"))
    assert list(rgb[0, :, 0]) == [255, 1, 0]
