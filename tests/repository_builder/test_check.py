"""`tritonize repo check`: a clean repository passes; each rule catches its planted fault on a real repository."""

from __future__ import annotations

import onnx
import pytest

from tests.conftest import run_cli
from tests.repository_builder.helpers import add_trt_model, copy_repo, edit_config, record_plan, rewrite
from tritonize.errors import TritonizeError
from tritonize.repository_builder import check_repository


@pytest.fixture
def repo(small_repo, tmp_path):
    return copy_repo(small_repo, tmp_path / "models")


def _errors(findings, model=None):
    return [f.message for f in findings if f.severity == "error" and (model is None or f.model == model)]


def _only(findings, model, fragment):
    """The one error finding that contains `fragment`; every finding must carry a fix."""
    assert all(f.fix for f in findings)
    hits = [f for f in findings if f.model == model and f.severity == "error" and fragment in f.message]
    assert len(hits) == 1, [f.to_dict() for f in findings]
    return hits[0]


def test_built_repository_passes(repo, small_artifacts):
    assert check_repository(repo, small_artifacts) == []
    assert check_repository(repo) == []
    result = run_cli("repo", "check", repo, "--artifacts", small_artifacts)
    assert result.exit_code == 0 and "0 error(s), 0 warning(s)" in result.output


def test_schema_parse_error(repo):
    cfg = repo / "onnx_model" / "config.pbtxt"
    rewrite(cfg, cfg.read_text().replace("max_batch_size: 32", "max_batch_sise: 32"))
    f = _only(check_repository(repo), "onnx_model", "does not parse against Triton's ModelConfig schema")
    assert "max_batch_sise" in f.message
    result = run_cli("repo", "check", repo)
    assert result.exit_code == 1 and "error: onnx_model: config.pbtxt does not parse" in result.output


def test_name_must_match_directory(repo):
    edit_config(repo / "torch_model", lambda c: setattr(c, "name", "resnet"))
    _only(check_repository(repo), "torch_model", "name 'resnet' differs from the directory name 'torch_model'")


def test_unknown_platform(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c, "platform", "onnxruntime_onnxx"))
    _only(check_repository(repo), "onnx_model", "unknown platform 'onnxruntime_onnxx'")


def test_preferred_and_warmup_batches_above_max_batch(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c, "max_batch_size", 8))
    findings = check_repository(repo)
    _only(findings, "onnx_model", "preferred_batch_size [16, 32] outside 1..max_batch_size 8")
    _only(findings, "onnx_model", "warmup 'batch_32' uses batch 32 > max_batch_size 8")


def test_onnx_tensor_name_mismatch(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c.input[0], "name", "image"))
    findings = check_repository(repo)
    _only(findings, "onnx_model", "config input 'image' is not an input of model.onnx (graph inputs: input)")
    _only(findings, "onnx_model", "model.onnx input 'input' is missing from the config")


def test_onnx_dims_mismatch(repo):
    def change(c):
        del c.input[0].dims[:]
        c.input[0].dims.extend([3, 256, 256])
    edit_config(repo / "onnx_model", change)
    _only(check_repository(repo), "onnx_model", "config dims [3, 256, 256] do not match the graph's [3, 224, 224]")


def test_onnx_fixed_batch_axis(repo):
    path = repo / "onnx_model" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # freezes the batch axis
    rewrite(path, model.SerializeToString())
    _only(check_repository(repo), "onnx_model", "the graph's batch axis is fixed at 1, but max_batch_size is 32")


def test_torchscript_input_count(repo):
    def change(c):
        extra = c.input.add()
        extra.CopyFrom(c.input[0])
        extra.name = "input__1"
    edit_config(repo / "torch_model", change)
    _only(check_repository(repo), "torch_model", "config declares 2 input(s); model.pt forward(x) takes 1")


def test_torchscript_output_dims_from_a_real_forward(repo):
    def change(c):
        del c.output[0].dims[:]
        c.output[0].dims.append(10)
        c.output[0].label_filename = ""
    edit_config(repo / "torch_model", change)
    _only(check_repository(repo), "torch_model", "output 'output__0': config dims [10], model.pt returns [1000]")


def test_torchscript_naming_rule(repo):
    edit_config(repo / "torch_model", lambda c: setattr(c.output[0], "name", "logits"))
    _only(check_repository(repo), "torch_model", "output 'logits' does not follow the libtorch naming rule")


def test_label_file_length(repo):
    labels = repo / "onnx_model" / "labels.txt"
    rewrite(labels, "\n".join(labels.read_text().splitlines()[:999]) + "\n")
    _only(check_repository(repo), "onnx_model", "labels.txt has 999 labels for 1000 outputs")


def test_version_directories(repo):
    (repo / "onnx_model" / "1").rename(repo / "onnx_model" / "v1")
    (repo / "torch_model" / "2").mkdir()
    findings = check_repository(repo)
    _only(findings, "onnx_model", "no numeric version directory")
    assert any(f.severity == "warning" and "'v1' is not a version number" in f.message for f in findings)
    _only(findings, "torch_model", "version 2/ has no model.pt")


def test_file_hash_against_manifest(repo, small_artifacts):
    path = repo / "onnx_model" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.doc_string = "edited after export"  # still a valid graph with the same tensors
    rewrite(path, model.SerializeToString())
    assert _errors(check_repository(repo)) == []  # without the manifest the graph itself is fine
    _only(check_repository(repo, small_artifacts), "onnx_model", "1/model.onnx does not match the manifest's sha256")


def test_artifact_that_differs_from_its_manifest_entry(repo, artifacts_copy):
    """The artifact itself replaced after it was published (the repository still holds the verified one)."""
    path = artifacts_copy / "model.onnx"
    model = onnx.load(str(path))
    model.doc_string = "replaced after export"
    rewrite(path, model.SerializeToString())
    f = _only(check_repository(repo, artifacts_copy), "artifacts", "model.onnx has sha256")
    assert "the manifest's 'onnx' entry does not describe" in f.message and "tritonize export --force" in f.fix
    assert _errors(check_repository(repo, artifacts_copy), "onnx_model") == []


def test_contract_parameters_missing_is_a_warning(repo):
    edit_config(repo / "onnx_model", lambda c: c.parameters.pop("preprocess.mean"))
    findings = check_repository(repo)
    assert _errors(findings) == []
    assert [f.message for f in findings if f.severity == "warning"] == [
        "parameters lack preprocess.mean: clients cannot fetch the preprocessing contract"]


def test_plan_provenance_missing_is_a_warning(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy)
    assert not [f for f in check_repository(repo) if f.model == "trt_model" and "provenance" in f.message]
    edit_config(repo / "trt_model", lambda c: c.parameters.pop("source.tensorrt_version"))
    warnings = [f.message for f in check_repository(repo) if f.model == "trt_model" and f.severity == "warning"]
    assert warnings == ["parameters lack source.tensorrt_version: `tritonize serve --engine docker` cannot choose the "
                        "container release whose TensorRT runs the plan"]


def test_tensorrt_on_cpu_instances(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, kind="cpu")
    findings = check_repository(repo, artifacts_copy)
    _only(findings, "trt_model", "tensorrt_plan on KIND_CPU instances")
    _only(findings, "trt_model", "version 1/ has no model.plan")  # no plan can be built on this machine


def test_plan_profile_against_max_batch(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, profile={"min": 2, "opt": 8, "max": 16})
    edit_config(repo / "trt_model", lambda c: setattr(c, "max_batch_size", 32))  # the builder caps it at 16
    findings = check_repository(repo, artifacts_copy)
    _only(findings, "trt_model", "profile min is 2")
    _only(findings, "trt_model", "profile max 16 is below max_batch_size 32")


def test_plan_tensorrt_version_against_triton_release(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, tensorrt_version="8.6.1.6")
    f = _only(check_repository(repo, artifacts_copy, "24.02"), "trt_model", "plan built with TensorRT 8.6.1.6")
    assert "Triton 24.02 runs TensorRT 8.6.3.1" in f.message and "no release in the table runs it" in f.fix
    result = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--triton-release", "24.02", "--json")
    assert result.exit_code == 1 and '"errors": 2' in result.output  # the version, and the absent plan file

    record_plan(artifacts_copy, tensorrt_version="8.6.3.1")  # the plan rebuilt with 24.02's TensorRT
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "24.03")) if "TensorRT" in m]
    # A release whose TensorRT no stored source confirmed: a warning, never a silent pass.
    warnings = [f.message for f in check_repository(repo, artifacts_copy, "24.11") if f.severity == "warning"]
    assert "the compatibility table has no confirmed TensorRT version for release 24.11" in warnings


def test_version_compatible_plan_runs_on_later_releases(repo, artifacts_copy):
    """A version-compatible plan is for later runtimes: same major, or 8 -> 10 (TensorRT's support matrix)."""
    add_trt_model(repo, artifacts_copy, tensorrt_version="8.6.3.1", version_compatible=True)
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "25.01")) if "TensorRT" in m]  # 8 -> 10
    record_plan(artifacts_copy, tensorrt_version="10.5.0.18", version_compatible=True, triton_release="24.10")
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "25.01")) if "TensorRT" in m]
    f = _only(check_repository(repo, artifacts_copy, "24.08"), "trt_model", "plan built with TensorRT 10.5.0.18")
    assert "serve it with release 24.10, 24.12, 25.01" in f.fix  # never an older runtime


def test_bad_check_inputs(tmp_path):
    with pytest.raises(TritonizeError, match="no model repository at"):
        check_repository(tmp_path / "nowhere")
    result = run_cli("repo", "check", tmp_path, "--triton-release", "24.10")
    assert result.exit_code != 0 and "holds no model directories" in result.output


def test_unknown_triton_release(repo):
    result = run_cli("repo", "check", repo, "--triton-release", "19.01")
    assert result.exit_code != 0 and "unknown Triton release '19.01'" in result.output and "24.10" in result.output


# ------------------------------------------------------------------ ensembles and the preprocessing code

def test_ensemble_steps_and_tensors(repo):
    """Four planted faults, one per ensemble, each found once with what to fix."""
    from tritonclient.grpc import model_config_pb2 as pb

    edit_config(repo / "onnx_classifier", lambda c: setattr(c.ensemble_scheduling.step[1], "model_name", "onnx_modle"))
    edit_config(repo / "torch_classifier", lambda c: setattr(c.input[0], "data_type", pb.TYPE_UINT8))

    def rename_key(c):
        step = c.ensemble_scheduling.step[1]
        step.input_map["image"] = step.input_map.pop("input")
    edit_config(repo / "onnx_classifier_uint8", rename_key)
    edit_config(repo / "torch_classifier_uint8", lambda c: c.ensemble_scheduling.step[1].output_map.update({"output__0": "LOGIT"}))
    findings = check_repository(repo)
    f = _only(findings, "onnx_classifier", "step 2 names model 'onnx_modle', which is not in the repository")
    assert "onnx_model" in f.fix
    _only(findings, "torch_classifier", "tensor 'IMAGE': the ensemble's input is TYPE_UINT8 [1], preprocess's input "
                                        "'IMAGE' is TYPE_STRING [1]")
    _only(findings, "onnx_classifier_uint8", "step 2: 'image' is not an input of onnx_model (its inputs: input)")
    _only(findings, "onnx_classifier_uint8", "step 2: onnx_model's input(s) input are not mapped")
    _only(findings, "torch_classifier_uint8", "the ensemble's output reads tensor 'LOGITS', which no step produces")
    assert len(_errors(findings)) == 5
    result = run_cli("repo", "check", repo)
    assert result.exit_code == 1 and "5 error(s)" in result.output


def test_ensemble_dims_and_batch_sizes(repo):
    def wider(c):
        del c.output[0].dims[:]
        c.output[0].dims.extend([3, 256, 256])
    edit_config(repo / "preprocess_uint8", wider)
    edit_config(repo / "onnx_classifier", lambda c: setattr(c, "max_batch_size", 64))
    findings = check_repository(repo)
    for ensemble, model in (("onnx_classifier_uint8", "onnx_model"), ("torch_classifier_uint8", "torch_model")):
        _only(findings, ensemble, "tensor 'PREPROCESSED': preprocess_uint8's output 'PREPROCESSED' is TYPE_FP32 "
                                  f"[3, 256, 256], {model}'s input")
    _only(findings, "onnx_classifier", "max_batch_size 64 but step 1's preprocess takes at most 32")
    _only(findings, "onnx_classifier", "max_batch_size 64 but step 2's onnx_model takes at most 32")
    assert len(_errors(findings)) == 4


def test_preprocessing_code_must_be_there_and_be_this_tritonizes(repo):
    images = repo / "preprocess" / "1" / "tritonize" / "images.py"
    rewrite(images, images.read_text().replace("DEFAULT_MAX_PIXELS = 89_478_485", "DEFAULT_MAX_PIXELS = 1_000_000"))
    (repo / "preprocess_uint8" / "1" / "tritonize" / "preprocessing.py").unlink()
    findings = check_repository(repo)
    warning = [f for f in findings if f.severity == "warning"]
    assert [(f.model, f.message) for f in warning] == [("preprocess", "1/tritonize/images.py differs from this tritonize's "
                                                        "images.py: the server would not preprocess as this client does")]
    _only(findings, "preprocess_uint8", "1/tritonize/preprocessing.py is missing: model.py imports it")
