"""torch-tensorrt's dynamo frontend (issue 27): what the builder refuses for each recorded version, the stand-in's
signature gate, and builds through each frontend on the emulated TensorRT, served by the real embedded Triton."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.convert.test_builders import job
from tritonize.convert.torch_trt import dynamo_frontend_refuses

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = json.loads((DATA / "torch_tensorrt_dynamo_signature.json").read_text())["versions"]
BUILD = ["convert", "trt", "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2", "--max-batch", "4",
         "--triton-release", "24.10", "--builder", "torch-tensorrt"]


@pytest.fixture(autouse=True)
def _pairs_otherwise(monkeypatch):
    """Why these tests may pair torch-tensorrt with a TensorRT its version does not pin (the stand-in refuses to import
    otherwise); the tests of N28 and N29 emulate the TensorRT their version pins."""
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_PAIRING", "each recorded frontend's signature, options, refusals and "
                       "engine names do not depend on the TensorRT minor it is built against: tested on the TensorRT the "
                       "other builders use (24.10's 10.5, which no torch-tensorrt pins; 11.4, which none pins yet)")


def params(version: str) -> list[str]:
    return RECORDED[version]["positional"] + RECORDED[version]["keyword_only"]


@pytest.mark.parametrize("version,change,refused", [
    ("2.9.0", {}, None),
    ("2.9.0", {"opt_level": 5}, None),  # optimization_level
    ("2.9.0", {"hardware_compatibility": "ampere+"}, None),  # hardware_compatible, new in 2.9
    ("2.5.0", {"hardware_compatibility": "ampere+"}, "--hardware-compatibility (hardware_compatible is new in 2.9)"),
    ("2.9.0", {"precision": "fp16"}, None),  # weakly typed, the FP16 flag from enabled_precisions
    ("2.13.0", {"precision": "fp16"}, "FP16 (it has no enabled_precisions: it builds the program's FP32 types)"),
    ("2.9.0", {"precision": "fp16", "fp32_layers": ("node_add3",)}, "the 1 FP32 nodes of the mixed-precision graph"),
    ("2.9.0", {"precision": "int8"}, "INT8 (that needs the Q/DQ ONNX)"),
    ("2.13.0", {"version_compatible": True}, "--version-compatible (it excludes the lean runtime from the plan"),
])
def test_the_dynamo_frontend_refuses_what_its_version_cannot_honour(version, change, refused):
    reason = dynamo_frontend_refuses(job(**change), version, params(version))
    if refused is None:
        assert reason is None
    else:
        assert reason.startswith(f"its dynamo frontend (torch-tensorrt {version}) cannot honour ") and refused in reason
        assert reason.endswith(": use --builder trtexec, tensorrt or container")


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_the_stand_in_has_the_recorded_signature_of_its_version(emulated_tensorrt, monkeypatch):
    """Each version's parameters, as recorded from pytorch/TensorRT; below 2.5 no dynamo entry point; a keyword
    the real **kwargs would silently ignore is a TypeError; the real refusals."""
    import torch

    from tests.emulation import purge

    for version in ("2.4.0", *RECORDED):
        monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", version)
        purge()
        import torch_tensorrt

        function = getattr(torch_tensorrt.dynamo, "convert_exported_program_to_serialized_trt_engine", None)
        if version == "2.4.0":
            assert function is None and hasattr(torch_tensorrt.ts, "convert_method_to_trt_engine")
            continue
        assert list(inspect.signature(function).parameters) == [*params(version), "kwargs"]
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", "2.9.0")
    purge()
    import torch_tensorrt

    program = torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(2, 4),))
    spec = [torch_tensorrt.Input(min_shape=(2, 4), opt_shape=(2, 4), max_shape=(2, 4), dtype=torch.float32)]

    convert = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine
    with pytest.raises(TypeError, match="unexpected keyword argument 'opt_level' .*would take it into \\*\\*kwargs"):
        convert(program, inputs=spec, opt_level=5)
    with pytest.raises(AssertionError, match="use_explicit_typing was set to True"):
        convert(program, inputs=spec, use_explicit_typing=True, enabled_precisions={torch.float32, torch.float16})
    with pytest.raises(ValueError, match="cross_compile_for_windows"):
        convert(program, inputs=spec, enable_cross_compile_for_windows=True)
    with pytest.raises(TypeError):
        convert(inputs=spec)  # exported_program is required


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_the_stand_in_writes_the_builder_config_the_interpreter_writes(emulated_tensorrt, tmp_path):
    import torch
    import torch_tensorrt
    from tensorrt import _plan

    program = torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(2, 4),))
    spec = [torch_tensorrt.Input(min_shape=(2, 4), opt_shape=(2, 4), max_shape=(2, 4), dtype=torch.float32)]
    cache = tmp_path / "cache" / "timing.bin"
    engine = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        program, inputs=spec, version_compatible=True, hardware_compatible=True, optimization_level=5,
        timing_cache_path=str(cache), use_explicit_typing=True)
    header = _plan.read(engine)[0]
    assert {"VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME"} <= set(header.precision["flags"])
    assert header.precision["strongly_typed"] and header.hardware_compatibility == "AMPERE_PLUS"
    assert header.builder["optimization_level"] == 5 and header.builder["profiling_verbosity"] == "LAYER_NAMES_ONLY"
    assert [t.name for t in header.inputs] == ["input"]  # the placeholder: Linear.forward(input)
    assert [t.name for t in header.outputs] == ["output0"] and cache.is_file()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_without_the_exported_program_one_line_says_how_to_export_it(emulated_tensorrt, artifacts_copy):
    data = json.loads((artifacts_copy / "manifest.json").read_text())
    del data["artifacts"]["exported_program"]
    (artifacts_copy / "manifest.json").write_text(json.dumps(data))
    result = run_cli(*BUILD, "--artifacts", artifacts_copy)
    assert result.exit_code == 3, result.output  # nothing can build: waiting for a GPU box, with the reason
    assert ("torch-tensorrt: torch-tensorrt 2.9.0 compiles torch.export's program (model.pt2), which is not exported: "
            f"run `tritonize export --format exported_program --artifacts {artifacts_copy}`") in result.output


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("flags,version,refused", [
    (["--version-compatible"], "2.9.0", "--version-compatible (it excludes the lean runtime"),
    (["--hardware-compatibility", "ampere+"], "2.5.0", "--hardware-compatibility (hardware_compatible is new in 2.9)"),
])
def test_a_refusal_is_one_line_before_anything_is_built(emulated_tensorrt, artifacts_copy, monkeypatch, flags, version,
                                                        refused):
    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", version)
    result = run_cli(*BUILD, "--artifacts", artifacts_copy, *flags)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1 and "Traceback" not in result.output
    assert errors[0].startswith(f"error: --builder torch-tensorrt: its dynamo frontend (torch-tensorrt {version}) cannot "
                                "honour ") and refused in errors[0]
    assert not (artifacts_copy / "model.plan").exists()


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
@pytest.mark.parametrize("version,frontend,io", [("2.4.0", "torchscript", ["input_0", "output_0"]),
                                                 ("2.5.0", "dynamo", ["x", "output0"])])
def test_each_version_takes_its_frontend(emulated_tensorrt, artifacts_copy, monkeypatch, version, frontend, io):
    """2.4 has no dynamo entry point: the TorchScript frontend builds; 2.5 (no use_explicit_typing, no
    hardware_compatible) builds through dynamo with only the parameters it has."""
    from tensorrt import _plan

    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_VERSION", version)
    result = run_cli(*BUILD, "--artifacts", artifacts_copy)
    assert result.exit_code == 0, result.output
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert entry["torch_tensorrt"]["frontend"] == frontend and [entry["input_name"], entry["output_name"]] == io
    assert entry["status"] == "built" and entry["verification"]["passed"]
    header = _plan.read((artifacts_copy / "model.plan").read_bytes())[0]
    assert "TF32" not in header.precision["flags"]  # disable_tf32 for an FP32 plan, in both frontends


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_dynamo_honours_the_options_the_other_builders_take(emulated_tensorrt, artifacts_copy):
    """--opt-level, --hardware-compatibility and the timing cache (named per TensorRT and GPU) reach the engine."""
    from tensorrt import _plan

    args = [*BUILD, "--artifacts", artifacts_copy, "--opt-level", "5", "--hardware-compatibility", "ampere+"]
    for reused in (False, True):
        result = run_cli(*args, "--force")
        assert result.exit_code == 0, result.output
        header = _plan.read((artifacts_copy / "model.plan").read_bytes())[0]
        assert header.builder["timing_cache_reused"] is reused
    assert header.builder["optimization_level"] == 5 and header.hardware_compatibility == "AMPERE_PLUS"
    assert header.precision["strongly_typed"] and (artifacts_copy / "timing-trt10.5.0.18-sm86.cache").is_file()


@pytest.mark.parametrize("emulated_tensorrt", ["11.4.0.106"], indirect=True)  # each version serves: test_emulated_trt_model
def test_a_dynamo_plan_is_served_and_answers_like_onnx(emulated_tensorrt, artifacts_copy, tmp_path):
    """export .pt2 -> convert trt --builder torch-tensorrt (dynamo) -> check -> repo build -> served by the real
    embedded Triton under the engine's own names x / output0 -> classify answers like onnx_model."""
    from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, PHOTO, built_repository, write_emulated_config
    from tritonize.serve.embedded import embedded_server

    repo = built_repository(emulated_tensorrt, artifacts_copy, tmp_path / "models", builder="torch-tensorrt")
    config = (repo / "trt_model" / "config.pbtxt").read_text()
    assert 'name: "x"' in config and 'name: "output0"' in config
    assert run_cli("repo", "check", repo).exit_code == 0
    write_emulated_config(repo)
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        answers = [run_cli("client", "classify", PHOTO, "--model", model, "--url", info.grpc_url, "--json")
                   for model in ("trt_model", "onnx_model")]
        assert all(a.exit_code == 0 for a in answers), answers[0].output
        labels = [[t["label"] for t in json.loads(a.stdout)["predictions"][0]["top_k"]] for a in answers]
        assert labels[0] == labels[1] and len(labels[0]) == 5


@pytest.mark.parametrize("emulated_tensorrt", ["10.3.0.26"], indirect=True)  # 24.08: torch-tensorrt 2.5.0 pins it
def test_n28_a_program_exported_under_another_torch_is_refused_in_one_line(emulated_tensorrt, artifacts_copy):
    """N28: torch-tensorrt pins torch==X.Y; a .pt2 saved under another torch (exported on one machine, compiled on the
    GPU box) fails in torch.export.load or in the conversion with an opaque error. The export's torch is in the
    manifest: a different X.Y is refused before the build, naming the export to run here (on 7c97878 it built)."""
    import torch

    data = json.loads((artifacts_copy / "manifest.json").read_text())
    data["artifacts"]["exported_program"]["tools"]["torch"] = "2.5.1+cu124"
    (artifacts_copy / "manifest.json").write_text(json.dumps(data))
    result = run_cli("convert", "trt", "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2", "--max-batch", "4",
                     "--triton-release", "24.08", "--builder", "torch-tensorrt", "--artifacts", artifacts_copy)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert errors == [f"error: --builder torch-tensorrt: model.pt2 was exported under torch 2.5.1+cu124, and torch-tensorrt "
                      f"2.5.0 runs under torch {torch.__version__} here: export it again on this machine (`tritonize export "
                      f"--format exported_program --artifacts {artifacts_copy}`)"]
    assert not (artifacts_copy / "model.plan").exists()
    data["artifacts"]["exported_program"]["tools"]["torch"] = torch.__version__.split("+")[0]  # a patch release: same pin
    (artifacts_copy / "manifest.json").write_text(json.dumps(data))
    assert run_cli("convert", "trt", "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2", "--max-batch", "4",
                   "--triton-release", "24.08", "--builder", "torch-tensorrt", "--artifacts", artifacts_copy).exit_code == 0


@pytest.mark.parametrize("emulated_tensorrt", ["11.0.0.114"], indirect=True)  # torch-tensorrt 2.13.0 pins 11.0
def test_n29_a_failed_conversion_from_2_12_is_a_runtime_error_and_a_recorded_failure(emulated_tensorrt, artifacts_copy,
                                                                                      monkeypatch):
    """N29: from 2.12 the dynamo frontend re-raises a failed conversion as RuntimeError("While interpreting the module
    got an error: ...") (pytorch/TensorRT v2.12.0 and v2.13.0 py/torch_tensorrt/dynamo/_compiler.py); before, it fell on
    its unbound interpreter_result (UnboundLocalError), which is all tritonize caught. On 7c97878 the stand-in of 2.13
    raised the old error, and the real one's RuntimeError was recorded as "torch-tensorrt failed: RuntimeError: ..."."""
    import torch
    import torch_tensorrt

    monkeypatch.setenv("STANDIN_TORCH_TENSORRT_MODE", "raise")
    assert torch_tensorrt.__version__ == "2.13.0"
    program = torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(2, 4),))
    spec = [torch_tensorrt.Input(min_shape=(2, 4), opt_shape=(2, 4), max_shape=(2, 4), dtype=torch.float32)]
    with pytest.raises(RuntimeError, match="^While interpreting the module got an error: stand-in: Conversion"):
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(program, inputs=spec)
    from tritonize.releases import latest_release

    result = run_cli("convert", "trt", "--precision", "fp32", "--min-batch", "1", "--opt-batch", "2", "--max-batch", "4",
                     "--builder", "torch-tensorrt", "--artifacts", artifacts_copy, "--triton-release",
                     latest_release().release)  # 11.0: no release in the table runs it (N37: named)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert errors == ["error: torch-tensorrt 2.13.0 could not convert model.pt2: While interpreting the module got an "
                      "error: stand-in: Conversion of function torch._ops.aten.stand_in not currently supported!; no plan "
                      "written"]
    entry = json.loads((artifacts_copy / "manifest.json").read_text())["artifacts"]["tensorrt"]
    assert entry["status"] == "failed" and not (artifacts_copy / "model.plan").exists()
