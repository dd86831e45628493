"""Triton's TensorRT options in `repo build` (issue 27): `--cuda-graphs` writes optimization.cuda.graphs with a
graph_spec per batch size (1, the preferred sizes, max_batch_size, within the plan's profile), `repo check` lints
graph specs as Triton's tensorrt backend validates them (src/instance_state.cc ValidateGraphSpec) and against the
plan's profile, and the real embedded Triton loads the config and serves trt_model (its Python-based tensorrt
backend takes the graphs option and captures nothing, as Triton's own backend ignores it on a CPU instance)."""

from __future__ import annotations

import pytest

from tests.conftest import error_line, run_cli
from tests.repository_builder.test_gpu_kinds import build, convert
from tests.serve.test_emulated_trt_model import EMULATED_CONFIG, PHOTO, write_emulated_config


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_cuda_graphs_are_written_linted_and_loaded(emulated_tensorrt, artifacts_copy, tmp_path):
    from google.protobuf import text_format

    from tritonize.model_repository import parse_config
    from tritonize.serve.embedded import embedded_server

    convert(emulated_tensorrt, artifacts_copy)  # profile 1/2/4
    repo = tmp_path / "models"
    built = build(artifacts_copy, repo, "--cuda-graphs", "--preferred", "2,4,8")
    assert built.exit_code == 0, built.output
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert config.optimization.cuda.graphs
    assert [(g.batch_size, list(g.input["input"].dim)) for g in config.optimization.cuda.graph_spec] == [
        (1, [3, 224, 224]), (2, [3, 224, 224]), (4, [3, 224, 224])]
    assert not parse_config(repo / "onnx_model" / "config.pbtxt").optimization.cuda.graphs
    checked = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    assert checked.exit_code == 0 and "0 error(s), 0 warning(s)" in checked.output, checked.output

    write_emulated_config(repo)  # keeps the optimization block
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        assert info.models["trt_model"] == ("READY", ""), info.models
        assert run_cli("client", "classify", PHOTO, "--model", "trt_model", "--url", info.grpc_url).exit_code == 0

    # What Triton's tensorrt backend would refuse at load, and what no backend reads, said before a server starts.
    config.optimization.cuda.graph_spec.add(batch_size=8).input["input"].dim.extend([3, 224, 224])
    config.optimization.cuda.graph_spec.add(batch_size=2).input["images"].dim.extend([3, 224, 224])
    (repo / "trt_model" / "config.pbtxt").write_text(text_format.MessageToString(config))
    onnx_config = parse_config(repo / "onnx_model" / "config.pbtxt")
    onnx_config.optimization.cuda.graph_spec.add(batch_size=1)
    (repo / "onnx_model" / "config.pbtxt").write_text(text_format.MessageToString(onnx_config))
    linted = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
    assert linted.exit_code == 1
    lines = linted.output.splitlines()
    assert ("error: trt_model: graph_spec batch_size 8: Triton's tensorrt backend expects 'batch_size' to be >= 1 and "
            "<= 4 and refuses to load the model -> fix: capture graphs for batch sizes 1..4 or rebuild with `tritonize "
            "repo build --force` --cuda-graphs") in lines
    # an input the engine lacks: tensorrt_backend logs that it cannot set the graph's shape and serves without the graph
    assert any(line.startswith("warning: trt_model: graph_spec batch_size 2 names input 'images'") and
               line.endswith("no graph is captured for it -> fix: rebuild with `tritonize repo build --force` --cuda-graphs")
               for line in lines)
    assert any(line.startswith("warning: onnx_model: optimization.cuda.graph_spec in a model of the onnxruntime backend") for line in lines)
    # Without batching a graph is captured at batch 0 (ValidateGraphSpec); without graphs: true none is read.
    config.max_batch_size = 0
    del config.optimization.cuda.graph_spec[:]
    config.optimization.cuda.graph_spec.add(batch_size=0)
    assert graph_findings(repo, config, artifacts_copy) == []
    config.optimization.cuda.graph_spec[0].batch_size = 1
    assert graph_findings(repo, config, artifacts_copy) == [
        "error: trt_model: graph_spec batch_size 1: without batching (max_batch_size 0) Triton's tensorrt backend expects "
        "'batch_size' to be 0 and refuses to load the model -> fix: set batch_size: 0 (and the lower bound's) or rebuild "
        "with `tritonize repo build --force` --cuda-graphs"]
    config.optimization.cuda.graphs = False
    assert graph_findings(repo, config, artifacts_copy) == [
        "warning: trt_model: optimization.cuda.graph_spec without graphs: true: no graph is captured -> fix: set "
        "optimization { cuda { graphs: true } } or remove graph_spec"]


def graph_findings(repo, config, artifacts) -> list[str]:
    from google.protobuf import text_format

    (repo / "trt_model" / "config.pbtxt").write_text(text_format.MessageToString(config))
    lines = run_cli("repo", "check", repo, "--artifacts", artifacts, "--gpu-cc", "8.6").output.splitlines()
    return [line for line in lines if line.startswith(("error: trt_model: graph_spec", "warning: trt_model: optimization.cuda"))]


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_context_memory_only_for_releases_that_read_it(emulated_tensorrt, artifacts_copy, tmp_path):
    """execution_context_allocation_strategy: Triton's tensorrt backend reads it from 25.05 (tensorrt_backend#108,
    first in branch r25.05). A version-compatible plan of TensorRT 10.5 for 25.05 gets it; one for 24.10 refuses it;
    `repo check` lints the value as the backend validates it, and the embedded backend refuses a bad one as Triton's
    does."""
    from google.protobuf import text_format

    from tritonize.model_repository import parse_config
    from tritonize.serve.embedded import embedded_server

    convert(emulated_tensorrt, artifacts_copy)  # for 24.10
    repo = tmp_path / "models"
    assert error_line(build(artifacts_copy, repo, "--context-memory", "on-profile-change")).startswith(
        "error: --context-memory: the plan is for Triton 24.10, whose tensorrt backend does not read "
        "execution_context_allocation_strategy (from 25.05)")
    convert(emulated_tensorrt, artifacts_copy, "--triton-release", "25.05", "--version-compatible", "--force")
    built = build(artifacts_copy, repo, "--context-memory", "on-profile-change")
    assert built.exit_code == 0, built.output
    config = parse_config(repo / "trt_model" / "config.pbtxt")
    assert config.parameters["execution_context_allocation_strategy"].string_value == "ON_PROFILE_CHANGE"
    assert run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6").exit_code == 0
    old = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6", "--triton-release", "24.10")
    assert ("warning: trt_model: execution_context_allocation_strategy: Triton 24.10's tensorrt backend does not read "
            "it (from 25.05)") in old.output

    for value in ("static", "DYNAMIC"):  # the backend compares the value as written: "static" is not STATIC
        config.parameters["execution_context_allocation_strategy"].string_value = value
        (repo / "trt_model" / "config.pbtxt").write_text(text_format.MessageToString(config))
        bad = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--gpu-cc", "8.6")
        assert f"error: trt_model: execution_context_allocation_strategy is '{value}': Triton's tensorrt backend " \
               "refuses" in bad.output and bad.exit_code == 1
    write_emulated_config(repo)
    with embedded_server(repo, model_config_name=EMULATED_CONFIG) as info:
        state, reason = info.models["trt_model"]
        assert state == "UNAVAILABLE" and "Invalid value for 'execution_context_allocation_strategy': 'DYNAMIC'" in reason
