"""A plan with a second, latency optimization profile end to end (issue 27), on every emulated TensorRT: built and
checked in both profiles by `convert trt --latency-profile`, `repo build` gives trt_model a throughput group
(profile ["0"]) and a latency group (profile ["1", "0"]: the latency profile cannot take every batch up to
max_batch_size, and Triton's dynamic batcher may send any of them to any instance; config.profile_groups), the real
embedded Triton loads it, its tensorrt backend runs each batch in the profile Triton's would pick, and a batch-2
request served in the latency profile answers as onnxruntime does. `repo check` lints instance_group.profile against
the plan's recorded profiles."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import error_line, run_cli
from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, write_emulated_config


def convert(emulation, artifacts, *extra: str):
    from tritonize.releases import latest_release

    # 11.x: no release in the table runs it; a host build for the newest (TensorRT unknown) needs it named (N37)
    release = ["--triton-release", emulation.release or latest_release().release]
    result = run_cli("convert", "trt", "--artifacts", artifacts, "--precision", "fp32", "--min-batch", "1", "--opt-batch",
                     "4", "--max-batch", "4", "--builder", "tensorrt", *release, *extra)
    assert result.exit_code == 0, result.output
    return result


def build(artifacts, repo, *extra: str):
    return run_cli("repo", "build", "--artifacts", artifacts, repo, "--models", "onnx_model,trt_model", "--no-ensembles",
                   "--max-batch", "4", "--preferred", "2", *extra)


def served_profiles(log) -> set[tuple[str, int, int]]:
    """(instance, batch, profile) from the backend's log lines."""
    found = re.findall(r"(trt_model_\w+?): batch (\d+) runs in optimization profile (\d+)", log.read_text())
    return {(name, int(batch), int(profile)) for name, batch, profile in found}


def test_a_two_profile_plan_is_built_checked_served_and_answers_in_the_latency_profile(emulated_tensorrt,
                                                                                       artifacts_copy, tmp_path):
    import tritonclient.grpc as grpcclient

    from tritonize.convert import precision as prec
    from tritonize.manifest import Manifest
    from tritonize.model_repository import parse_config
    from tritonize.serve.embedded import embedded_server

    convert(emulated_tensorrt, artifacts_copy, "--latency-profile", "1,2,2")
    plan = Manifest.load(artifacts_copy).plan
    assert [p.to_dict() for p in plan.profiles] == [{"min": 1, "opt": 4, "max": 4}, {"min": 1, "opt": 2, "max": 2}]
    assert plan.latency_verification.passed and list(plan.latency_verification.batches) == ["1", "2"]
    repo = tmp_path / "models"
    built = build(artifacts_copy, repo)
    assert built.exit_code == 0, built.output
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert [(g.name, g.count, list(g.profile)) for g in config.instance_group] == [
        ("trt_model_throughput", 1, ["0"]), ("trt_model_latency", 1, ["1", "0"])]
    assert config.max_batch_size == 4
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    assert checked.exit_code == 0 and "0 error(s), 0 warning(s)" in checked.output, checked.output

    write_emulated_config(repo)
    images = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32)
    names = plan.input_name, plan.output_name
    expected = prec.run_onnx(prec.ort_session(artifacts_copy / "model.onnx"), images, *names)
    log = tmp_path / "tritonserver.log"
    with embedded_server(repo, model_config_name=EMULATED_CONFIG, log_path=log) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        client = grpcclient.InferenceServerClient(info.grpc_url)

        def infer(_):
            request = grpcclient.InferInput(names[0], list(images.shape), "FP32")
            request.set_data_from_numpy(images)
            return client.infer("trt_model", [request]).as_numpy(names[1])

        # Both instances busy: batch-2 requests reach the latency instance too (preferred batch size 2).
        with ThreadPoolExecutor(4) as pool:
            for _ in range(20):
                for answer in pool.map(infer, range(8)):
                    np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
                if ("trt_model_latency_0", 2, 1) in served_profiles(log):
                    break
        client.close()
    served = served_profiles(log)
    assert ("trt_model_latency_0", 2, 1) in served, served  # batch 2 in the latency profile
    assert ("trt_model_latency_0", 4, 0) in served  # its warmup at max_batch_size falls back to profile 0
    assert {p for name, _, p in served if name == "trt_model_throughput_0"} == {0}


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_instance_group_profiles_are_linted_against_the_plan(emulated_tensorrt, artifacts_copy, tmp_path):
    from google.protobuf import text_format

    from tritonize.model_repository import parse_config

    convert(emulated_tensorrt, artifacts_copy)  # one profile
    repo = tmp_path / "models"
    asked = build(artifacts_copy, repo, "--latency-instances", "1")
    assert error_line(asked).startswith("error: --latency-instances 1: the plan has no verified latency profile")
    convert(emulated_tensorrt, artifacts_copy, "--latency-profile", "1,2,2", "--force")
    assert build(artifacts_copy, repo, "--latency-instances", "0").exit_code == 0
    assert len(parse_config(repo / "trt_model" / "config.pbtxt").instance_group) == 1
    result = build(artifacts_copy, repo, "--latency-instances", "2", "--max-batch", "2", "--force")
    assert result.exit_code == 0, result.output
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert [(g.count, list(g.profile)) for g in config.instance_group] == [(1, ["0"]), (2, ["1"])]  # 1..2 takes all

    def lint(*profiles):
        config.max_batch_size = 4
        del config.dynamic_batching.preferred_batch_size[:]
        for warmup in config.model_warmup:
            warmup.batch_size = 1
        for group, names in zip(config.instance_group, profiles):
            del group.profile[:]
            group.profile.extend(names)
        (repo / "trt_model" / "config.pbtxt").write_text(text_format.MessageToString(config))
        result = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
        return [line for line in result.output.splitlines() if line.startswith(("error:", "warning:"))]

    assert lint(["0"], ["1"]) == [
        "error: trt_model: instance_group trt_model_latency runs in profile 1 (batch 1..2): Triton's dynamic batcher "
        "may send it any batch up to max_batch_size 4, and batch 3..4 would fail there -> fix: add profile \"0\" to "
        "that group (as `tritonize repo build` does) or lower max_batch_size"]
    assert lint(["0"], ["1", "0"]) == []
    assert lint(["0"], ["2"])[0].startswith("error: trt_model: instance_group trt_model_latency: profile 2 is not one "
                                           "of the plan's 2 optimization profile(s) (0..1)")
    assert lint(["latency"], ["1", "0"])[0].startswith("error: trt_model: config.pbtxt: instance_group trt_model_throughput: "
                                                        "profile ['latency'] names 'latency', which is not a profile index")
    assert lint(["-1"], ["1", "0"])[0].startswith("error: trt_model: config.pbtxt: instance_group trt_model_throughput: "
                                                  "profile ['-1'] names '-1', which is not a profile index")
    assert lint([" 0"], ["1st", "+0"]) == []  # a name as std::stoi reads it (Triton's GetProfileIndex): its leading integer
    # A manifest whose plan has no check of the latency profile: nothing is served beyond what was verified.
    data = json.loads((artifacts_copy / "manifest.json").read_text())
    del data["artifacts"]["tensorrt"]["latency_verification"]
    (artifacts_copy / "manifest.json").write_text(json.dumps(data))
    assert ("error: trt_model: instance_group trt_model_latency runs in profile 1, which the plan check did not verify "
            "-> fix: rebuild the plan with `tritonize convert trt --force`") in lint(["0"], ["1", "0"])
    onnx_config = parse_config(repo / "onnx_model" / "config.pbtxt")
    onnx_config.instance_group[0].profile.append("0")
    (repo / "onnx_model" / "config.pbtxt").write_text(text_format.MessageToString(onnx_config))
    assert any(line.startswith("error: onnx_model: config.pbtxt: instance_group #1 lists profile in a model of the "
                            "onnxruntime backend: Triton refuses it") for line in lint(["0"], ["1", "0"]))



@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_n32_cuda_graphs_with_latency_instances_are_captured_only_where_every_context_runs_them(emulated_tensorrt,
                                                                                                 artifacts_copy, tmp_path):
    """N32: tensorrt_backend captures every graph_spec in every execution context of an instance, one per profile of
    its group (src/instance_state.cc InitializeCudaGraph); in the latency group's profile-1 context a batch above that
    profile's max fails setInputShape and TRTv3Interface::BuildCudaGraph logs an ERROR at each load. graph_spec is
    the model's (no group has its own), so `repo build --cuda-graphs` keeps the graphs to the batches every profile
    runs (7c97878: also batch 4, outside profile 1's 1..2), and `repo check` warns of a config that does not."""
    from google.protobuf import text_format

    from tritonize.model_repository import parse_config

    convert(emulated_tensorrt, artifacts_copy, "--latency-profile", "1,2,2")  # profile 0: 1/4/4; profile 1: 1/2/2
    repo = tmp_path / "models"
    assert build(artifacts_copy, repo, "--cuda-graphs").exit_code == 0
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert [list(g.profile) for g in config.instance_group] == [["0"], ["1", "0"]]
    assert [g.batch_size for g in config.optimization.cuda.graph_spec] == [1, 2]
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    assert checked.exit_code == 0 and "0 error(s), 0 warning(s)" in checked.output, checked.output
    graph = config.optimization.cuda.graph_spec.add(batch_size=4)
    graph.input[config.input[0].name].dim.extend([3, 224, 224])
    (repo / "trt_model" / "config.pbtxt").write_text(text_format.MessageToString(config))
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    assert [line for line in checked.output.splitlines() if line.startswith(("error:", "warning:"))] == [
        "warning: trt_model: instance_group trt_model_latency runs in profile 1 (batch 1..2), where Triton's tensorrt "
        "backend also captures the CUDA graphs of batch 4 and fails, logging an ERROR for each at every load -> fix: "
        "capture graphs only for batch sizes every group's profiles run, or rebuild with `tritonize repo build --force` "
        "--cuda-graphs"]
    assert build(artifacts_copy, repo, "--cuda-graphs", "--latency-instances", "0", "--force").exit_code == 0
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert [g.batch_size for g in config.optimization.cuda.graph_spec] == [1, 2, 4]  # one profile: all it runs
