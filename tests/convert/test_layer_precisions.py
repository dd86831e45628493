"""Precision as a fact (issue 27): after each build the engine's layer precisions are read from the engine
(IEngineInspector with DETAILED profiling verbosity for the Python builders, `trtexec --profilingVerbosity=detailed
--exportLayerInfo` for trtexec and the container), recorded in the manifest, printed by `convert trt`, and an
fp16 plan that runs mostly in FP32 is flagged by `repo check`. On the emulated TensorRT 8.6, 10.x and 11.x
(rules 'layer_precision' and 'inspector' in tests/data/tensorrt_emulation_rules.json), and on NVIDIA's recorded
engines (shared/nvidia/), which the emulated ResNet-18 engines match layer for layer."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.convert.test_emulated_builds import target
from tests.emulation import ROOT


def _nvidia_engine(name: str) -> str:
    """NVIDIA's recorded inspector JSON of a ResNet-18 engine (trex example, shared/nvidia/README.md)."""
    return (ROOT / "shared" / "nvidia" / f"trex_resnet18_{name}.graph.json").read_text()


def _nvidia_counts(name: str) -> dict:
    from tritonize.convert.layers import from_engine_information

    return dict(from_engine_information(_nvidia_engine(name), "trtexec --exportLayerInfo").counts)


def convert(artifacts, builder, emulation, standins, monkeypatch, precision="fp16"):
    calibration = ["--calib-images", "synthetic"] if precision == "int8" else []
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", precision, "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", builder, "--force", *calibration, *target(emulation, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    return result, json.loads((artifacts / "manifest.json").read_text())["artifacts"]["tensorrt"]


@pytest.mark.parametrize("builder", ["tensorrt", "trtexec", "container"])
def test_the_layers_precisions_are_read_from_the_engine_and_recorded(emulated_tensorrt, standins, artifacts_copy,
                                                                    monkeypatch, builder):
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result, entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch)
    layers = entry["layers"]
    assert layers["source"] == ("IEngineInspector" if builder == "tensorrt" else "trtexec --exportLayerInfo")
    # torchvision's resnet18 built in FP16 computes as NVIDIA's recorded FP16 ResNet-18 engine does: 23 layers (the
    # convolutions fused with their ReLU and residual add, the Gemm, two pools), all FP16; the reformats and the FP16
    # graph's casts to and from the FP32 engine I/O compute nothing (8.6 builds weakly typed with --fp16; 10.x and
    # 11.x strongly typed from the FP16 graph).
    assert layers["counts"] == _nvidia_counts("fp16") == {"FP16": 23} and layers["fp32_layers"] == [], layers
    assert "layer precisions: 23 FP16 (0% of 23 layers in FP32" in result.output
    assert not [line for line in result.output.splitlines() if "FP32 layers:" in line]
    if builder == "tensorrt":  # an FP32 plan: every node FP32, as asked, so none is named
        fp32_result, fp32_entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch, precision="fp32")
        assert fp32_entry["layers"]["counts"] == _nvidia_counts("fp32") and "FP32 layers:" not in fp32_result.output


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
    n = 23  # the compute layers of a ResNet-18 engine (NVIDIA's recorded one has as many)
    flagged = f"warning: trt_model: the fp16 plan runs 100% of its layers in FP32 ({n} FP32 (100% of {n} layers in FP32"
    if weakly_typed:
        assert entry["layers"]["counts"] == {"FP32": n} and len(entry["layers"]["fp32_layers"]) == 10
        assert f"layer precisions: {n} FP32 (100% of {n} layers in FP32" in result.output
        assert f"    FP32 layers: {', '.join(entry['layers']['fp32_layers'])} ..." in result.output.splitlines()  # 10 of n
        assert flagged in checked.output and checked.exit_code == 0, checked.output
    else:
        assert entry["layers"]["counts"] == {"FP16": n}
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
    engine = json.loads(detailed)
    assert all(set(layer) >= {"Name", "LayerType", "Inputs", "Outputs"} for layer in engine["Layers"])
    # conv + relu fused, the pool, the flatten (a NoOp), the matmul; the I/O as 8.x/10.x or 11.x list it
    assert [l["LayerType"] for l in engine["Layers"]] == ["CaskConvolution", "CaskPooling", "NoOp", "CaskConvolution"]
    assert engine["Layers"][0]["Name"] == "conv + relu"
    if emulated_tensorrt.version.startswith("11."):
        assert "Bindings" not in engine and [t["Name"] for t in engine["I/O Tensors"]] == ["images", "logits"]
        assert engine["Layers"][0]["Outputs"][0]["Datatype"] == "Float" and "Format/Datatype" not in engine["Layers"][0]["Outputs"][0]
    else:
        assert engine["Bindings"] == ["images", "logits"] and engine["Layers"][0]["Outputs"][0]["Format/Datatype"] == "Row major linear FP32"
    assert from_engine_information(detailed, "IEngineInspector").counts == {"FP32": 3}


# ---------------------------------------------------------------- NVIDIA's recorded engines (N25)

def test_n25_nvidia_fp16_engine_has_no_fp32_compute_layer():
    """N25: NVIDIA's FP16 ResNet-18 engine (trex example, A100) lists reformats ("Reformatting CopyNode ...",
    NoOp) and its last one writes the FP32 engine output: no layer of it computes in FP32."""
    from tritonize.convert.layers import from_engine_information

    fp16 = from_engine_information(_nvidia_engine("fp16"), "trtexec --exportLayerInfo")
    assert fp16.counts == {"FP16": 23} and fp16.fp32_layers == ()
    fp32 = from_engine_information(_nvidia_engine("fp32"), "trtexec --exportLayerInfo")
    assert fp32.counts == {"FP32": 23} and fp32.fp32_layers[:2] == ("Conv_0 + Relu_1", "MaxPool_2")


def test_n25_nvidia_qat_engine_convolutions_read_int8():
    """N25: in NVIDIA's QAT ResNet-18 engine every convolution (fused with its Q/DQ, ReLU and residual add) takes
    INT8 and some write FP32 or FP16; they all read INT8. The max pool really runs in FP32, the average pool in FP16."""
    from tritonize.convert.layers import from_engine_information

    text = _nvidia_engine("qat")
    convolutions = [l for l in json.loads(text)["Layers"] if l["LayerType"] == "CaskConvolution"]
    assert len(convolutions) == 21 and convolutions[0]["Outputs"][0]["Format/Datatype"] == "Row major linear FP32"
    qat = from_engine_information(text, "trtexec --exportLayerInfo")
    assert qat.counts == {"INT8": 21, "FP32": 1, "FP16": 1} and qat.fp32_layers == ("MaxPool_12",)


def test_n25_each_layer_counts_once_whatever_the_profiles():
    """N25: TensorRT 8.x lists every layer once per optimization profile, naming the copies "<name> [profile N]"
    (NVIDIA trex, parser.py import_graph_file); here NVIDIA's FP16 engine with a second profile's copies."""
    from tritonize.convert.layers import from_engine_information

    engine = json.loads(_nvidia_engine("fp16"))
    copies = json.loads(json.dumps(engine["Layers"]).replace('", "LayerType"', ' [profile 1]", "LayerType"'))
    assert all(l["Name"].endswith(" [profile 1]") for l in copies)
    two = json.dumps({"Layers": engine["Layers"] + copies, "Bindings": engine["Bindings"] + [
        f"{b} [profile 1]" for b in engine["Bindings"]]})
    assert from_engine_information(two, "IEngineInspector").counts == {"FP16": 23}


def test_n25_11x_names_the_data_type_in_its_own_key():
    """N25: TensorRT 11.x's inspector gives each tensor "Datatype" ("Half", "Int8", "Float") and "Format" where 8.x
    and 10.x give "Format/Datatype" (NVIDIA/TensorRT a892d22, .agents/skills/trt-perf-analysis/schemas/
    analyze-data.schema.json). NVIDIA's QAT engine in that form reads as before."""
    from tritonize.convert.layers import from_engine_information

    names = {"FP32": "Float", "FP16": "Half", "Int8": "Int8"}
    engine = json.loads(_nvidia_engine("qat"))
    for layer in engine["Layers"]:
        for tensor in layer["Inputs"] + layer["Outputs"]:
            described = tensor.pop("Format/Datatype")
            tensor["Datatype"] = next(v for k, v in names.items() if k in described)
            tensor["Format"] = described
    assert from_engine_information(json.dumps(engine), "IEngineInspector").counts == {"INT8": 21, "FP32": 1, "FP16": 1}


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18", "11.4.0.106"], indirect=True)
def test_n25_the_emulated_resnet18_engine_is_laid_out_as_nvidias(emulated_tensorrt, small_artifacts):
    """The emulated inspector lists torchvision's resnet18 as NVIDIA's recorded ResNet-18 engine lists it: the same
    convolutions, each fused with as many ReLU/residual-add layers (the downsampling ones alone), and pooling."""
    import onnx
    import tensorrt as trt
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile

    from tritonize.convert.layers import layer_precision, read_engine

    def shape(engine: dict) -> list:  # pooling is TiledPooling, CudaPooling or CaskPooling as the tactic goes
        return sorted((l["LayerType"].replace("Tiled", "Cask").replace("Cuda", "Cask"), l["Name"].count(" + ") + 1)
                      for l in engine["Layers"] if layer_precision(l))

    model = small_artifacts / "model.onnx"
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    profile = Profile().add(name, (1, 3, 224, 224), (1, 3, 224, 224), (2, 3, 224, 224))
    plan = bytes(EngineBytesFromNetwork(NetworkFromOnnxPath(str(model), strongly_typed=True),
                                        CreateConfig(profiles=[profile], profiling_verbosity=trt.ProfilingVerbosity.DETAILED))())
    assert shape(json.loads(read_engine(plan, trt))) == shape(json.loads(_nvidia_engine("fp32")))


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1", "10.5.0.18"], indirect=True)
def test_n25_a_two_profile_engine_counts_each_layer_once(emulated_tensorrt, tmp_path):
    """The emulated 8.6 lists every layer once per profile, as 8.x does ("... [profile 1]"); 10.x once."""
    import tensorrt as trt
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile

    from tests.emulation import tiny_classifier
    from tritonize.convert.layers import from_engine_information, read_engine

    profiles = [Profile().add("images", (1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16)),
                Profile().add("images", (1, 3, 16, 16), (1, 3, 16, 16), (2, 3, 16, 16))]
    network = NetworkFromOnnxPath(str(tiny_classifier(tmp_path / "tiny.onnx")),
                                  strongly_typed=not emulated_tensorrt.version.startswith("8."))
    plan = bytes(EngineBytesFromNetwork(network, CreateConfig(profiles=profiles,
                                                              profiling_verbosity=trt.ProfilingVerbosity.DETAILED))())
    engine = json.loads(read_engine(plan, trt))
    copies = [l["Name"] for l in engine["Layers"] if l["Name"].endswith(" [profile 1]")]
    assert len(copies) == (4 if emulated_tensorrt.version.startswith("8.") else 0) and len(engine["Layers"]) == 4 + len(copies)
    assert from_engine_information(json.dumps(engine), "IEngineInspector").counts == {"FP32": 3}


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1", "10.5.0.18"], indirect=True)
def test_n25_an_int8_plans_convolutions_read_int8(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """The Q/DQ graph's convolutions and Gemm compute in INT8, as in NVIDIA's recorded QAT engine, each fused with its
    DequantizeLinear layers, ReLU, residual add and QuantizeLinear; its pools too (Q/DQ sits around them in this
    graph). The 23 compute layers of NVIDIA's ResNet-18 engines, counted by what they read, not what they write."""
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result, entry = convert(artifacts_copy, "tensorrt", emulated_tensorrt, standins, monkeypatch, precision="int8")
    assert entry["layers"]["counts"] == {"INT8": 23}, entry["layers"]
