"""`tritonize convert trt` end to end on the CPU: option validation, the precision-prepared ONNX with
its verification figures (real onnxconverter-common / onnxruntime quantization runs), convert.sh, the
manifest entry, and the non-zero exit that names the GPU-box command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli


def manifest(path):
    return json.loads((path / "manifest.json").read_text())


@pytest.mark.parametrize("args,message", [
    (["--min-batch", "0"], "Invalid value for '--min-batch'"),
    (["--min-batch", "8", "--opt-batch", "4"], "min <= opt <= max"),
    (["--opt-batch", "64", "--max-batch", "32"], "min <= opt <= max"),
    (["--precision", "int4"], "int4"),
    (["--precision", "int8"], "needs --calib-images"),
    (["--opt-level", "9"], "--opt-level must be 0..5"),
    (["--hardware-compatibility", "hopper+"], "not a TensorRT level"),
    (["--triton-release", "24.1"], "YY.MM"),
    (["--triton-release", "19.01"], "unknown Triton release"),
    (["--onnx", "/nonexistent/model.onnx"], "does not exist"),
])
def test_bad_options_fail_with_one_line(small_artifacts, args, message):
    result = run_cli("convert", "trt", "--artifacts", small_artifacts, "--dry-run", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_manifest(tmp_path):
    result = run_cli("convert", "trt", "--artifacts", tmp_path, "--dry-run")
    assert result.exit_code != 0 and "tritonize export" in result.output and "--onnx FILE" in result.output


def _onnx_from_elsewhere(path, batch="N"):
    """A small classifier exported by someone else: its own tensor names, a 3x32x32 input."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv_w"),
               numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fc_w")]
    nodes = [helper.make_node("Conv", ["images", "conv_w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc_w"], ["logits"])]
    graph = helper.make_graph(nodes, "elsewhere", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_onnx_from_elsewhere(tmp_path, precision):
    """No manifest, no tritonize export: names, shape and the batch axis come from the graph."""
    onnx_file = _onnx_from_elsewhere(tmp_path / "their.onnx")
    out = tmp_path / "out"
    result = run_cli("convert", "trt", "--onnx", onnx_file, "--artifacts", out, "--precision", precision,
                     "--max-batch", "8", "--opt-batch", "4", "--triton-release", "24.10", "--dry-run")
    assert result.exit_code == 0, result.output
    data = manifest(out)
    entry = data["artifacts"]["tensorrt"]
    assert data["model"] is None and entry["status"] == "waiting_for_gpu"
    assert (entry["input_name"], entry["output_name"], entry["input_shape"]) == ("images", "logits", [3, 32, 32])
    assert "--minShapes=images:1x3x32x32" in entry["trtexec_argv_target"] and (out / entry["onnx"]["file"]).is_file()
    assert "--onnx" in entry["gpu_command"] and "images 3x32x32" in (out / "convert.sh").read_text()
    if precision == "fp16":
        assert data["artifacts"]["onnx_fp16"]["verification"]["passed"]
    repo = run_cli("repo", "build", "--artifacts", out, tmp_path / "models")
    assert repo.exit_code != 0 and "describes no torchvision model" in repo.output


def test_onnx_from_elsewhere_with_static_batch_is_refused(tmp_path):
    onnx_file = _onnx_from_elsewhere(tmp_path / "static.onnx", batch=1)
    result = run_cli("convert", "trt", "--onnx", onnx_file, "--artifacts", tmp_path / "out", "--dry-run")
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code != 0 and len(errors) == 1 and "static batch axis" in errors[0]
    assert "Traceback" not in result.output and not (tmp_path / "out" / "manifest.json").exists()


def test_onnx_from_elsewhere_cannot_calibrate_on_images(tmp_path, photo_dir):
    onnx_file = _onnx_from_elsewhere(tmp_path / "their.onnx")
    result = run_cli("convert", "trt", "--onnx", onnx_file, "--artifacts", tmp_path / "out", "--dry-run",
                     "--precision", "int8", "--calib-images", photo_dir)
    assert result.exit_code != 0 and "needs the model's preprocessing" in result.output


def test_int8_calib_dir_without_images(small_artifacts, tmp_path):
    result = run_cli("convert", "trt", "--artifacts", small_artifacts, "--dry-run", "--precision", "int8", "--calib-images", tmp_path)
    assert result.exit_code != 0 and "no images in" in result.output


@pytest.fixture(scope="module")
def fp16_dry_run(small_artifacts, photo_dir, tmp_path_factory):
    import shutil

    out = tmp_path_factory.mktemp("fp16") / "art"
    shutil.copytree(small_artifacts, out)
    result = run_cli("convert", "trt", "--min-batch", "1", "--opt-batch", "16", "--max-batch", "32", "--dry-run", "--artifacts", out,
                     "--calib-images", photo_dir, "--calib-count", "10", "--triton-release", "24.04")
    return out, result


def test_dry_run_writes_fp16_variant_with_cpu_figures(fp16_dry_run):
    out, result = fp16_dry_run
    assert result.exit_code == 0, result.output
    entry = manifest(out)["artifacts"]["onnx_fp16"]
    assert entry["status"] == "verified" and (out / entry["file"]).is_file()
    assert entry["verification"]["passed"] and set(entry["verification"]["batches"]) == {"1", "7", "32"}
    assert entry["held_out"]["batch"] == 4  # 14 photos: 10 calibrate, 4 held out
    assert 0 < entry["verification"]["worst_rel_to_scale"] < 1e-2
    assert entry["true_fp16"]["finite"] and 0 < entry["true_fp16"]["rel_to_scale"] < 1e-2
    import onnx

    source = onnx.load(str(out / "model.onnx"))
    assert "all_fp16_true" in entry and entry["nodes_total"] == len(source.graph.node)

    model = onnx.load(str(out / entry["file"]))
    types = {init.data_type for init in model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types  # really converted
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # FP32 I/O kept


def test_dry_run_writes_reproducer_and_waiting_entry(fp16_dry_run):
    out, result = fp16_dry_run
    trt = manifest(out)["artifacts"]["tensorrt"]
    assert trt["status"] == "waiting_for_gpu" and "file" not in trt
    assert trt["profile"] == {"min": 1, "opt": 16, "max": 32} and trt["precision"] == "fp16"
    assert trt["target"] == {"triton_release": "24.04", "image": "nvcr.io/nvidia/tritonserver:24.04-py3", "tensorrt": "8.6.3.1"}
    assert "--fp16" in trt["trtexec_argv_target"]  # Triton 24.04 runs TensorRT 8.6: weakly typed flags
    assert "--stronglyTyped" in trt["trtexec_argv"]["10"]
    assert not (out / "model.plan").exists()
    script = out / "convert.sh"
    assert os.access(script, os.X_OK)
    text = script.read_text()
    for flag in ("--minShapes=input:1x3x224x224", "--optShapes=input:16x3x224x224", "--maxShapes=input:32x3x224x224",
                 "--onnx=model_fp16.onnx", "docker run", "nvcr.io/nvidia/tritonserver:24.04-py3"):
        assert flag in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "on the GPU box run: tritonize convert trt" in result.output
    assert result.output.count("on the GPU box run") == 1  # said once (before: by the stage and again by the CLI)


def test_reproducer_runs_with_stand_in_trtexec(fp16_dry_run, standin_trtexec, tmp_path):
    """convert.sh against the STAND-IN trtexec: right flags for the reported major, publish by rename."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(fp16_dry_run[0], out)
    env = {**os.environ, "TRTEXEC": str(standin_trtexec), "STANDIN_MODE": "ok"}
    done = subprocess.run(["bash", str(out / "convert.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log = (out / "convert.log").read_text()
    assert "--stronglyTyped" in log and "--memPoolSize=workspace:4096 " in log  # stand-in reports TensorRT 10.5
    assert (out / "model.plan").is_file() and not (out / ".model.plan.partial").exists()
    assert not list(out.glob("*.lock"))  # N30: trtexec's timing-cache lock file is not left behind
    (out / "model.plan").unlink()
    env["STANDIN_MODE"] = "fail"
    done = subprocess.run(["bash", str(out / "convert.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and not (out / "model.plan").exists()


def test_without_dry_run_exits_nonzero_naming_the_gpu_command(artifacts_copy):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32")
    assert result.exit_code == 3
    line = [each for each in result.output.splitlines() if each.startswith("error:")]
    assert len(line) == 1 and "on the GPU box run: tritonize convert trt" in line[0] and "--precision fp32" in line[0]
    assert result.output.count("on the GPU box run") == 1  # said once, in the error line
    assert manifest(artifacts_copy)["artifacts"]["tensorrt"]["status"] == "waiting_for_gpu"
    assert not (artifacts_copy / "model.plan").exists()


def test_int8_variant_calibrated_on_photos(artifacts_copy, photo_dir):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--dry-run", "--precision", "int8",
                     "--calib-images", photo_dir, "--calib-count", "10")
    assert result.exit_code == 0, result.output
    entry = manifest(artifacts_copy)["artifacts"]["onnx_int8"]
    assert entry["status"] == "verified"
    q = entry["quantization"]
    import onnx

    convolutions = [n for n in onnx.load(str(artifacts_copy / "model.onnx")).graph.node if n.op_type == "Conv"]
    assert q["zero_points_all_zero"] and q["zero_point_dtypes"] == ["int8"]
    assert q["per_channel_weight_dq"] >= len(convolutions) >= 3  # every convolution's weights, per channel
    v = entry["verification"]
    assert v["inputs"] == "held-out real images (4, repeated to 32)" and v["passed"]  # the max batch runs too
    assert 0 < v["worst_rel_to_scale"] < 0.10
    assert "--int8" not in manifest(artifacts_copy)["artifacts"]["tensorrt"]["trtexec_argv"]["10"]
    assert "--int8" in manifest(artifacts_copy)["artifacts"]["tensorrt"]["trtexec_argv"]["8"]


def test_int8_on_synthetic_data_says_accuracy_unknown(artifacts_copy):
    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--dry-run", "--precision", "int8",
                     "--calib-images", "synthetic", "--calib-count", "8")
    assert result.exit_code == 0, result.output
    assert "INT8 ACCURACY IS UNKNOWN" in result.output
    assert manifest(artifacts_copy)["artifacts"]["onnx_int8"]["status"] == "unverified_synthetic_calibration"


def test_convert_decides_itself_what_is_up_to_date(artifacts_copy):
    args = ["convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--dry-run"]
    assert run_cli(*args).exit_code == 0
    first = manifest(artifacts_copy)["artifacts"]["tensorrt"]
    again = run_cli(*args)
    assert again.exit_code == 0 and "tensorrt: waiting for GPU" in again.output and "still waiting for a GPU box" in again.output
    assert manifest(artifacts_copy)["artifacts"]["tensorrt"] == first
    changed = run_cli(*args, "--max-batch", "16", "--opt-batch", "8")
    assert changed.exit_code == 0 and "tensorrt: waiting for GPU" in changed.output
    assert manifest(artifacts_copy)["artifacts"]["tensorrt"]["profile"] == {"min": 1, "opt": 8, "max": 16}
    # Without --dry-run a plan still waiting for a GPU is exit code 3, up to date or not: the stage says
    # `waiting_for_gpu` also for an unchanged wait,
    unchanged = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--max-batch", "16", "--opt-batch", "8")
    assert unchanged.exit_code == 3 and "still waiting for a GPU box" in unchanged.output


def test_the_cli_maps_the_stage_status_to_the_exit_code(tmp_path, monkeypatch):
    """... and the CLI acts on the status alone: it does not reload the manifest (here there is none)."""
    from tritonize.stage import StageResult, StageStatus

    monkeypatch.setattr("tritonize.convert.convert_trt",
                        lambda artifacts, options: StageResult("convert", StageStatus.waiting_for_gpu, "run it there"))
    result = run_cli("convert", "trt", "--artifacts", tmp_path)
    assert result.exit_code == 3 and "TensorRT cannot run on this machine; run it there" in result.output
    assert run_cli("convert", "trt", "--artifacts", tmp_path, "--dry-run").exit_code == 0


@pytest.mark.parametrize("options", [
    {},
    {"precision": "fp32", "triton_release": "24.04"},
    {"profile": (2, 8, 64), "precision": "int8", "calib_images": Path("synthetic"), "calib_count": 8, "builder": "trtexec",
     "workspace_gib": 1.5, "opt_level": 5, "version_compatible": True, "hardware_compatibility": "ampere+"},
    {"timing_cache": Path("/shared/caches/t.cache"), "onnx": Path("their.onnx"), "precision": "fp32"},
])
def test_to_argv_asks_the_cli_for_exactly_these_options(options, tmp_path, monkeypatch):
    """ConvertOptions.to_argv(), parsed back by the real CLI, gives the same options: the GPU-box command
    states every non-default setting, and the CLI's defaults are the options' own."""
    from tritonize.convert import ConvertOptions, Profile
    from tritonize.stage import StageResult, StageStatus

    (tmp_path / "their.onnx").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    from tritonize.plan_settings import BuildSettings

    if "profile" in options:
        options = {**options, "profile": Profile(*options["profile"])}
    names = ("workspace_gib", "timing_cache", "opt_level", "version_compatible", "hardware_compatibility")
    settings = BuildSettings.from_cli(**{k: v for k, v in options.items() if k in names})
    wanted = ConvertOptions(**{k: v for k, v in options.items() if k not in names}, settings=settings)
    seen = []
    monkeypatch.setattr("tritonize.convert.convert_trt",
                        lambda artifacts, opts: seen.append(opts) or StageResult("convert", StageStatus.done))
    result = run_cli("convert", "trt", "--artifacts", tmp_path, *wanted.to_argv())
    assert result.exit_code == 0, result.output
    assert seen == [wanted]
