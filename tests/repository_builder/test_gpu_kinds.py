"""One plan per GPU kind, on the emulated TensorRT 8.6, 10.x and 11.x (tests/standins/README.md): plans built on
"machines" of compute capability 8.6 and 9.0 (the CUDA stand-in's TRITONIZE_EMULATED_GPU_CC), gathered by `repo
build --plans` into trt_model's `cc_model_filenames`, compared with the serving GPU by `repo check` and `serve`,
and picked by the embedded tensorrt backend by the GPU's compute capability, as Triton's tensorrt backend picks
them (tensorrt_backend src/model_state.cc)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import error_line, run_cli
from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, PHOTO, write_emulated_config

CC_ENV = "TRITONIZE_EMULATED_GPU_CC"


def convert(emulation, artifacts: Path, *extra: str):
    release = ["--triton-release", emulation.release] if emulation.release else []
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", "tensorrt", *release, *extra)
    assert result.exit_code == 0, result.output
    return result


def fleet(emulation, artifacts: Path, tmp_path: Path, monkeypatch) -> Path:
    """The artifacts converted on an 8.6 GPU, and a copy of the same export converted on a 9.0 GPU."""
    other = tmp_path / "artifacts-sm90"
    shutil.copytree(artifacts, other)
    convert(emulation, artifacts)
    monkeypatch.setenv(CC_ENV, "9.0")
    convert(emulation, other)
    monkeypatch.delenv(CC_ENV)
    return other


def build(artifacts: Path, repo: Path, *extra: str):
    return run_cli("repo", "build", "--artifacts", artifacts, repo, "--models", "onnx_model,trt_model",
                   "--no-ensembles", "--max-batch", "4", *extra)


# Which plan serves which GPU is Triton's cc_model_filenames and tritonize's repository code, the same on every
# TensorRT: one version proves it (the backend's own code runs on each in tests/serve/test_emulated_trt_model.py).
@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_plans_of_two_gpu_kinds_are_gathered_checked_and_picked_by_the_gpu(emulated_tensorrt, artifacts_copy, tmp_path,
                                                                         monkeypatch):
    from tritonize.model_repository import parse_config
    from tritonize.serve.embedded import embedded_server
    from tritonize.serve.repository import plans_missing_for_gpu

    other = fleet(emulated_tensorrt, artifacts_copy, tmp_path, monkeypatch)
    assert json.loads((other / "manifest.json").read_text())["artifacts"]["tensorrt"]["gpu"]["compute_capability"] == "9.0"
    repo = tmp_path / "models"
    built = build(artifacts_copy, repo, "--plans", other)
    assert built.exit_code == 0, built.output
    assert "a plan per GPU kind (8.6, 9.0), model_sm86.plan, model_sm90.plan hard-linked" in built.output
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert dict(config.cc_model_filenames) == {"8.6": "model_sm86.plan", "9.0": "model_sm90.plan"}
    assert not config.default_model_filename and "source.compute_capability" not in config.parameters
    assert sorted(p.name for p in (repo / "trt_model" / "1").iterdir()) == ["model_sm86.plan", "model_sm90.plan"]
    assert (repo / "trt_model" / "1" / "model_sm90.plan").read_bytes() == (other / "model.plan").read_bytes()
    assert build(artifacts_copy, repo, "--plans", other).output.count("is up to date") == 1

    # repo check: a GPU kind without a plan is one error naming it; a kind with one is none.
    missing = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "7.5")
    assert error_line(missing).startswith("error: trt_model: no plan for this GPU's compute capability 7.5 (plans for "
                                          "8.6, 9.0)"), missing.output
    assert "(compute capability from --gpu-cc)" in missing.output
    assert run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "9.0").exit_code == 0
    monkeypatch.setenv(CC_ENV, "8.9")  # no --gpu-cc: the GPU this machine's CUDA runtime sees
    seen = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
    assert "compute capability 8.9" in error_line(seen) and "from GPU 0 (Emulated GPU (tritonize tests, sm_89))" in seen.output
    assert plans_missing_for_gpu(repo, None) == [error_line(seen).split(": ", 2)[2].split(" -> fix:")[0]]

    # The embedded tensorrt backend loads the plan of the GPU it runs on (the emulation refuses any other).
    write_emulated_config(repo)
    monkeypatch.setenv(CC_ENV, "9.0")
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        classified = run_cli("client", "classify", PHOTO, "--model", "trt_model", "--url", info.grpc_url)
        assert classified.exit_code == 0, classified.output
    monkeypatch.setenv(CC_ENV, "7.5")
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        state, reason = info.models["trt_model"]
        assert state == "UNAVAILABLE" and "no plan for this GPU's compute capability 7.5 (cc_model_filenames has " \
                                          "8.6, 9.0)" in reason, info.models
        assert info.models["onnx_model"] == ("READY", "")

    # Every plan cc_model_filenames names, in every version: each missing alone in turn, then all.
    import os
    import shutil

    (repo / "trt_model" / "configs" / f"{EMULATED_CONFIG}.pbtxt").unlink()  # (KIND_CPU: for the emulation only)
    shutil.copytree(repo / "trt_model" / "1", repo / "trt_model" / "2", copy_function=os.link)
    plans = [(v, cc, f"model_sm{cc.replace('.', '')}.plan") for v in ("1", "2") for cc in ("8.6", "9.0")]
    for gone in [[plan] for plan in plans] + [plans]:
        for version, _, name in gone:
            os.link(repo / "trt_model" / version / name, tmp_path / f"kept-{version}-{name}")
            (repo / "trt_model" / version / name).unlink()
        checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "9.0")
        assert [line.split(" -> fix:")[0] for line in checked.output.splitlines() if line.startswith("error:")] == [
            f"error: trt_model: version {v}/ has no {name}, the plan cc_model_filenames names for compute capability {cc}"
            for v, cc, name in gone]
        for version, _, name in gone:
            os.link(tmp_path / f"kept-{version}-{name}", repo / "trt_model" / version / name)
            (tmp_path / f"kept-{version}-{name}").unlink()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_a_single_plan_is_compared_with_the_serving_gpu(emulated_tensorrt, artifacts_copy, tmp_path, monkeypatch):
    """The plan of an 8.6 GPU on a 7.5 GPU: `repo check` and `serve` say so in one line (before, both were silent
    and Triton failed with 'engine plan file is generated on an incompatible device')."""
    convert(emulated_tensorrt, artifacts_copy)
    repo = tmp_path / "models"
    assert build(artifacts_copy, repo).exit_code == 0
    config = (repo / "trt_model" / "config.pbtxt").read_text()
    assert 'key: "source.compute_capability"\n  value {\n    string_value: "8.6"' in config
    monkeypatch.setenv(CC_ENV, "7.5")
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
    assert error_line(checked).startswith("error: trt_model: no plan for this GPU's compute capability 7.5 (plans for "
                                          "8.6)"), checked.output
    monkeypatch.setenv(CC_ENV, "8.6")
    assert run_cli("repo", "check", repo, "--artifacts", artifacts_copy).exit_code == 0
    served = run_cli("serve", repo, "--engine", "docker", "--gpu-cc", "7.5", "--print-command")
    assert "warning: no plan for this GPU's compute capability 7.5 (plans for 8.6): Triton will not load trt_model" \
        in served.output and "docker run" in served.output
    assert error_line(run_cli("serve", repo, "--gpu-cc", "sm86")) == \
        "error: --gpu-cc takes a compute capability MAJOR.MINOR, e.g. 8.6 (got 'sm86')"


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_plans_that_cannot_serve_together_are_refused_in_one_line(emulated_tensorrt, artifacts_copy, tmp_path,
                                                                  monkeypatch):
    unconverted = tmp_path / "unconverted"
    shutil.copytree(artifacts_copy, unconverted)
    convert(emulated_tensorrt, artifacts_copy)
    repo = tmp_path / "models"
    assert error_line(build(artifacts_copy, repo, "--plans", unconverted)) == (
        f"error: --plans {unconverted}: its TensorRT plan is absent, not built: run `tritonize convert trt --artifacts "
        f"{unconverted}` on that GPU first")
    same_gpu = tmp_path / "same-gpu"
    shutil.copytree(artifacts_copy, same_gpu)
    assert error_line(build(artifacts_copy, repo, "--plans", same_gpu)) == (
        f"error: two plans for compute capability 8.6: {artifacts_copy} and {same_gpu}; give one directory per GPU kind")
    monkeypatch.setenv(CC_ENV, "9.0")
    convert(emulated_tensorrt, same_gpu, "--max-batch", "8", "--force")
    assert "its plan's batch profile is 1/2/8, the one in" in error_line(build(artifacts_copy, repo, "--plans", same_gpu))
    (same_gpu / "model.plan").write_bytes(b"changed")
    assert "model.plan has sha256" in error_line(build(artifacts_copy, repo, "--plans", same_gpu))
    assert not repo.exists()
