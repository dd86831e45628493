"""Helpers shared by the repository-builder tests: private repository copies and planted faults."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from google.protobuf import text_format

from tests.conftest import plan_entry, record
from tritonize.manifest import Manifest
from tritonize.model_repository import BACKENDS, CONFIG_NAME, parse_config
from tritonize.repository_builder.config import config_text, model_config
from tritonize.repository_builder.options import RepoOptions


def copy_repo(src: Path, dest: Path) -> Path:
    """A private copy of a repository. Files are hard links (fast): change them only with `rewrite`."""
    shutil.copytree(src, dest, copy_function=os.link)
    return dest


def rewrite(path: Path, data: str | bytes) -> None:
    """Replace a file's content without touching other hard links to it."""
    path.unlink()
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def edit_config(model_dir: Path, change, name: str = CONFIG_NAME) -> None:
    """Parse a config through the schema, let `change(cfg)` modify it, write it back."""
    cfg = parse_config(model_dir / name)
    change(cfg)
    rewrite(model_dir / name, text_format.MessageToString(cfg))


def record_plan(artifacts: Path, **plan):
    """A built TensorRT plan's entry in the manifest (without a plan file: none can be built here);
    `plan`: conftest.plan_entry's arguments."""
    entry = plan_entry(**plan)
    record(artifacts, "tensorrt", entry)
    return entry


def restamp(repo: Path, artifacts: Path) -> None:
    """Every config of `repo` names the manifest of `artifacts` as its source, as a rebuild would after a
    change to the manifest (else each model warns that it was built from another manifest)."""
    sha = Manifest.load(artifacts).sha256()
    for path in repo.glob("*/**/*.pbtxt"):
        cfg = parse_config(path)
        if "source.manifest_sha256" in cfg.parameters:
            cfg.parameters["source.manifest_sha256"].string_value = sha
            rewrite(path, text_format.MessageToString(cfg))


def add_trt_model(repo: Path, artifacts: Path, *, kind="gpu", max_batch=None, **plan) -> dict:
    """Record a plan entry and write the trt_model directory the builder would write for it, minus the plan;
    the other models' configs name the changed manifest (restamp)."""
    entry = record_plan(artifacts, **plan)
    restamp(repo, artifacts)
    manifest = Manifest.load(artifacts)
    cfg = model_config(BACKENDS["trt_model"], manifest.spec, entry, RepoOptions(max_batch=max_batch), kind,
                       manifest.sha256())
    model_dir = repo / "trt_model"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / CONFIG_NAME).write_text(config_text(cfg))
    (model_dir / "labels.txt").write_text("\n".join(manifest.spec.labels) + "\n")
    return entry
