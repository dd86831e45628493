"""The user's card, run as written: the three commands this project exists for, in order, in an empty working
directory, on the emulated TensorRT 10.x (tests/standins/README.md) and the real embedded Triton.

    tritonize export --format onnx
    tritonize convert trt --min 1 --opt 16 --max 32
    tritonize client classify goldfish.jpg --model trt_model

Added to the card's lines only what a machine without internet needs (`--weights none`, a small `--arch`) and
where things are (`--url` of the test's server). Between the second and the third, the steps the README's happy path
takes: `repo build` and a server (trt_model's instances on KIND_CPU for the emulation, as in
tests/serve/test_emulated_trt_model.py, which says why).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import SMALL_ARCH, run_cli
from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, write_emulated_config

OFFLINE = ("--weights", "none", "--arch", SMALL_ARCH)

def top5(result) -> list[tuple[int, str]]:
    assert result.exit_code == 0, result.output
    return [(t["index"], t["label"]) for t in json.loads(result.stdout)["predictions"][0]["top_k"]]

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_the_card_runs_as_written(emulated_tensorrt, tmp_path, monkeypatch):
    from tritonize.manifest import Manifest
    from tritonize.serve.embedded import embedded_server

    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "goldfish.jpg", "goldfish.jpg")  # the one in the checkout, as a user has it

    exported = run_cli("export", "--format", "onnx", *OFFLINE)
    assert exported.exit_code == 0, exported.output
    converted = run_cli("convert", "trt", "--min", "1", "--opt", "16", "--max", "32")
    assert converted.exit_code == 0, converted.output
    plan = Manifest.load(Path("build")).plan
    assert (plan.profile.min, plan.profile.opt, plan.profile.max) == (1, 16, 32)
    assert plan.tensorrt_version == emulated_tensorrt.version and (Path("build") / plan.file).is_file()

    built = run_cli("repo", "build", "--models", "onnx_model,trt_model", "--no-ensembles")
    assert built.exit_code == 0, built.output
    write_emulated_config(Path("models"))
    with embedded_server(Path("models"), model_config_name=EMULATED_CONFIG) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        by_trt = run_cli("client", "classify", "goldfish.jpg", "--model", "trt_model", "--url", info.grpc_url, "--json")
        by_onnx = run_cli("client", "classify", "goldfish.jpg", "--model", "onnx_model", "--url", info.grpc_url, "--json")
        assert json.loads(by_trt.stdout)["model"] == "trt_model"
        assert top5(by_trt) == top5(by_onnx) and len(top5(by_trt)) == 5
