"""What each source's end-to-end test does after its export: `repo build` -> serve (the real embedded Triton) ->
`client classify` on each backend and preprocessing path, which must print the user's labels exactly as given and
in the order of the model's own outputs, and `client compare` across the backends, which must agree."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from tests.conftest import run_cli

PHOTOS = sorted((Path(__file__).resolve().parents[1] / "data" / "photos").glob("*.jpg"))  # real photos, CC0
BACKENDS = ("onnx_model", "torch_model")
PATHS = ("client", "server", "uint8")  # where the image is preprocessed


@contextlib.contextmanager
def served(artifacts: Path, repository: Path):
    """`tritonize repo build` (CPU instances, the ensembles that preprocess on the server) and the embedded Triton
    on free ports, for the duration of the block."""
    from tritonize.serve.embedded import embedded_server

    result = run_cli("repo", "build", "--artifacts", artifacts, repository, "--kind", "cpu")
    assert result.exit_code == 0, result.output
    with embedded_server(repository) as server:
        yield server


def eager_logits(artifacts: Path, photo: Path) -> np.ndarray:
    """The model in PyTorch eager, as its source builds it, on the photo preprocessed by the manifest's contract."""
    import torch
    from PIL import Image

    from tritonize.manifest import Manifest
    from tritonize.sources import build_model

    spec = Manifest.load(artifacts).spec
    with Image.open(photo) as image:
        x = spec.preprocessing(image.convert("RGB"))
    with torch.inference_mode():
        return build_model(spec)(torch.from_numpy(x)[None]).numpy()[0]


def classify_everywhere(server, artifacts: Path, labels: list[str], photo: Path = PHOTOS[0]) -> None:
    """`client classify` of one photo, every backend along every preprocessing path, as JSON and as the table: the
    labels printed are the user's, unchanged, for the classes PyTorch eager ranks first."""
    logits = eager_logits(artifacts, photo)
    top = min(3, len(labels))
    expected = [int(i) for i in np.argsort(-logits)[:top]]
    for backend in BACKENDS:
        for path in PATHS:
            args = ["client", "classify", photo, "--model", backend, "--preprocess", path, "--top-k", str(top),
                    "--url", server.grpc_url]
            result = run_cli(*args, "--json")
            assert result.exit_code == 0, result.output
            (prediction,) = json.loads(result.stdout)["predictions"]
            got = [(t["index"], t["label"]) for t in prediction["top_k"]]
            assert got[0] == (expected[0], labels[expected[0]]), (backend, path, got)
            assert all(label == labels[index] for index, label in got), (backend, path, got)
            table = run_cli(*args)
            assert table.exit_code == 0, table.output
            for _, label in got:
                assert label in table.stdout, (label, table.stdout)


def compare_backends(server, photos: list[Path] = PHOTOS) -> dict:
    """`client compare` across the backends (server-side preprocessing): every pair agrees on every photo."""
    result = run_cli("client", "compare", *photos, "--models", ",".join(BACKENDS), "--repeat", "1",
                     "--min-top1-agreement", "1", "--json", "--url", server.grpc_url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and all(p["top1_agreement"] == 1.0 and p["rel_to_scale"] < 1e-4 for p in report["pairs"])
    return report
