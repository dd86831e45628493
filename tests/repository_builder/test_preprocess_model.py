"""The repository's preprocessing models, served by the real embedded Triton (the session's small_server):
they compute exactly what the client path computes, and a bad image fails only its own request."""

from __future__ import annotations

import queue

import numpy as np
import pytest
from PIL import Image

from tests.client.conftest import PHOTO
from tests.test_images import flat_png
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
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        expected = load_images([PHOTO], _contract(client, "preprocess")).arrays[0]
        for _ in range(5):  # a busy machine may serve one round one request at a time: then another round
            done: queue.Queue = queue.Queue()
            before = client.get_inference_statistics("preprocess", as_json=True)["model_stats"][0]
            for i, body in enumerate(bodies):
                tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
                tensor.set_data_from_numpy(np.array([[body]], dtype=np.object_))
                client.async_infer("preprocess", [tensor], callback=lambda result, error, i=i, done=done: done.put((i, result, error)))
            results = dict((i, (result, error)) for i, result, error in (done.get(timeout=60) for _ in bodies))
            after = client.get_inference_statistics("preprocess", as_json=True)["model_stats"][0]
            for i, (result, error) in results.items():
                if i == 5:
                    assert error is not None and "IMAGE[0]: cannot decode" in error.message()
                    assert "truncated or corrupt" in error.message()
                else:
                    assert error is None, error
                    np.testing.assert_array_equal(result.as_numpy("PREPROCESSED")[0], expected)
            executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
            if executions < len(bodies):
                break
    assert executions < len(bodies), "the requests never shared executions in 5 rounds: the test proves nothing"


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


PEAK_GROWTH_MB = 64  # what the three images may add to the preprocess stub's peak memory (a photo adds about 10)


def _peak_mb(pid: int, reset: bool = False) -> float:
    """The process's peak resident memory (VmHWM), in MB; `reset` first brings the peak down to what it holds now
    (proc(5): writing 5 to clear_refs, Linux 4.0+)."""
    from pathlib import Path

    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def test_thin_tall_and_huge_images_are_refused_before_they_take_the_servers_memory(small_repo, tmp_path):
    """Small files that would cost gigabytes once decoded or resized: thin (1x12000, 786 Mpx once its shorter side is
    resized to 256), tall (20x20000), huge (9000x9000, under Pillow's pixel limit, 99 KB). The preprocess stub's peak
    memory, read from /proc, grows by less than PEAK_GROWTH_MB, and each request gets its one line."""
    import shutil

    from tests.serve.helpers import children
    from tritonize.client.connection import Connection, RejectedImage
    from tritonize.serve.embedded import embedded_server

    rng = np.random.default_rng(0)
    images = {"thin": (Image.fromarray(rng.integers(0, 256, (12000, 1, 3), np.uint8)), "aspect ratio of 1:12000"),
              "tall": (Image.fromarray(rng.integers(0, 256, (20000, 20, 3), np.uint8)), "aspect ratio of 1:1000"),
              "huge": (Image.new("L", (9000, 9000), 128), "takes 414 MB to decode and preprocess, above the 250 MB")}
    for name, (image, _) in images.items():
        image.save(tmp_path / f"{name}.png")
    repo = tmp_path / "models"
    for model in ("onnx_model", "preprocess", "onnx_classifier"):  # a server of its own: its stub's peak is this test's
        shutil.copytree(small_repo / model, repo / model)
    grown, answers = {}, {}
    with embedded_server(repo) as server, Connection(server.grpc_url, timeout=120) as connection:
        [stub] = [pid for pid, command in children(server.pid).items() if " preprocess_0_0 " in command]
        info = connection.model_for("onnx_model", "server")
        assert connection.infer(info, np.array([[PHOTO.read_bytes()]], dtype=np.object_)).shape == (1, 1000)
        for name in images:
            before = _peak_mb(stub, reset=True)
            try:
                connection.infer(info, np.array([[(tmp_path / f"{name}.png").read_bytes()]], dtype=np.object_))
                answers[name] = "classified"
            except RejectedImage as e:
                answers[name] = e.reason
            grown[name] = _peak_mb(stub) - before
    assert all(mb < PEAK_GROWTH_MB for mb in grown.values()), grown
    for name, (image, reason) in images.items():
        assert answers[name].startswith(f"{image.width}x{image.height} ") and reason in answers[name], answers[name]


SERVER_BOUND_MB = 300  # what any one image may add to the preprocess stub's peak memory (issue 35)
SIXTEEN_BIT = {
    "16-bit 4096x4096": lambda: flat_png(4096, 4096, 1),  # 33 KB: 16.8 Mpx (92 MB to decode)
    "16-bit 7000x6800": lambda: flat_png(7000, 6800, 1),  # 47.6 Mpx: 247 MB to decode, just within images.SERVER_MEMORY
    "16-bit 9000x9000 padded": lambda: flat_png(9000, 9000, 1, pad=5_300_000),  # 5.5 MB: 16 bytes sent a pixel
    "16-bit RGB 9000x9000 padded": lambda: flat_png(9000, 9000, 3, pad=5_300_000),
}


@pytest.mark.parametrize("name", SIXTEEN_BIT)
def test_a_small_file_costs_the_stub_what_it_decodes_to_within_the_bound(small_server, name):
    """16-bit PNGs that decode to far more than their bytes (7c97878: the 33 KB one took the stub from 44 to 364 MB,
    the padded 9000x9000 to 1615 MB, 683 MB in RGB): decoded within SERVER_BOUND_MB above the stub's idle size, or
    refused from their header. The stub's peak is reset before each request, so each figure is that request's."""
    from tritonize.client.connection import Connection, RejectedImage
    from tritonize.serve.supervisor import stub_processes

    data = SIXTEEN_BIT[name]()
    stub = stub_processes(small_server.pid)["preprocess_0_0"]
    with Connection(small_server.grpc_url, timeout=300) as connection:
        info = connection.model_for("onnx_model", "server")
        idle = _peak_mb(stub, reset=True)
        try:
            answer = f"classified: {connection.infer(info, np.array([[data]], dtype=np.object_)).shape}"
        except RejectedImage as e:
            answer = f"refused: {e.reason}"
    grown = (_peak_mb(stub) - idle) * 2**20 / 1e6
    assert grown < SERVER_BOUND_MB, f"{name} ({len(data):,} bytes): the stub's peak grew by {grown:.0f} MB; {answer}"
    if "9000x9000" in name:  # what it would decode to, whatever its bytes
        assert answer.startswith("refused: 9000x9000 PNG (") and "above the 250 MB the server gives" in answer, answer
    else:
        assert answer == "classified: (1, 1000)", answer
