"""Client test fixtures: a repository whose backends disagree, and sample images (the shared
small_server from tests/conftest.py serves backends that agree)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

from tests.conftest import SMALL_ARCH, SMALL_LABELS, made_once, run_cli

PHOTO = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))


@pytest.fixture(scope="session")
def other_weights_artifacts(tmp_path_factory) -> Path:
    """The suite's classifier with weights of another seed, saved as a state_dict and exported from that checkpoint."""
    import torch

    from tests.suite_model import suite_classifier

    def export(root: Path) -> None:
        torch.manual_seed(1234)
        checkpoint = root / "suite_classifier_seed1234.pt"
        torch.save(suite_classifier().state_dict(), checkpoint)
        result = run_cli("export", "--arch", SMALL_ARCH, "--weights", checkpoint, "--labels", SMALL_LABELS,
                         "--format", "torchscript", "--artifacts", root / "artifacts")
        assert result.exit_code == 0, result.output

    return made_once(tmp_path_factory, "other_weights", export) / "artifacts"


@pytest.fixture(scope="session")
def disagreeing_server(small_repo, other_weights_artifacts, tmp_path_factory):
    """onnx_model from the session's weights, torch_model from other weights: a real disagreement."""
    from tritonize.repository_builder import RepoOptions, build_repository
    from tritonize.serve.embedded import embedded_server

    root = tmp_path_factory.mktemp("disagreeing")
    other = root / "other"
    build_repository(other_weights_artifacts, other, RepoOptions(kind="cpu", models=("torch_model",), ensembles=False))
    merged = root / "models"
    merged.mkdir()
    shutil.copytree(small_repo / "onnx_model", merged / "onnx_model")
    shutil.copytree(other / "torch_model", merged / "torch_model")
    with embedded_server(merged) as info:
        yield info


@pytest.fixture(scope="session")
def sample_images(tmp_path_factory) -> list[Path]:
    """The real photo plus generated pictures (gradients and shapes, several sizes)."""
    root = tmp_path_factory.mktemp("sample_images")
    rng = np.random.default_rng(7)
    paths = [PHOTO]
    for i in range(7):
        h, w = rng.integers(120, 400, size=2)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * (i + 1)) % 256, (yy * (7 - i)) % 256, ((xx + yy) * 3) % 256], -1).astype(np.uint8)
        noise = rng.integers(0, 60, base.shape, dtype=np.uint8)
        path = root / f"generated_{i}.png"
        Image.fromarray(base + noise).save(path)
        paths.append(path)
    return paths
