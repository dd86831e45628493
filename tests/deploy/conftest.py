"""Deploy fixtures: a real S3 API server (moto's server mode) and small repositories to push."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

# moto needs boto3, whose botocore would downgrade python-dateutil in the project's environment, so
# `make test` installs it into its own environment, .venv/moto, and the tests run it as a server.
MOTO_SERVER = Path(os.environ.get("TRITONIZE_MOTO_SERVER") or Path(sys.prefix) / "moto" / "bin" / "moto_server")
ACCESS = {"AWS_ACCESS_KEY_ID": "tritonize-test", "AWS_SECRET_ACCESS_KEY": "tritonize-test-secret"}


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> str:
    """URL of moto's S3 server, started for the session on a free port (it accepts any credentials)."""
    if not MOTO_SERVER.is_file():
        pytest.skip(f"moto's S3 server is not installed at {MOTO_SERVER}: `make test` installs it "
                    "(python3 -m venv .venv/moto && .venv/moto/bin/pip install 'moto[s3]' flask flask-cors)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"moto's server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
    yield url
    server.terminate()
    server.wait(timeout=20)


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A fresh bucket on the S3 server, credentials in the environment; yields (endpoint, bucket, client)."""
    from minio import Minio

    for key, value in ACCESS.items():
        monkeypatch.setenv(key, value)
    bucket = f"tritonize-{uuid.uuid4().hex[:12]}"
    client = Minio(s3_endpoint.removeprefix("http://"), access_key=ACCESS["AWS_ACCESS_KEY_ID"],
                   secret_key=ACCESS["AWS_SECRET_ACCESS_KEY"], secure=False, region="us-east-1")
    client.make_bucket(bucket)
    return s3_endpoint, bucket, client


@pytest.fixture(scope="session")
def push_repo(resnet18_artifacts, tmp_path_factory) -> Path:
    """onnx_model and torch_model (CPU, ~45 MB each; no ensembles): two multipart objects and small files. resnet18:
    its size is the point (the suite's small classifier fits in one part)."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path_factory.mktemp("push") / "models"
    build_repository(resnet18_artifacts, repo, RepoOptions(kind="cpu", models=("onnx_model", "torch_model"),
                                                        warmup=False, ensembles=False))
    return repo


@pytest.fixture
def repo_copy(push_repo, tmp_path) -> Path:
    """A private copy of push_repo (hard links: change files with tests.repository_builder.helpers.rewrite)."""
    from tests.repository_builder.helpers import copy_repo

    return copy_repo(push_repo, tmp_path / "models")

