"""Precision as a fact (issue 27): after each build the engine's layer precisions are read from the engine
(IEngineInspector with DETAILED profiling verbosity for the Python builders, `trtexec --profilingVerbosity=detailed
--exportLayerInfo` for trtexec and the container), recorded in the manifest, printed by `convert trt`, and an
fp16 plan that runs mostly in FP32 is flagged by `repo check`. On the emulated TensorRT 8.6, 10.x and 11.x
(rules 'layer_precision' in tests/data/tensorrt_emulation_rules.json)."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.conftest import run_cli
from tests.convert.test_emulated_builds import target


def convert(artifacts, builder, emulation, standins, monkeypatch, precision="fp16"):
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", precision, "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", builder, "--force", *target(emulation, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    return result, json.loads((artifacts / "manifest.json").read_text())["artifacts"]["tensorrt"]


@pytest.mark.parametrize("builder", ["tensorrt", "trtexec", "container"])
def test_the_layers_precisions_are_read_from_the_engine_and_recorded(emulated_tensorrt, standins, artifacts_copy,
                                                                    monkeypatch, builder):
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result, entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch)
    layers = entry["layers"]
    assert layers["source"] == ("IEngineInspector" if builder == "tensorrt" else "trtexec --exportLayerInfo")
    # The export's ONNX nodes (resnet18: 49) and the FP16 graph's input and output casts all run in FP16, but the
    # cast back to the FP32 output; 8.6 builds weakly typed with --fp16 (the output cast too).
    nodes = len(onnx.load(str(artifacts_copy / "model.onnx"), load_external_data=False).graph.node)
    fp32 = 0 if emulated_tensorrt.version.startswith("8.") else 1
    assert layers["counts"] == {"FP16": nodes + 2 - fp32, **({"FP32": fp32} if fp32 else {})}, layers
    assert len(layers["fp32_layers"]) == fp32
    assert f"layer precisions: {nodes + 2 - fp32} FP16" in result.output
    # The FP32 layers of a reduced-precision plan are named, all of them here (no "..."): the output cast.
    assert [line for line in result.output.splitlines() if "FP32 layers:" in line] == (
        [f"    FP32 layers: {layers['fp32_layers'][0]}"] if fp32 else [])
    if builder == "tensorrt":  # an FP32 plan: every node FP32, as asked, so none is named
        fp32_result, fp32_entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch, precision="fp32")
        assert fp32_entry["layers"]["counts"] == {"FP32": nodes} and "FP32 layers:" not in fp32_result.output


@pytest.mark.parametrize("emulated_tensorrt,builder", [("8.6.3.1", "tensorrt"), ("8.6.3.1", "trtexec"),
                                                       ("11.4.0.106", "tensorrt")], indirect=["emulated_tensorrt"])
def test_an_fp16_plan_that_runs_mostly_fp32_is_flagged(emulated_tensorrt, standins, artifacts_copy, monkeypatch,
                                                       tmp_path, builder):
    """TensorRT 8.6 builds weakly typed: --fp16 only permits FP16, and TensorRT keeps FP32 kernels where they are
    faster (the emulation: where STANDIN_TRT_FP32_KERNELS says). 10.x and 11.x build strongly typed from the FP16
    graph: the types are the graph's, whatever the kernels' speed."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    monkeypatch.setenv("STANDIN_TRT_FP32_KERNELS", "*")
    result, entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch)
    weakly_typed = emulated_tensorrt.version.startswith("8.")
    repo = tmp_path / "models"
    assert run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--models", "trt_model",
                   "--no-ensembles", "--max-batch", "4").exit_code == 0
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    n = len(onnx.load(str(artifacts_copy / "model.onnx"), load_external_data=False).graph.node) + 2  # + the casts
    flagged = f"warning: trt_model: the fp16 plan runs 100% of its layers in FP32 ({n} FP32 (100% of {n} layers in FP32"
    if weakly_typed:
        assert entry["layers"]["counts"] == {"FP32": n} and len(entry["layers"]["fp32_layers"]) == 10
        assert f"layer precisions: {n} FP32 (100% of {n} layers in FP32" in result.output
        assert f"    FP32 layers: {', '.join(entry['layers']['fp32_layers'])} ..." in result.output.splitlines()  # 10 of n
        assert flagged in checked.output and checked.exit_code == 0, checked.output
    else:
        assert entry["layers"]["counts"]["FP16"] == n - 1
        assert "0 error(s), 0 warning(s)" in checked.output and checked.exit_code == 0, checked.output


def test_below_detailed_verbosity_the_inspector_gives_names_only(emulated_tensorrt, tmp_path):
    """A plan built without DETAILED profiling verbosity (TensorRT's default is LAYER_NAMES_ONLY; Polygraphy's
    CreateConfig asks for DETAILED unless told) names its layers only: the precisions are unknown, never guessed."""
    import tensorrt as trt

    from tests.emulation import tiny_classifier
    from tests.emulation.test_emulation import _build
    from tritonize.convert.layers import from_engine_information, read_engine

    onnx = tiny_classifier(tmp_path / "tiny.onnx")
    names_only = read_engine(_build(trt, onnx, profiling_verbosity=trt.ProfilingVerbosity.LAYER_NAMES_ONLY), trt)
    assert json.loads(names_only)["Layers"] and all(isinstance(l, str) for l in json.loads(names_only)["Layers"])
    assert from_engine_information(names_only, "IEngineInspector") is None
    detailed = read_engine(_build(trt, onnx, profiling_verbosity=trt.ProfilingVerbosity.DETAILED), trt)
    layer = json.loads(detailed)["Layers"][0]
    assert set(layer) >= {"Name", "LayerType", "Inputs", "Outputs"} and "FP32" in layer["Outputs"][0]["Format/Datatype"]
    assert json.loads(detailed)["Bindings"] == ["images", "logits"]
    assert from_engine_information(detailed, "IEngineInspector").counts == {"FP32": len(json.loads(detailed)["Layers"])}
