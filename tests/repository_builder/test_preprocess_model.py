"""The repository's preprocessing models, served by the real embedded Triton (the session's small_server):
they compute exactly what the client path computes, and a bad image fails only its own request."""

from __future__ import annotations

import queue

import numpy as np
import pytest
from PIL import Image

from tests.client.conftest import PHOTO
from tritonize.images import load_images
from tritonize.preprocessing import Preprocessing


@pytest.fixture(scope="module")
def every_mode(tmp_path_factory) -> list:
    """The photo in every Pillow mode the client accepts, in the formats that store each, plus an EXIF
    rotation, a GIF palette, a BMP and a WebP with alpha."""
    root = tmp_path_factory.mktemp("modes")
    photo = Image.open(PHOTO).convert("RGB").crop((40, 60, 440, 360))
    paths = []
    for mode, suffix in (("1", ".png"), ("L", ".png"), ("LA", ".png"), ("P", ".png"), ("PA", ".tiff"), ("RGB", ".jpg"),
                         ("RGBA", ".png"), ("CMYK", ".jpg"), ("YCbCr", ".tiff"), ("LAB", ".tiff"),
                         ("I;16", ".png"), ("I", ".tiff"), ("F", ".tiff"), ("RGBA", ".webp"), ("P", ".gif"), ("RGB", ".bmp")):
        image = photo.convert("L").convert(mode) if mode in ("I;16", "I", "F") else photo.convert(mode)
        path = root / f"{mode.replace(';', '_')}{suffix}"
        image.save(path)
        paths.append(path)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    photo.save(root / "exif_rotated.jpg", exif=exif.tobytes())
    return paths + [root / "exif_rotated.jpg"]


def _contract(client, model: str) -> Preprocessing:
    params = client.get_model_config(model, as_json=True)["config"]["parameters"]
    return Preprocessing.from_parameters({k: v["string_value"] for k, v in params.items()}, model)


def _infer(client, model: str, name: str, batch: np.ndarray) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput(name, list(batch.shape), grpcclient.np_to_triton_dtype(batch.dtype))
    tensor.set_data_from_numpy(batch)
    return client.infer(model, [tensor]).as_numpy("PREPROCESSED")


def test_served_preprocessing_equals_the_client_path_on_every_mode(small_server, every_mode):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        contract = _contract(client, "preprocess")
        tensors = load_images(every_mode, contract)
        assert tensors.failures == [] and len(tensors.arrays) == len(every_mode)
        expected = np.stack(tensors.arrays)
        encoded = np.stack(load_images(every_mode, contract, form="bytes").arrays)  # the files, as read
        np.testing.assert_array_equal(_infer(client, "preprocess", "IMAGE", encoded), expected)
        pixels = np.stack(load_images(every_mode, contract, form="uint8").arrays)
        np.testing.assert_array_equal(_infer(client, "preprocess_uint8", "PIXELS", pixels), expected)


def test_a_bad_image_fails_its_request_alone(small_server):
    """Concurrent requests share executions of the preprocess model (its dynamic batcher); the one with a
    truncated image fails with the client path's reason, every other one is served."""
    import tritonclient.grpc as grpcclient

    photo = PHOTO.read_bytes()
    bodies = [photo] * 12
    bodies[5] = photo[:3000]
    done: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        expected = load_images([PHOTO], _contract(client, "preprocess")).arrays[0]
        before = client.get_inference_statistics("preprocess", as_json=True)["model_stats"][0]
        for i, body in enumerate(bodies):
            tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[body]], dtype=np.object_))
            client.async_infer("preprocess", [tensor], callback=lambda result, error, i=i: done.put((i, result, error)))
        results = dict((i, (result, error)) for i, result, error in (done.get(timeout=60) for _ in bodies))
        after = client.get_inference_statistics("preprocess", as_json=True)["model_stats"][0]
    for i, (result, error) in results.items():
        if i == 5:
            assert error is not None and "IMAGE[0]: cannot decode" in error.message() and "truncated or corrupt" in error.message()
        else:
            assert error is None, error
            np.testing.assert_array_equal(result.as_numpy("PREPROCESSED")[0], expected)
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert executions < len(bodies), "the requests did not share executions: the test proves nothing"


def test_a_request_with_a_bad_image_names_it(small_server):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    batch = np.array([[PHOTO.read_bytes()], [b"GIF89a but no picture"], [PHOTO.read_bytes()]], dtype=np.object_)
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match=r"in ensemble 'onnx_classifier', IMAGE\[1\]: "
                                                           "(not an image Pillow can read|cannot decode)"):
            tensor = grpcclient.InferInput("IMAGE", list(batch.shape), "BYTES")
            tensor.set_data_from_numpy(batch)
            client.infer("onnx_classifier", [tensor])
