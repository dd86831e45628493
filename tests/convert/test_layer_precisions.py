"""Precision as a fact (issue 27): after each build the engine's layer precisions are read from the engine
(IEngineInspector with DETAILED profiling verbosity for the Python builders, `trtexec --profilingVerbosity=detailed
--exportLayerInfo` for trtexec and the container), recorded in the manifest, printed by `convert trt`, and an
fp16 plan that runs mostly in FP32 is flagged by `repo check`. On the emulated TensorRT 8.6, 10.x and 11.x
(rules 'layer_precision' and 'inspector' in tests/data/tensorrt_emulation_rules.json), on inspector JSON written
here as real engines list their layers (tests/data/nvidia_facts/), and on NVIDIA's recorded ResNet-18 engines where
a copy of NVIDIA/TensorRT is at hand (tests/nvidia_engines.py), which the emulated ResNet-18 engines match."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.conftest import SMALL_ARCH, run_cli
from tests.convert.test_emulated_builds import target
from tests.nvidia_engines import fixture, nvidia_engine

# What NVIDIA's recorded ResNet-18 engines (trex examples, A100) read as; test_n25_nvidias_recorded_engines checks it.
RESNET18_LAYERS = 23  # compute layers: 20 convolutions and the Gemm (with the ReLU and residual add after them), 2 pools
NVIDIA_QAT_COUNTS = {"INT8": 21, "FP32": 1, "FP16": 1}  # the max pool runs in FP32, the average pool in FP16
# (LayerType, how many network layers it fuses) -> how many, pooling's CudaPooling/TiledPooling read as CaskPooling
RESNET18_LAYOUT = {("CaskConvolution", 1): 4, ("CaskConvolution", 2): 9, ("CaskConvolution", 3): 8, ("CaskPooling", 1): 2}


# The suite's own classifier (tests/suite_model.py) fused as ResNet-18 is: its 3 convolutions (each with its batch
# norm, ReLU and, for the second of its block, the residual add), the Gemm and 2 pools.
SUITE_LAYERS = 6


def model_layers(artifacts) -> int:
    """The compute layers of the session's artifacts' model: SUITE_LAYERS under `make test`, RESNET18_LAYERS for
    resnet18. Other archs lay out otherwise (`make mutation` exports squeezenet1_1, 38 layers on the emulated
    inspector): those tests skip."""
    arch = json.loads((artifacts / "manifest.json").read_text())["model"]["arch"]
    known = {SMALL_ARCH: SUITE_LAYERS, "resnet18": RESNET18_LAYERS}
    if arch not in known:
        pytest.skip(f"counts the layers of the suite's classifier or resnet18; the session's artifacts are {arch}")
    return known[arch]


def layout(engine: dict) -> dict:
    from tritonize.convert.layers import layer_precision

    return dict(Counter((layer["LayerType"].replace("Tiled", "Cask").replace("Cuda", "Cask"), layer["Name"].count(" + ") + 1)
                        for layer in engine["Layers"] if layer_precision(layer)))


def read(text: str):
    from tritonize.convert.layers import from_engine_information

    return from_engine_information(text, "trtexec --exportLayerInfo")


def with_profile_copies(text: str) -> str:
    """The inspector JSON as 8.x lists an engine of two profiles: each layer and binding again, "... [profile 1]"."""
    engine = json.loads(text)
    copies = json.loads(json.dumps(engine["Layers"]).replace('", "LayerType"', ' [profile 1]", "LayerType"'))
    assert copies and all(layer["Name"].endswith(" [profile 1]") for layer in copies)
    return json.dumps({"Layers": engine["Layers"] + copies,
                       "Bindings": engine["Bindings"] + [f"{b} [profile 1]" for b in engine["Bindings"]]})


def as_11x(text: str) -> str:
    """The inspector JSON as 11.x writes each tensor: "Datatype" and "Format" where 8.x and 10.x give "Format/Datatype"."""
    engine = json.loads(text)
    names = {"FP32": "Float", "FP16": "Half", "Int8": "Int8"}
    for layer in engine["Layers"]:
        for tensor in layer["Inputs"] + layer["Outputs"]:
            described = tensor.pop("Format/Datatype")
            tensor["Datatype"], tensor["Format"] = next(v for k, v in names.items() if k in described), described
    return json.dumps(engine)


def convert(artifacts, builder, emulation, standins, monkeypatch, precision="fp16"):
    calibration = ["--calib-images", "synthetic"] if precision == "int8" else []
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", precision, "--min-batch", "1", "--opt-batch", "2",
                     "--max-batch", "4", "--builder", builder, "--force", *calibration, *target(emulation, standins, monkeypatch))
    assert result.exit_code == 0, result.output
    return result, json.loads((artifacts / "manifest.json").read_text())["artifacts"]["tensorrt"]


# The inspector's output differs by TensorRT version: the Python builder reads it on each. trtexec's --exportLayerInfo
# (and the container's trtexec) writes the same inspector's JSON: once each, on the two other formats' ends (8.x
# weakly typed with --fp16, 11.x's separate Datatype), proves their path.
@pytest.mark.parametrize("emulated_tensorrt,builder", [
    ("8.6.3.1", "tensorrt"), ("10.5.0.18", "tensorrt"), ("11.4.0.106", "tensorrt"), ("8.6.3.1", "trtexec"),
    ("11.4.0.106", "container")], indirect=["emulated_tensorrt"])
def test_the_layers_precisions_are_read_from_the_engine_and_recorded(emulated_tensorrt, standins, artifacts_copy,
                                                                    monkeypatch, builder):
    n = model_layers(artifacts_copy)
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result, entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch)
    layers = entry["layers"]
    assert layers["source"] == ("IEngineInspector" if builder == "tensorrt" else "trtexec --exportLayerInfo")
    # A ResNet built in FP16 computes as NVIDIA's recorded FP16 ResNet-18 engine does: resnet18's 23 layers (the
    # convolutions fused with their ReLU and residual add, the Gemm, two pools), the suite's classifier's 6, all FP16; the reformats and the FP16
    # graph's casts to and from the FP32 engine I/O compute nothing (8.6 builds weakly typed with --fp16; 10.x and
    # 11.x strongly typed from the FP16 graph).
    assert layers["counts"] == {"FP16": n} and layers["fp32_layers"] == [], layers
    assert f"layer precisions: {n} FP16 (0% of {n} layers in FP32" in result.output
    assert not [line for line in result.output.splitlines() if "FP32 layers:" in line]
    if builder == "tensorrt":  # an FP32 plan: every node FP32, as asked, so none is named
        fp32_result, fp32_entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch, precision="fp32")
        assert fp32_entry["layers"]["counts"] == {"FP32": n} and "FP32 layers:" not in fp32_result.output


@pytest.mark.parametrize("emulated_tensorrt,builder", [("8.6.3.1", "tensorrt"), ("8.6.3.1", "trtexec"),
                                                       ("11.4.0.106", "tensorrt")], indirect=["emulated_tensorrt"])
def test_an_fp16_plan_that_runs_mostly_fp32_is_flagged(emulated_tensorrt, standins, artifacts_copy, monkeypatch,
                                                       tmp_path, builder):
    """TensorRT 8.6 builds weakly typed: --fp16 only permits FP16, and TensorRT keeps FP32 kernels where they are
    faster (the emulation: where STANDIN_TRT_FP32_KERNELS says). 10.x and 11.x build strongly typed from the FP16
    graph: the types are the graph's, whatever the kernels' speed."""
    n = model_layers(artifacts_copy)
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    monkeypatch.setenv("STANDIN_TRT_FP32_KERNELS", "*")
    result, entry = convert(artifacts_copy, builder, emulated_tensorrt, standins, monkeypatch)
    weakly_typed = emulated_tensorrt.version.startswith("8.")
    repo = tmp_path / "models"
    assert run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--models", "trt_model",
                   "--no-ensembles", "--max-batch", "4").exit_code == 0
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    flagged = f"warning: trt_model: the fp16 plan runs 100% of its layers in FP32 ({n} FP32 (100% of {n} layers in FP32"
    if weakly_typed:
        assert entry["layers"]["counts"] == {"FP32": n} and len(entry["layers"]["fp32_layers"]) == min(n, 10)
        assert f"layer precisions: {n} FP32 (100% of {n} layers in FP32" in result.output
        more = " ..." if n > 10 else ""  # 10 named
        assert f"    FP32 layers: {', '.join(entry['layers']['fp32_layers'])}{more}" in result.output.splitlines()
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
    assert json.loads(names_only)["Layers"] and all(isinstance(layer, str) for layer in json.loads(names_only)["Layers"])
    assert from_engine_information(names_only, "IEngineInspector") is None
    detailed = read_engine(_build(trt, onnx, profiling_verbosity=trt.ProfilingVerbosity.DETAILED), trt)
    engine = json.loads(detailed)
    assert all(set(layer) >= {"Name", "LayerType", "Inputs", "Outputs"} for layer in engine["Layers"])
    # conv + relu fused, the pool, the flatten (a NoOp), the matmul; the I/O as 8.x/10.x or 11.x list it
    assert [layer["LayerType"] for layer in engine["Layers"]] == ["CaskConvolution", "CaskPooling", "NoOp", "CaskConvolution"]
    assert engine["Layers"][0]["Name"] == "conv + relu"
    if emulated_tensorrt.version.startswith("11."):
        assert "Bindings" not in engine and [t["Name"] for t in engine["I/O Tensors"]] == ["images", "logits"]
        assert engine["Layers"][0]["Outputs"][0]["Datatype"] == "Float" and "Format/Datatype" not in engine["Layers"][0]["Outputs"][0]
    else:
        assert engine["Bindings"] == ["images", "logits"] and engine["Layers"][0]["Outputs"][0]["Format/Datatype"] == "Row major linear FP32"
    assert from_engine_information(detailed, "IEngineInspector").counts == {"FP32": 3}


# ---------------------------------------------------------------- engines as TensorRT lists them (N25)

def test_n25_an_fp16_engine_has_no_fp32_compute_layer():
    """N25: an FP16 engine lists reformats ("Reformatting CopyNode ...", Reformat or NoOp) between formats and one
    writing its FP32 output, and a reshape as a NoOp: none of them computes, so no layer of it is FP32."""
    fp16 = read(fixture("fp16"))
    assert fp16.counts == {"FP16": 6} and fp16.fp32_layers == ()
    fp32 = read(fixture("fp32"))
    assert fp32.counts == {"FP32": 6} and fp32.fp32_layers[:3] == ("Conv_0 + Relu_1", "MaxPool_2", "Conv_3 + Relu_4")


def test_n25_a_qat_engines_convolutions_read_int8():
    """N25: a Q/DQ engine's convolutions (fused with their weights' QuantizeLinear, ReLU and residual add) read INT8
    and may write FP32, FP16 or INT8; the QuantizeLinear before each is a Reformat. They count as INT8."""
    text = fixture("qat")
    convolutions = [layer for layer in json.loads(text)["Layers"] if layer["LayerType"] == "CaskConvolution"]
    assert {c["Outputs"][0]["Format/Datatype"] for c in convolutions} == {
        "Row major linear FP32", "Thirty-two wide channel vectorized row major Int8 format",
        "Thirty-two wide channel vectorized row major FP16 format"}
    qat = read(text)
    assert qat.counts == {"INT8": 4, "FP32": 1, "FP16": 1} and qat.fp32_layers == ("MaxPool_10",)


def test_n25_each_layer_counts_once_whatever_the_profiles():
    """N25: TensorRT 8.x lists every layer once per optimization profile, naming the copies "<name> [profile N]"
    (NVIDIA trex, parser.py import_graph_file)."""
    assert read(fixture("fp16_two_profiles")).counts == {"FP16": 3}
    assert read(with_profile_copies(fixture("fp16"))).counts == {"FP16": 6}


def test_n25_11x_names_the_data_type_in_its_own_key():
    """N25: TensorRT 11.x's inspector gives each tensor "Datatype" ("Half", "Int8", "Float") and "Format" where 8.x
    and 10.x give "Format/Datatype" (NVIDIA/TensorRT a892d22, .agents/skills/trt-perf-analysis/schemas/
    analyze-data.schema.json), and the engine's "I/O Tensors" where they give "Bindings"."""
    engine = fixture("11x_qat")
    assert "Format/Datatype" not in engine and "Bindings" not in engine
    assert read(engine).counts == {"INT8": 2, "FP32": 1, "FP16": 1}
    assert read(as_11x(fixture("qat"))).counts == read(fixture("qat")).counts


def test_n25_nvidias_recorded_engines():
    """N25's done-when on NVIDIA's own ResNet-18 engines (trex examples; not committed, see tests/nvidia_engines.py):
    FP16, 0 FP32 compute layers; QAT, every convolution reads INT8; 8.x's profile copies and 11.x's Datatype key
    change no count; the layout the emulated ResNet-18 engine is compared with is theirs."""
    fp16, fp32, qat = (nvidia_engine(name) for name in ("fp16", "fp32", "qat"))
    assert read(fp16).counts == {"FP16": RESNET18_LAYERS} and read(fp16).fp32_layers == ()
    assert read(fp32).counts == {"FP32": RESNET18_LAYERS}
    convolutions = [layer for layer in json.loads(qat)["Layers"] if layer["LayerType"] == "CaskConvolution"]
    assert len(convolutions) == 21 and all("Int8" in c["Inputs"][0]["Format/Datatype"] for c in convolutions)
    assert read(qat).counts == NVIDIA_QAT_COUNTS and read(qat).fp32_layers == ("MaxPool_12",)
    assert read(with_profile_copies(fp16)).counts == {"FP16": RESNET18_LAYERS}
    assert read(as_11x(qat)).counts == NVIDIA_QAT_COUNTS
    assert layout(json.loads(fp32)) == layout(json.loads(fp16)) == RESNET18_LAYOUT


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18", "11.4.0.106"], indirect=True)
def test_n25_the_emulated_resnet18_engine_is_laid_out_as_nvidias(emulated_tensorrt, resnet18_artifacts):
    """The emulated inspector lists torchvision's resnet18 as NVIDIA's recorded ResNet-18 engine lists it
    (RESNET18_LAYOUT): the same convolutions, each fused with as many ReLU/residual-add layers (the downsampling
    ones alone), and pooling."""
    import onnx
    import tensorrt as trt
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile

    from tritonize.convert.layers import read_engine

    model = resnet18_artifacts / "model.onnx"
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    profile = Profile().add(name, (1, 3, 224, 224), (1, 3, 224, 224), (2, 3, 224, 224))
    plan = bytes(EngineBytesFromNetwork(NetworkFromOnnxPath(str(model), strongly_typed=True),
                                        CreateConfig(profiles=[profile], profiling_verbosity=trt.ProfilingVerbosity.DETAILED))())
    assert layout(json.loads(read_engine(plan, trt))) == RESNET18_LAYOUT


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
    copies = [layer["Name"] for layer in engine["Layers"] if layer["Name"].endswith(" [profile 1]")]
    assert len(copies) == (4 if emulated_tensorrt.version.startswith("8.") else 0) and len(engine["Layers"]) == 4 + len(copies)
    assert from_engine_information(json.dumps(engine), "IEngineInspector").counts == {"FP32": 3}


@pytest.mark.parametrize("emulated_tensorrt", ["8.6.3.1", "10.5.0.18"], indirect=True)
def test_n25_an_int8_plans_convolutions_read_int8(emulated_tensorrt, standins, artifacts_copy, monkeypatch):
    """The Q/DQ graph's convolutions and Gemm compute in INT8, as in NVIDIA's recorded QAT engine, each fused with its
    DequantizeLinear layers, ReLU, residual add and QuantizeLinear; its pools too (Q/DQ sits around them in this
    graph). The 23 compute layers of NVIDIA's ResNet-18 engines, counted by what they read, not what they write."""
    n = model_layers(artifacts_copy)
    monkeypatch.setenv("STANDIN_TRT_VERSION", emulated_tensorrt.version)
    result, entry = convert(artifacts_copy, "tensorrt", emulated_tensorrt, standins, monkeypatch, precision="int8")
    assert entry["layers"]["counts"] == {"INT8": n}, entry["layers"]
