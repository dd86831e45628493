"""`convert cpu`: INT8 for onnxruntime's CPU kernels, served only behind its two measured gates."""

from __future__ import annotations

import onnx

from tests.conftest import run_cli
from tritonize.convert.cpu import judge_agreement, judge_speed
from tritonize.manifest import Manifest
from tritonize.model_repository import parse_config


def test_cpu_int8_is_served_only_behind_both_gates(artifacts_copy, photo_dir, tmp_path):
    gate = ["convert", "cpu", "--artifacts", artifacts_copy, "--calib-images", photo_dir, "--calib-count", "8",
            "--batch", "2", "--gate-concurrency", "1", "--duration", "1", "--rounds", "2"]
    result = run_cli(*gate, "--min-speedup", "0.01")
    assert result.exit_code == 0, result.output
    assert "speed gate through the embedded Triton server" in result.output
    entry = Manifest.load(artifacts_copy).variant("int8_cpu")
    gates = entry.cpu_serving
    assert entry.file == "model_int8_cpu.onnx" and gates.passed
    assert gates.agreement.figures["images"] == 6 and "reported, not gated" in gates.agreement.reason  # random-init
    assert len(gates.speed.figures["ratios"]) == 2 and min(gates.speed.figures["variant_infer_s"]) > 0
    # onnxruntime's CPU layout: uint8 activations fold every Relu into the quantization (TensorRT's keeps them).
    ops = [n.op_type for n in onnx.load(str(artifacts_copy / entry.file)).graph.node]
    fp32 = [n.op_type for n in onnx.load(str(artifacts_copy / "model.onnx")).graph.node]
    assert "Relu" not in ops and ops.count("QuantizeLinear") >= fp32.count("Conv") >= 3
    assert "Relu" in fp32

    repo = tmp_path / "models"
    built = run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--no-ensembles")
    assert built.exit_code == 0, built.output
    cfg = parse_config(repo / "onnx_int8_model" / "config.pbtxt")
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["source.artifact"] == "onnx_int8_cpu" and params["gate.speed"] == gates.speed.reason
    assert params["gate.agreement"] == gates.agreement.reason and cfg.instance_group[0].kind == cfg.instance_group[0].KIND_CPU
    assert not (repo / "onnx_int8_model" / "configs" / "gpu.pbtxt").exists()
    check = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
    assert check.exit_code == 0 and "0 error(s)" in check.output, check.output

    # A stricter threshold judges the recorded figures again: no server, and the variant is left out, saying why.
    strict = run_cli(*gate, "--min-speedup", "1000")
    assert strict.exit_code == 0, strict.output
    assert "speed gate through" not in strict.output and "judging them again" in strict.output
    assert not Manifest.load(artifacts_copy).variant("int8_cpu").cpu_serving.passed
    check = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
    assert check.exit_code == 1 and "has not passed `convert cpu`'s gates" in check.output
    rebuilt = run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--no-ensembles", "--force")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "skipped onnx_int8_model: left out, not 1000x faster than FP32" in rebuilt.output
    assert not (repo / "onnx_int8_model").exists() and (repo / "onnx_model").is_dir()


def test_agreement_is_gated_for_pretrained_weights_and_reported_for_random_ones():
    figures = {"images": 40, "finite": True, "top1_agreement": 0.975, "top5_overlap": 0.99, "rel_to_scale": 0.03,
               "mean_kl": 0.001}
    assert not judge_agreement(figures, pretrained=True, min_top1=0.99).passed
    assert "needs top-1 >= 99%" in judge_agreement(figures, pretrained=True, min_top1=0.99).reason
    assert judge_agreement({**figures, "top1_agreement": 1.0}, pretrained=True, min_top1=0.99).passed
    assert not judge_agreement({**figures, "top1_agreement": 1.0, "rel_to_scale": 0.2}, pretrained=True, min_top1=0.99).passed
    assert judge_agreement(figures, pretrained=False, min_top1=0.99).passed
    assert not judge_agreement({"images": 0}, pretrained=True, min_top1=0.99).passed  # no real images: unknown


def test_a_variant_not_faster_than_fp32_fails_the_speed_gate():
    figures = {"ratio": 0.97, "ratios": [0.95, 0.97, 1.02], "fp32_infer_s": [40.0, 41.0, 39.0],
               "variant_infer_s": [38.0, 39.8, 39.8], "batch": 4, "concurrency": 2, "threads": 2}
    gate = judge_speed(figures, min_speedup=1.1)
    assert not gate.passed and gate.reason.startswith("not 1.1x faster than FP32") and "0.97x" in gate.reason
    assert judge_speed({**figures, "ratio": 2.9}, min_speedup=1.1).passed
