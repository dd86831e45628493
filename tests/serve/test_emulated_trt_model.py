"""The whole GPU half on the emulated TensorRT 8.6, 10.x and 11.x (tests/standins/README.md): a plan built
and checked by `convert trt`, `repo build`, trt_model served by the real embedded Triton, whose tensorrt
backend deserializes and runs the plan (through the CUDA runtime stand-in), `client classify` and
`client compare` across onnx_model, torch_model and trt_model.

One thing is changed for the emulation, and only in the test: trt_model's instances run as KIND_CPU
(a `configs/emulated.pbtxt` beside the unchanged config.pbtxt, picked with --model-config-name). Triton
core refuses a KIND_GPU instance when its own CUDA driver sees no GPU ("has kind KIND_GPU but no GPUs
are available"), before any backend runs; the emulated CUDA runtime is the backend's, out of Triton
core's reach. The backend's code from initialize() to execute() is the one a GPU box runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.cbook as cbook
import pytest

from tests.conftest import run_cli

PHOTO = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
EMULATED_CONFIG = "emulated"


def built_repository(emulation, artifacts: Path, repo: Path, builder: str = "tensorrt") -> Path:
    from tritonize.releases import latest_release

    # 11.x: no release in the table runs it; a host build for the newest (TensorRT unknown) needs it named (N37)
    release = ["--triton-release", emulation.release or latest_release().release]
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", builder, *release)
    assert result.exit_code == 0, result.output
    result = run_cli("repo", "build", "--artifacts", artifacts, repo, "--models",
                     "onnx_model,torch_model,trt_model", "--no-ensembles", "--max-batch", "4")
    assert result.exit_code == 0, result.output
    return repo


def write_emulated_config(repo: Path) -> None:
    """trt_model's config with its instances on KIND_CPU (module doc: why, and that nothing else changes)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    from tritonize.model_repository import parse_config

    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert {g.kind for g in config.instance_group} == {pb.ModelInstanceGroup.KIND_GPU}
    for group in config.instance_group:
        group.kind = pb.ModelInstanceGroup.KIND_CPU
    (repo / "trt_model" / "configs").mkdir(exist_ok=True)
    (repo / "trt_model" / "configs" / f"{EMULATED_CONFIG}.pbtxt").write_text(text_format.MessageToString(config))


def test_trt_model_serves_the_plan_and_agrees_with_the_other_backends(emulated_tensorrt, artifacts_copy, tmp_path):
    from tritonize.serve.embedded import embedded_server

    repo = built_repository(emulated_tensorrt, artifacts_copy, tmp_path / "models")
    config = (repo / "trt_model" / "config.pbtxt").read_text()
    assert '"source.tensorrt_version"' in config and "KIND_GPU" in config
    write_emulated_config(repo)
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        classified = run_cli("client", "classify", PHOTO, "--model", "trt_model", "--url", info.grpc_url, "--json")
        assert classified.exit_code == 0, classified.output
        by_onnx = run_cli("client", "classify", PHOTO, "--model", "onnx_model", "--url", info.grpc_url, "--json")
        labels = [[t["label"] for t in json.loads(out.stdout)["predictions"][0]["top_k"]] for out in (classified, by_onnx)]
        assert labels[0] == labels[1] and len(labels[0]) == 5
        compared = run_cli("client", "compare", PHOTO, PHOTO, "--models", "onnx_model,torch_model,trt_model",
                           "--min-top1-agreement", "1.0", "--repeat", "1", "--url", info.grpc_url, "--json")
        assert compared.exit_code == 0, compared.output
        report = json.loads(compared.stdout)
        assert {(p["reference"], p["candidate"]) for p in report["pairs"]} >= {("onnx_model", "trt_model"),
                                                                              ("torch_model", "trt_model")}
        assert all(p["top1_agreement"] == 1.0 and p["rel_to_scale"] < 1e-4 for p in report["pairs"])
    # The backend's stub freed every device buffer and stream it had (the CUDA stand-in's report at its exit).
    from tests.emulation import REPORT_ENV

    reports = [line.split() for line in Path(__import__("os").environ[REPORT_ENV]).read_text().splitlines()]
    assert reports and all(r[1:] == ["0", "0", "0", "0"] for r in reports), reports


def _docker_server(repo: Path, release: str):
    from tritonize.serve.docker import DockerServer
    from tritonize.serve.process import choose_ports

    ports = choose_ports("127.0.0.1", None, None, None)
    return DockerServer(repo, release, http_port=ports.http, grpc_port=ports.grpc, metrics_port=ports.metrics,
                        ready_timeout=120)


# A plan whose TensorRT a release of the table runs (8.6 proves no more than 10.x), and one whose TensorRT the table
# does not know (11.x: the release it was built for, with a warning).
@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18", "11.4.0.106"], indirect=True)
def test_serve_engine_docker_runs_the_plan_in_its_release(emulated_tensorrt, standins, artifacts_copy, tmp_path,
                                                          monkeypatch):
    """`serve --engine docker` picks the release whose TensorRT runs the plan, from the repository alone, and
    its image (the docker stand-in: STANDIN_DOCKER_SERVE) serves trt_model with that TensorRT."""
    from tritonize.serve.docker import choose_release

    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    release = emulated_tensorrt.release or "26.08"  # the table knows no release with TensorRT 11
    images = json.loads(__import__("os").environ["STANDIN_IMAGE_TRT"])
    monkeypatch.setenv("STANDIN_IMAGE_TRT", json.dumps({**images, release: emulated_tensorrt.version}))
    repo = built_repository(emulated_tensorrt, artifacts_copy, tmp_path / "models")
    choice = choose_release(None, repo)
    assert choice.release == release, choice.why
    with _docker_server(repo, choice.release) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        classified = run_cli("client", "classify", PHOTO, "--model", "trt_model", "--url", info.grpc_url)
        assert classified.exit_code == 0 and classified.output.count("\n") >= 5, classified.output


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_version_compatible_plan_loads_in_a_later_release_only_when_trusted(emulated_tensorrt, standins,
                                                                               artifacts_copy, tmp_path, monkeypatch):
    """A version-compatible plan of 24.08's TensorRT 10.3 (trtexec) served by 24.10 (10.5): `serve --engine
    docker` passes --backend-config=tensorrt,version-compatible=true and it serves; without that flag the
    image's Triton refuses it at start, as its native tensorrt backend does."""
    import subprocess

    from tritonize.serve.docker import choose_release, docker_command

    monkeypatch.setenv("STANDIN_DOCKER_SERVE", "1")
    monkeypatch.setenv("STANDIN_TRT_VERSION", "10.3.0.26")
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", "trtexec", "--triton-release", "24.08", "--version-compatible")
    assert result.exit_code == 0, result.output
    repo = tmp_path / "models"
    assert run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--models", "onnx_model,trt_model",
                   "--no-ensembles", "--max-batch", "4").exit_code == 0
    assert choose_release("24.10", repo).release == "24.10"
    with _docker_server(repo, "24.10") as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
    untrusted = [a for a in docker_command(repo, "24.10") if not a.startswith("--backend-config")]
    refused = subprocess.run(untrusted, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "failed to load 'trt_model'" in refused.stderr
    assert "engine_host_code_allowed" in refused.stderr
