"""`tritonize repo push` against a real S3 API server (moto's server mode), and a real Triton reading
what it pushed. moto accepts whatever checksum a client claims, so every check here compares the
bytes read back from the server with the local files."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.repository_builder.helpers import rewrite
from tritonize.deploy.push import repository_files, snapshot
from tritonize.files import sha256_file
from tritonize.serve.embedded import (
    BundledTriton,
    EmbeddedServer,
    assemble_backend_dir,
    check_stub_environment,
    stub_environment,
)
from tritonize.serve.front import Upstream
from tritonize.serve.process import RunningServer, choose_ports, endpoints

PREFIX = "resnet"


def _push_args(repo: Path, bucket: str, endpoint: str) -> list:
    return ["deploy", "push", f"s3://{bucket}/{PREFIX}", repo, "--endpoint", endpoint]


def _push(repo: Path, bucket: str, endpoint: str) -> dict:
    result = run_cli(*_push_args(repo, bucket, endpoint), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _read(client, bucket: str, key: str) -> bytes:
    response = client.get_object(bucket, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()


def _stored(client, bucket: str, release: str) -> dict[str, str]:
    """Relative path -> SHA-256 of every object of a release, read back from the server."""
    prefix = f"{PREFIX}/{release}/"
    return {o.object_name.removeprefix(prefix): hashlib.sha256(_read(client, bucket, o.object_name)).hexdigest()
            for o in client.list_objects(bucket, prefix=prefix, recursive=True)}


def _local(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): sha256_file(p) for p in repository_files(repo)}


def _current(client, bucket: str) -> str:
    return json.loads(_read(client, bucket, f"{PREFIX}/CURRENT"))["release"]


def _rename_first_class(repo: Path) -> None:
    """A change that makes another release and still passes `repo check`."""
    labels = repo / "onnx_model" / "labels.txt"
    rewrite(labels, "changed" + labels.read_text()[labels.read_text().index("\n"):])


def test_push_round_trips_with_every_checksum_verified(s3, push_repo):
    endpoint, bucket, client = s3
    summary = _push(push_repo, bucket, endpoint)
    release, local = summary["release"], _local(push_repo)
    assert _stored(client, bucket, release) == local
    record = json.loads(_read(client, bucket, f"{PREFIX}/{release}.json"))
    assert {f["path"]: f["sha256"] for f in record["files"]} == local
    assert _current(client, bucket) == release
    assert (summary["uploaded"], summary["kept"], summary["previous"]) == (len(local), 0, None)
    assert summary["model_repository"] == f"s3://{endpoint.removeprefix('http://')}/{bucket}/{PREFIX}/{release}"
    # the models went up in parts: the ETag checked is the multipart one ("-3"), computed locally
    assert client.stat_object(bucket, f"{PREFIX}/{release}/onnx_model/1/model.onnx").etag.endswith("-3")

    again = _push(push_repo, bucket, endpoint)  # unchanged: same release, nothing sent
    assert (again["release"], again["uploaded"], again["kept"], again["previous"]) == (release, 0, len(local), release)


def test_objects_already_there_are_verified_not_trusted(s3, push_repo):
    """Resuming keeps only objects whose bytes are the file's: one with the right size but other bytes
    is replaced, one uploaded with another part size (another ETag) is kept after reading it back, and
    an object that is not part of the repository is removed from the release."""
    endpoint, bucket, client = s3
    release = snapshot(push_repo).key
    labels = (push_repo / "onnx_model" / "labels.txt").read_bytes()
    corrupted = labels.replace(b"\n", b"\r", 1)
    client.put_object(bucket, f"{PREFIX}/{release}/onnx_model/labels.txt", io.BytesIO(corrupted), len(corrupted))
    client.fput_object(bucket, f"{PREFIX}/{release}/onnx_model/1/model.onnx",
                       str(push_repo / "onnx_model" / "1" / "model.onnx"), part_size=5 * 2**20)
    client.put_object(bucket, f"{PREFIX}/{release}/stray/config.pbtxt", io.BytesIO(b"x"), 1)

    summary = _push(push_repo, bucket, endpoint)
    local = _local(push_repo)
    assert (summary["kept"], summary["uploaded"]) == (1, len(local) - 1)
    assert _stored(client, bucket, release) == local


def test_interrupted_push_leaves_the_previous_release_readable_then_resumes(s3, repo_copy, tmp_path):
    endpoint, bucket, client = s3
    first = run_cli(*_push_args(repo_copy, bucket, endpoint))
    assert first.exit_code == 0, first.output
    v1 = _current(client, bucket)
    v1_files = _stored(client, bucket, v1)
    model_repository = next(line.strip() for line in first.stdout.splitlines() if "--model-repository=" in line)
    credentials = json.loads(first.stdout[first.stdout.index("{"):first.stdout.index("\n}\n") + 2])

    _rename_first_class(repo_copy)
    v2 = snapshot(repo_copy).key
    log = tmp_path / "push.log"
    with open(log, "wb") as out:
        push = subprocess.Popen([sys.executable, "-m", "tritonize.cli", *map(str, _push_args(repo_copy, bucket, endpoint))],
                                stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    deadline = time.monotonic() + 120
    while not list(client.list_objects(bucket, prefix=f"{PREFIX}/{v2}/", recursive=True)):
        assert push.poll() is None and time.monotonic() < deadline, f"the push ended before it uploaded:\n{log.read_text()}"
        time.sleep(0.02)
    push.kill()  # SIGKILL: no cleanup of any kind
    push.wait()
    sent = len(list(client.list_objects(bucket, prefix=f"{PREFIX}/{v2}/", recursive=True)))
    assert 0 < sent < len(_local(repo_copy)), f"not interrupted mid-way ({sent} objects sent)"
    assert _current(client, bucket) == v1
    assert not list(client.list_objects(bucket, prefix=f"{PREFIX}/{v2}.json"))
    assert _stored(client, bucket, v1) == v1_files

    # A real Triton reads the previous release with the printed --model-repository and credential file.
    for entry in credentials["s3"].values():
        entry.update(key_id=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    (tmp_path / "credentials.json").write_text(json.dumps(credentials))
    with _triton_on_store(model_repository, tmp_path / "credentials.json") as info:
        assert info.models["onnx_model"] == ("READY", ""), info.models

    resumed = _push(repo_copy, bucket, endpoint)
    assert (resumed["release"], resumed["previous"]) == (v2, v1)
    assert (resumed["kept"], resumed["uploaded"]) == (sent, len(_local(repo_copy)) - sent)
    assert _current(client, bucket) == v2
    assert _stored(client, bucket, v2) == _local(repo_copy)
    assert _stored(client, bucket, v1) == v1_files


class _triton_on_store:
    """The bundled tritonserver (embedded engine) reading `--model-repository=s3://...` itself, with
    only Triton's credential file (no AWS_* variables), loading onnx_model."""

    def __init__(self, model_repository_flag: str, credential_file: Path):
        self.flag, self.credential_file = model_repository_flag, credential_file

    def __enter__(self):
        triton = BundledTriton.find()
        env = {k: v for k, v in stub_environment(triton).items() if not k.startswith("AWS_")}
        env["TRITON_CLOUD_CREDENTIAL_PATH"] = str(self.credential_file)
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonize-s3-"))
        backends = assemble_backend_dir(triton, self.workdir / "backends")
        check_stub_environment(triton, backends / "python" / triton.stub.name, env)
        ports = choose_ports("127.0.0.1", None, None, None)
        embedded = EmbeddedServer(self.workdir, models=("onnx_model",))  # its command line, without its front
        embedded.triton, embedded.backend_dir, embedded.ports, embedded.config_name = triton, backends, ports, None
        embedded.upstream, embedded.region_prefix = Upstream(self.workdir), None
        # tritonserver itself on the test's TCP ports (no front): the flags for its Unix sockets swapped for them
        socket_flags = set(embedded.upstream.flags())
        command = [self.flag if arg.startswith("--model-repository=") else arg
                   for arg in embedded.command() if arg not in socket_flags]
        command += ["--http-address=127.0.0.1", f"--http-port={ports.http}", "--grpc-address=127.0.0.1",
                    f"--grpc-port={ports.grpc}", "--metrics-address=127.0.0.1", f"--metrics-port={ports.metrics}"]
        self.server = RunningServer(command, urls=endpoints("127.0.0.1", ports), log_path=self.workdir / "triton.log",
                                    ready_timeout=120, env=env, cwd=self.workdir)
        return self.server.start()

    def __exit__(self, *exc):
        self.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def test_deploy_pins_the_release_that_current_names(s3, push_repo, repo_copy, tmp_path):
    endpoint, bucket, client = s3
    summary = _push(push_repo, bucket, endpoint)
    deploy = ["deploy", "k8s", "--storage", f"s3://{bucket}/{PREFIX}", "--endpoint", endpoint, "--load-seconds", "5"]
    # CURRENT is read here (the test server); the pods reach the store under its in-cluster name
    result = run_cli(*deploy, push_repo, "--output-dir", tmp_path / "k8s", "--cluster-endpoint", "http://minio.minio:9000")
    assert result.exit_code == 0, result.output
    container = yaml.safe_load((tmp_path / "k8s" / "triton" / "deployment.yaml").read_text())[
        "spec"]["template"]["spec"]["containers"][0]
    assert f"--model-repository=s3://minio.minio:9000/{bucket}/{PREFIX}/{summary['release']}" in container["args"]
    isvc = list(yaml.safe_load_all((tmp_path / "k8s" / "kserve" / "inferenceservice.yaml").read_text()))[-1]
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == summary["uri"]

    _rename_first_class(repo_copy)  # not the release CURRENT names
    result = run_cli(*deploy, repo_copy, "--output-dir", tmp_path / "other")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"names {summary['release']}, but {repo_copy} is {snapshot(repo_copy).key}: push it first" in result.output
    assert not (tmp_path / "other").exists()


def test_push_refuses_a_repository_that_fails_check(s3, repo_copy):
    endpoint, bucket, client = s3
    rewrite(repo_copy / "torch_model" / "config.pbtxt", "max_batch_size: nonsense\n")
    result = run_cli(*_push_args(repo_copy, bucket, endpoint))
    assert result.exit_code == 1
    assert "fails `tritonize repo check`" in result.output and "Traceback" not in result.output
    assert not list(client.list_objects(bucket, recursive=True))


def test_missing_bucket_and_missing_credentials(s3, push_repo, monkeypatch, tmp_path):
    endpoint, bucket, client = s3
    result = run_cli(*_push_args(push_repo, bucket + "-none", endpoint))
    assert result.exit_code == 1 and f"bucket {bucket}-none does not exist" in result.output
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    result = run_cli(*_push_args(push_repo, bucket, endpoint))
    assert result.exit_code == 1 and "no credentials for the store: set AWS_ACCESS_KEY_ID" in result.output


@pytest.mark.parametrize("args, message", [
    (["s3://tritonize-x/a b"], "prefix segment 'a b'"),
    (["s3://tritonize-x/a", "--endpoint", "minio:9000"], "--endpoint takes the store's URL"),
])
def test_bad_destination_is_one_line(push_repo, args, message):
    result = run_cli("deploy", "push", *args, push_repo)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
