"""`tritonize repo check`: a clean repository passes; each rule catches its planted fault on a real repository."""

from __future__ import annotations

import onnx
import pytest

from tests.conftest import run_cli
from tests.golden import Golden
from tests.repository_builder.helpers import add_trt_model, copy_repo, edit_config, record_plan, restamp, rewrite
from tritonize.errors import TritonizeError
from tritonize.repository_builder import check_repository


@pytest.fixture
def repo(small_repo, tmp_path):
    return copy_repo(small_repo, tmp_path / "models")


def _errors(findings, model=None):
    return [f.message for f in findings if f.severity == "error" and (model is None or f.model == model)]


NO_PLAN_FILE = ("trt_model", "version 1/ has no model.plan")  # no plan can be built on this machine
ANOTHER_MANIFEST = [(m, "built from another manifest", "warning") for m in (
    "onnx_model", "torch_model", "preprocess", "preprocess_uint8", "onnx_classifier", "onnx_classifier_uint8",
    "torch_classifier", "torch_classifier_uint8", "trt_model")]


# Every finding's whole text (what is wrong and what to do) as a person reviewed it.
FINDINGS = Golden("check_findings")


def _exactly(findings, *expected):
    """The findings are exactly `expected`, each (model, fragment) for an error or (model, fragment, "warning"),
    every one matched by one finding, and no other finding, error or warning; every finding carries a fix, and
    their whole text is the reviewed one (tests/golden/check_findings.json).
    Returns the matched findings, in the order expected."""
    assert all(f.fix for f in findings)
    FINDINGS.check([f"{f.severity} {f.model}: {f.message} -> {f.fix}" for f in findings])
    left, matched = list(findings), []
    for model, fragment, *severity in expected:
        hits = [f for f in left if f.model == model and f.severity == (severity or ["error"])[0] and fragment in f.message]
        assert len(hits) == 1, (model, fragment, [f.to_dict() for f in findings])
        left.remove(hits[0])
        matched.append(hits[0])
    assert left == [], [f.to_dict() for f in left]
    return matched


WARMUPS = ("batch_1", "batch_32")  # the warmup samples `repo build` writes at max_batch_size 32


def _warmups(model: str, fragment: str, config: str = "config.pbtxt") -> list[tuple[str, str]]:
    """Each warmup sample's finding when a change to the input leaves the samples as they were (Triton core validates a
    sample like a request: it refuses the model)."""
    return [(model, f"{config}: warmup {w!r} {fragment}") for w in WARMUPS]


def test_built_repository_passes(repo, small_artifacts):
    assert check_repository(repo, small_artifacts) == []
    assert check_repository(repo) == []
    result = run_cli("repo", "check", repo, "--artifacts", small_artifacts)
    assert result.exit_code == 0 and "0 error(s), 0 warning(s)" in result.output


def test_schema_parse_error(repo):
    cfg = repo / "onnx_model" / "config.pbtxt"
    rewrite(cfg, cfg.read_text().replace("max_batch_size: 32", "max_batch_sise: 32"))
    (f,) = _exactly(check_repository(repo), ("onnx_model", "does not parse against Triton's ModelConfig schema"))
    assert "max_batch_sise" in f.message
    result = run_cli("repo", "check", repo)
    assert result.exit_code == 1 and "error: onnx_model: config.pbtxt does not parse" in result.output


def test_name_must_match_directory(repo):
    edit_config(repo / "torch_model", lambda c: setattr(c, "name", "resnet"))
    _exactly(check_repository(repo), ("torch_model", "config.pbtxt: name 'resnet' differs from the directory name 'torch_model'"))


def test_unknown_platform(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c, "platform", "onnxruntime_onnxx"))
    _exactly(check_repository(repo), ("onnx_model", "unknown platform 'onnxruntime_onnxx'"))


def test_preferred_and_warmup_batches_above_max_batch(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c, "max_batch_size", 8))
    _exactly(check_repository(repo), ("onnx_model", "preferred_batch_size [16, 32] outside 1..max_batch_size 8"),
             ("onnx_model", "warmup 'batch_32' uses batch 32 > max_batch_size 8"),
             *[(ensemble, "max_batch_size 32 but step 2's onnx_model takes at most 8")
               for ensemble in ("onnx_classifier", "onnx_classifier_uint8")])


def test_onnx_tensor_name_mismatch(repo):
    edit_config(repo / "onnx_model", lambda c: setattr(c.input[0], "name", "image"))
    _exactly(check_repository(repo), ("onnx_model", "config input 'image' is not an input of model.onnx (graph inputs: input)"),
             ("onnx_model", "model.onnx input 'input' is missing from the config"),
             *[(ensemble, "step 2: 'input' is not an input of onnx_model (its inputs: image)")
               for ensemble in ("onnx_classifier", "onnx_classifier_uint8")],
             *[(ensemble, "step 2: onnx_model's input(s) image are not mapped")
               for ensemble in ("onnx_classifier", "onnx_classifier_uint8")],
             *_warmups("onnx_model", "gives no data for input(s) image"))


def test_onnx_dims_mismatch(repo):
    def change(c):
        del c.input[0].dims[:]
        c.input[0].dims.extend([3, 256, 256])
    edit_config(repo / "onnx_model", change)
    _exactly(check_repository(repo), ("onnx_model", "config dims [3, 256, 256] do not match the graph's [3, 224, 224]"),
             *[(ensemble, "tensor 'PREPROCESSED'") for ensemble in ("onnx_classifier", "onnx_classifier_uint8")],
             *_warmups("onnx_model", "input 'input' is TYPE_FP32 [3, 224, 224]; the config's input is TYPE_FP32 [3, 256, 256]"))


def test_onnx_fixed_batch_axis(repo):
    path = repo / "onnx_model" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # freezes the batch axis
    rewrite(path, model.SerializeToString())
    # onnxruntime infers the output's batch from the input's: its session (and Triton's backend) has both fixed
    _exactly(check_repository(repo), ("onnx_model", "input 'input': the graph's batch axis is fixed at 1, but max_batch_size is 32"),
             ("onnx_model", "output 'output': the graph's batch axis is fixed at 1, but max_batch_size is 32"))


def test_torchscript_input_count(repo):
    def change(c):
        for name in ("input__1", "input__2"):
            extra = c.input.add()
            extra.CopyFrom(c.input[0])
            extra.name = name
    edit_config(repo / "torch_model", change)
    _exactly(check_repository(repo), ("torch_model", "config declares 3 input(s); model.pt forward(x) takes 1"),
             *[(ensemble, "step 2: torch_model's input(s) input__1, input__2 are not mapped")
               for ensemble in ("torch_classifier", "torch_classifier_uint8")],
             *_warmups("torch_model", "gives no data for input(s) input__1, input__2"))


def test_torchscript_output_dims_from_a_real_forward(repo):
    def change(c):
        del c.output[0].dims[:]
        c.output[0].dims.append(10)
        c.output[0].label_filename = ""
    edit_config(repo / "torch_model", change)
    _exactly(check_repository(repo), ("torch_model", "output 'output__0': config dims [10], model.pt returns [1000]"),
             *[(ensemble, "tensor 'LOGITS'") for ensemble in ("torch_classifier", "torch_classifier_uint8")])


def test_torchscript_naming_rule(repo):
    edit_config(repo / "torch_model", lambda c: setattr(c.output[0], "name", "logits"))
    _exactly(check_repository(repo), ("torch_model", "output 'logits' does not follow the libtorch naming rule"),
             *[(ensemble, "step 2: 'output__0' is not an output of torch_model (its outputs: logits)")
               for ensemble in ("torch_classifier", "torch_classifier_uint8")],
             *[(ensemble, "the ensemble's output reads tensor 'LOGITS', which no step produces")
               for ensemble in ("torch_classifier", "torch_classifier_uint8")])


def test_label_file_length(repo):
    labels = repo / "onnx_model" / "labels.txt"
    rewrite(labels, "\n".join(labels.read_text().splitlines()[:999]) + "\n")
    _exactly(check_repository(repo), ("onnx_model", "labels.txt has 999 labels for 1000 outputs"))


def test_version_directories(repo):
    (repo / "onnx_model" / "1").rename(repo / "onnx_model" / "v1")
    (repo / "torch_model" / "2").mkdir()
    _exactly(check_repository(repo), ("onnx_model", "no numeric version directory"),
             ("onnx_model", "directory 'v1' is not a version number; Triton ignores it", "warning"),
             ("torch_model", "version 2/ has no model.pt"))


def test_file_hash_against_manifest(repo, small_artifacts):
    path = repo / "onnx_model" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.doc_string = "edited after export"  # still a valid graph with the same tensors
    rewrite(path, model.SerializeToString())
    assert _errors(check_repository(repo)) == []  # without the manifest the graph itself is fine
    _exactly(check_repository(repo, small_artifacts), ("onnx_model", "1/model.onnx does not match the manifest's sha256"))


def test_artifact_that_differs_from_its_manifest_entry(repo, artifacts_copy):
    """The artifact itself replaced after it was published (the repository still holds the verified one)."""
    from tritonize.manifest import Manifest

    record_plan(artifacts_copy, status="pending")  # no file to check yet; the entries after it still are
    manifest = Manifest.load(artifacts_copy)
    manifest.artifacts["onnx"] = manifest.artifacts.pop("onnx")  # after the plan
    manifest.save()
    restamp(repo, artifacts_copy)
    path = artifacts_copy / "model.onnx"
    model = onnx.load(str(path))
    model.doc_string = "replaced after export"
    rewrite(path, model.SerializeToString())
    (f,) = _exactly(check_repository(repo, artifacts_copy), ("artifacts", "model.onnx has sha256"))
    assert "the manifest's 'onnx' entry does not describe" in f.message and "tritonize export --force" in f.fix


def test_contract_parameters_missing_is_a_warning(repo):
    def lose_two(c):
        c.parameters.pop("preprocess.mean")
        c.parameters.pop("preprocess.std")
    edit_config(repo / "onnx_model", lose_two)
    _exactly(check_repository(repo), ("onnx_model", "parameters lack preprocess.mean, preprocess.std: clients cannot "
                                                    "fetch the preprocessing contract", "warning"))


def test_a_config_that_does_not_name_its_manifest_is_not_said_to_come_from_another(repo, small_artifacts):
    edit_config(repo / "onnx_model", lambda c: c.parameters.pop("source.manifest_sha256"))
    _exactly(check_repository(repo, small_artifacts),
             ("onnx_model", "parameters lack source.manifest_sha256: clients cannot", "warning"))


def test_plan_provenance_missing_is_a_warning(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy)
    _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE)

    def lose_two(c):
        c.parameters.pop("source.tensorrt_version")
        c.parameters.pop("source.version_compatible")
    edit_config(repo / "trt_model", lose_two)
    _exactly(check_repository(repo), NO_PLAN_FILE,
             ("trt_model", "parameters lack source.tensorrt_version, source.version_compatible: `tritonize serve "
                           "--engine docker` cannot choose the container release whose TensorRT runs the plan", "warning"))


def test_tensorrt_on_cpu_instances(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, kind="cpu")
    _exactly(check_repository(repo, artifacts_copy), ("trt_model", "config.pbtxt: tensorrt_plan on KIND_CPU instances"),
             NO_PLAN_FILE)


def test_plan_profile_against_max_batch(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, profile={"min": 2, "opt": 8, "max": 16})
    edit_config(repo / "trt_model", lambda c: setattr(c, "max_batch_size", 32))  # the builder refuses more than 16
    _exactly(check_repository(repo, artifacts_copy), ("trt_model", "profile min is 2"),
             ("trt_model", "profile max 16 is below max_batch_size 32"), NO_PLAN_FILE)


def test_plan_tensorrt_version_against_triton_release(repo, artifacts_copy):
    add_trt_model(repo, artifacts_copy, tensorrt_version="8.6.1.6")
    f, _ = _exactly(check_repository(repo, artifacts_copy, "24.02"), ("trt_model", "plan built with TensorRT 8.6.1.6"),
                    NO_PLAN_FILE)
    assert "Triton 24.02 runs TensorRT 8.6.3.1" in f.message and "no release in the table runs it" in f.fix
    result = run_cli("repo", "check", repo, "--artifacts", artifacts_copy, "--triton-release", "24.02", "--json")
    assert result.exit_code == 1 and '"errors": 2' in result.output  # the version, and the absent plan file

    record_plan(artifacts_copy, tensorrt_version="8.6.3.1")  # the plan rebuilt with 24.02's TensorRT
    restamp(repo, artifacts_copy)
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "24.03")) if "TensorRT" in m]
    # A release whose TensorRT no stored source confirmed: a warning, never a silent pass.
    (f, _) = _exactly(check_repository(repo, artifacts_copy, "24.11"), ("trt_model", "the compatibility table has no "
                      "confirmed TensorRT version for release 24.11", "warning"), NO_PLAN_FILE)
    assert f.fix == "check NVIDIA's Frameworks Support Matrix for that release"


def test_version_compatible_plan_runs_on_later_releases(repo, artifacts_copy):
    """A version-compatible plan is for later runtimes: same major, or 8 -> 10 (TensorRT's support matrix)."""
    add_trt_model(repo, artifacts_copy, tensorrt_version="8.6.3.1", version_compatible=True)
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "25.01")) if "TensorRT" in m]  # 8 -> 10
    record_plan(artifacts_copy, tensorrt_version="10.5.0.18", version_compatible=True, triton_release="24.10")
    assert not [m for m in _errors(check_repository(repo, artifacts_copy, "25.01")) if "TensorRT" in m]
    f = _exactly(check_repository(repo, artifacts_copy, "24.08"), ("trt_model", "plan built with TensorRT 10.5.0.18"),
                 NO_PLAN_FILE, *ANOTHER_MANIFEST)[0]
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

    def rename_key(c):  # and a missing model in step 1: step 2 is still checked
        c.ensemble_scheduling.step[0].model_name = "preprocess_uint9"
        step = c.ensemble_scheduling.step[1]
        step.input_map["image"] = step.input_map.pop("input")
    edit_config(repo / "onnx_classifier_uint8", rename_key)

    def unproduced_and_mismatched(c):  # the first tensor read goes unproduced: the others are still checked
        c.ensemble_scheduling.step[1].output_map.update({"output__0": "LOGIT"})
        c.input[0].data_type = pb.TYPE_INT8
    edit_config(repo / "torch_classifier_uint8", unproduced_and_mismatched)
    f, *_ = _exactly(check_repository(repo),
                     ("onnx_classifier", "step 2 names model 'onnx_modle', which is not in the repository"),
                     ("torch_classifier", "tensor 'IMAGE': the ensemble's input is TYPE_UINT8 [1], preprocess's input "
                                          "'IMAGE' is TYPE_STRING [1]"),
                     ("onnx_classifier_uint8", "step 2: 'image' is not an input of onnx_model (its inputs: input)"),
                     ("onnx_classifier_uint8", "step 1 names model 'preprocess_uint9', which is not in the repository"),
                     ("onnx_classifier_uint8", "step 2: onnx_model's input(s) input are not mapped"),
                     ("torch_classifier_uint8", "the ensemble's output reads tensor 'LOGITS', which no step produces"),
                     ("torch_classifier_uint8", "step 2 writes tensor 'LOGIT', which no step reads and the ensemble does "
                                                "not output"),
                     ("torch_classifier_uint8", "tensor 'PIXELS': the ensemble's input is TYPE_INT8"))
    assert "onnx_model" in f.fix
    result = run_cli("repo", "check", repo)
    assert result.exit_code == 1 and "8 error(s)" in result.output


def test_ensemble_dims_and_batch_sizes(repo):
    def wider(c):
        del c.output[0].dims[:]
        c.output[0].dims.extend([3, 256, 256])
    edit_config(repo / "preprocess_uint8", wider)
    edit_config(repo / "onnx_classifier", lambda c: setattr(c, "max_batch_size", 64))
    _exactly(check_repository(repo),
             *[(ensemble, "tensor 'PREPROCESSED': preprocess_uint8's output 'PREPROCESSED' is TYPE_FP32 "
                          f"[3, 256, 256], {model}'s input")
               for ensemble, model in (("onnx_classifier_uint8", "onnx_model"), ("torch_classifier_uint8", "torch_model"))],
             ("onnx_classifier", "max_batch_size 64 but step 1's preprocess takes at most 32"),
             ("onnx_classifier", "max_batch_size 64 but step 2's onnx_model takes at most 32"))


def test_preprocessing_code_must_be_there_and_be_this_tritonizes(repo):
    images = repo / "preprocess" / "1" / "tritonize" / "images.py"
    rewrite(images, images.read_text().replace("DEFAULT_MAX_PIXELS = 89_478_485", "DEFAULT_MAX_PIXELS = 1_000_000"))
    (repo / "preprocess_uint8" / "1" / "tritonize" / "preprocessing.py").unlink()
    _exactly(check_repository(repo),
             ("preprocess", "1/tritonize/images.py differs from this tritonize's images.py: the server would not "
                            "preprocess as this client does", "warning"),
             ("preprocess_uint8", "1/tritonize/preprocessing.py is missing: model.py imports it"))


# ------------------------------------------------------------------ one planted fault per rule, variants included

def _set(field, value):
    return lambda c: setattr(c, field, value)


def _dims(role, index, dims):
    def change(c):
        tensor = getattr(c, role)[index]
        del tensor.dims[:]
        tensor.dims.extend(dims)
    return change


def _second_output(c):
    extra = c.output.add()
    extra.CopyFrom(c.output[0])
    extra.name, extra.label_filename = "output__1", ""


def _no_platform_but(backend):
    def change(c):
        c.platform, c.backend = "", backend
    return change


def _no_platform_nor_model_file(c):
    c.platform, c.backend, c.default_model_filename = "", "", "weights.bin"


def _instances(count):
    return lambda c: setattr(c.instance_group[0], "count", count)


def _no_batch_axis_but_preferred_sizes(c):
    c.max_batch_size = 0
    c.dynamic_batching.preferred_batch_size.append(4)  # said once: the batching itself is the fault


def _no_steps(c):
    c.ensemble_scheduling.ClearField("step")


def _fp16_input(c):
    from tritonclient.grpc import model_config_pb2 as pb

    c.input[0].data_type = pb.TYPE_FP16


ENSEMBLES_OF = {"onnx_model": ("onnx_classifier", "onnx_classifier_uint8"),
                "torch_model": ("torch_classifier", "torch_classifier_uint8"),
                "preprocess_uint8": ("onnx_classifier_uint8", "torch_classifier_uint8")}

# (model, config file, planted fault, the findings it must give and no other). configs/*.pbtxt are what Triton
# serves with --model-config-name (the embedded engine's choice without a GPU): the same rules apply to them.
PLANTED = {
    "unknown backend": ("onnx_model", "configs/cpu.pbtxt", _no_platform_but("onnxruntimee"),
                        [("onnx_model", "configs/cpu.pbtxt: unknown backend 'onnxruntimee'")]),
    # (Triton fills in the backend from default_model_filename or the version directory's model file: none here)
    "neither platform nor backend": ("torch_model", "config.pbtxt", _no_platform_nor_model_file,
                                     [("torch_model", "config.pbtxt: neither platform nor backend is set"),
                                      ("torch_model", "version 1/ has no weights.bin")]),
    "name in a variant": ("onnx_model", "configs/gpu.pbtxt", _set("name", "onnx"),
                          [("onnx_model", "configs/gpu.pbtxt: name 'onnx' differs from the directory name")]),
    "platform in a variant": ("torch_model", "configs/gpu.pbtxt", _set("platform", "pytorch"),
                              [("torch_model", "configs/gpu.pbtxt: unknown platform 'pytorch'")]),
    "negative max_batch_size": ("onnx_model", "configs/cpu.pbtxt", _set("max_batch_size", -1),
                                [("onnx_model", "configs/cpu.pbtxt: max_batch_size is -1"),
                                 # without a batch axis the graph's own batch axis is one dim too many
                                 ("onnx_model", "configs/cpu.pbtxt: input 'input': config dims [3, 224, 224] do not "
                                                "match the graph's ['?', 3, 224, 224]"),
                                 ("onnx_model", "configs/cpu.pbtxt: output 'output': config dims [1000]")]),
    # (Triton loads a batching ensemble over a step without a batch axis whose dims agree without it, and passes that
    # step batches of 1 only: a larger batch fails there; its output goes on to the classifier as a batch of 1)
    "dynamic batching without a batch axis": (
        "preprocess_uint8", "config.pbtxt", _no_batch_axis_but_preferred_sizes,
        [("preprocess_uint8", "config.pbtxt: dynamic_batching with max_batch_size 0"),
         *[(e, "tensor 'PIXELS': the ensemble's input is TYPE_UINT8 [224, 224, 3] with a batch axis, preprocess_uint8's "
               "input 'PIXELS' is TYPE_UINT8 [224, 224, 3] without a batch axis (Triton passes it batches of 1 only)")
           for e in ENSEMBLES_OF["preprocess_uint8"]]]),
    "preferred and warmup batches in a variant": (
        "torch_model", "configs/cpu.pbtxt", _set("max_batch_size", 1),
        [("torch_model", "configs/cpu.pbtxt: preferred_batch_size [4, 8, 16, 32] outside 1..max_batch_size 1"),
         ("torch_model", "configs/cpu.pbtxt: warmup 'batch_32' uses batch 32 > max_batch_size 1")]),
    "no instances": ("onnx_model", "configs/gpu.pbtxt", _instances(0),
                     [("onnx_model", "configs/gpu.pbtxt: instance_group count 0: Triton runs 1 instance", "warning")]),
    "ONNX dtype": ("onnx_model", "config.pbtxt", _fp16_input,
                   [("onnx_model", "input 'input': config says TYPE_FP16, the graph has TYPE_FP32"),
                    *[(e, "tensor 'PREPROCESSED'") for e in ENSEMBLES_OF["onnx_model"]],
                    *_warmups("onnx_model", "input 'input' is TYPE_FP32 [3, 224, 224]; the config's input is TYPE_FP16")]),
    "ONNX dims in a variant": ("onnx_model", "configs/cpu.pbtxt", _dims("input", 0, [3, 256, 256]),
                               [("onnx_model", "configs/cpu.pbtxt: input 'input': config dims [3, 256, 256] do not match"),
                                *_warmups("onnx_model", "input 'input' is TYPE_FP32 [3, 224, 224]; the config's input is "
                                                        "TYPE_FP32 [3, 256, 256]", "configs/cpu.pbtxt")]),
    "TorchScript fails on the configured shape": (
        "torch_model", "configs/cpu.pbtxt", _dims("input", 0, [1, 224, 224]),
        [("torch_model", "configs/cpu.pbtxt: model.pt fails on an input of the configured shape [[1, 1, 224, 224]]"),
         *_warmups("torch_model", "input 'input__0' is TYPE_FP32 [3, 224, 224]; the config's input is TYPE_FP32 [1, 224, 224]",
                   "configs/cpu.pbtxt")]),
    "TorchScript output count": ("torch_model", "configs/gpu.pbtxt", _second_output,
                                 [("torch_model", "configs/gpu.pbtxt: model.pt returns 1 output(s); the config declares 2")]),
    "a platform with another backend": ("onnx_model", "configs/gpu.pbtxt", _set("backend", "pytorch"),
                                        [("onnx_model", "configs/gpu.pbtxt: platform 'onnxruntime_onnx' with backend "
                                                        "'pytorch' (Triton refuses the pair)"),
                                         ("onnx_model", "configs/gpu.pbtxt: version 1/ has no model.pt")]),
    "a dim of 0": ("torch_model", "configs/gpu.pbtxt", _dims("output", 0, [0]),
                   [("torch_model", "configs/gpu.pbtxt: output 'output__0' has dims [0]; Triton wants at least one"),
                    ("torch_model", "configs/gpu.pbtxt: output 'output__0': config dims [0], model.pt returns [1000]")]),
    "ensemble without steps": ("onnx_classifier", "config.pbtxt", _no_steps,
                               [("onnx_classifier", "an ensemble without ensemble_scheduling steps")]),
    "label count in a variant": ("onnx_model", "configs/cpu.pbtxt", _dims("output", 0, [999]),
                                 [("onnx_model", "configs/cpu.pbtxt: output 'output': labels.txt has 1000 labels for 999 outputs"),
                                  ("onnx_model", "configs/cpu.pbtxt: output 'output': config dims [999] do not match")]),
}


@pytest.mark.parametrize("fault", PLANTED)
def test_each_rule_finds_its_planted_fault_and_nothing_else(repo, fault):
    model, config, change, expected = PLANTED[fault]
    edit_config(repo / model, change, config)
    _exactly(check_repository(repo), *expected)


def test_a_variant_that_does_not_parse(repo):
    cfg = repo / "torch_model" / "configs" / "cpu.pbtxt"
    rewrite(cfg, cfg.read_text().replace("max_batch_size: 32", "max_batch_size: many"))
    _exactly(check_repository(repo), ("torch_model", "configs/cpu.pbtxt does not parse against Triton's ModelConfig schema"))


def test_missing_config_and_missing_label_file(repo):
    (repo / "torch_model" / "config.pbtxt").unlink()
    variant = repo / "torch_model" / "configs" / "gpu.pbtxt"  # still read: a variant's own faults are reported too
    rewrite(variant, variant.read_text().replace("max_batch_size: 32", "max_batch_size: many"))
    (repo / "onnx_model" / "labels.txt").unlink()
    _exactly(check_repository(repo), ("torch_model", "no config.pbtxt: Triton cannot load the model"),
             ("torch_model", "configs/gpu.pbtxt does not parse against Triton's ModelConfig schema"),
             ("onnx_model", "output 'output': label file labels.txt is missing"))


def test_model_files_that_cannot_be_read(repo):
    onnx_file, torchscript = repo / "onnx_model" / "1" / "model.onnx", repo / "torch_model" / "1" / "model.pt"
    rewrite(onnx_file, onnx_file.read_bytes()[:5000])  # truncated
    rewrite(torchscript, b"not a TorchScript archive")
    _exactly(check_repository(repo), ("onnx_model", "cannot read model.onnx: "),
             ("torch_model", "cannot load model.pt with torch.jit.load: "))


def test_repository_built_from_another_manifest_is_a_warning(repo, artifacts_copy):
    edit_config(repo / "onnx_model", lambda c: c.parameters["source.manifest_sha256"].__setattr__("string_value", "ab" * 32))
    (f,) = _exactly(check_repository(repo, artifacts_copy), ("onnx_model", "built from another manifest (sha256 abababababab", "warning"))
    assert "after re-exporting" in f.fix


def test_model_without_a_manifest_entry_is_a_warning(repo, artifacts_copy):
    from tritonize.manifest import Manifest

    manifest = Manifest.load(artifacts_copy)
    del manifest.artifacts["torchscript"]
    manifest.save()
    restamp(repo, artifacts_copy)
    _exactly(check_repository(repo, artifacts_copy),
             ("torch_model", "the manifest has no 'torchscript' artifact to check this model against", "warning"))


def test_plan_tensor_names_and_unknown_tensorrt_version(repo, artifacts_copy):
    from dataclasses import replace

    from tests.conftest import record

    entry = add_trt_model(repo, artifacts_copy)
    record(artifacts_copy, "tensorrt", replace(entry, input_name="images", output_name="logits", tensorrt_version=None))
    restamp(repo, artifacts_copy)
    _exactly(check_repository(repo, artifacts_copy, "24.04"), NO_PLAN_FILE,
             ("trt_model", "the plan's input is 'images'; the config names ['input']"),
             ("trt_model", "the plan's output is 'logits'; the config names ['output']"),
             ("trt_model", "the manifest does not say which TensorRT built the plan; cannot check it against release "
                           "24.04", "warning"))


def test_a_config_without_a_batch_axis_whose_dims_hold_the_batch_passes(repo):
    """max_batch_size 0: the dims include the batch axis, and the model files are checked with them as they are."""
    import shutil

    for ensemble in ("onnx_classifier", "onnx_classifier_uint8", "torch_classifier", "torch_classifier_uint8"):
        shutil.rmtree(repo / ensemble)

    def no_batch_axis(c):
        c.max_batch_size = 0
        c.ClearField("dynamic_batching")
        # an ONNX output's dims are compared exactly (onnxruntime_backend): its variable batch axis is -1 there
        output = [-1, 1000] if c.platform == "onnxruntime_onnx" else [1, 1000]
        for tensor, dims in ((c.input[0], [1, 3, 224, 224]), (c.output[0], output)):
            del tensor.dims[:]
            tensor.dims.extend(dims)
        del c.model_warmup[1:]  # batch_1 stays, with the batch in its dims
        warmup = next(iter(c.model_warmup[0].inputs.values()))
        del warmup.dims[:]
        warmup.dims.extend([1, 3, 224, 224])
    for model in ("onnx_model", "torch_model"):
        for name in ("config.pbtxt", "configs/cpu.pbtxt", "configs/gpu.pbtxt"):
            edit_config(repo / model, no_batch_axis, name)
    _exactly(check_repository(repo))
    edit_config(repo / "onnx_model", lambda c: c.output[0].dims.__setitem__(0, 1))
    _exactly(check_repository(repo), ("onnx_model", "output 'output': config dims [1, 1000] do not match the graph's ['?', 1000]"))


def test_hidden_directories_and_loose_files_at_the_top_are_not_models(repo):
    (repo / ".git").mkdir()
    (repo / "README.md").write_text("notes")
    _exactly(check_repository(repo))


def test_the_latest_version_is_the_highest_number_and_leading_zeros_are_not_versions(repo):
    onnx_dir = repo / "onnx_model"
    (onnx_dir / "9").mkdir()
    (onnx_dir / "9" / "model.onnx").write_bytes(b"an old, broken file")
    (onnx_dir / "1").rename(onnx_dir / "10")  # 10 > 9: the good file is the one served and checked
    (repo / "torch_model" / "01").mkdir()
    _exactly(check_repository(repo),
             ("torch_model", "directory '01' is not a version number; Triton ignores it", "warning"))


def test_a_cpu_precision_variant_is_served_only_after_convert_cpus_gates_passed(repo, artifacts_copy):
    import os
    from dataclasses import replace

    from tests.conftest import record
    from tritonize.manifest import FileRef, Gate, Manifest, PrecisionVariant, ServingGates, Status
    from tritonize.model_repository import BACKENDS
    from tritonize.repository_builder.config import config_text, model_config
    from tritonize.repository_builder.options import RepoOptions

    fp32 = Manifest.load(artifacts_copy).onnx
    variant = PrecisionVariant(status=Status.verified, precision="int8", file=fp32.file, size_bytes=fp32.size_bytes,
                               sha256=fp32.sha256, input_name="input", output_name="output",
                               verification=fp32.verification, source=FileRef(fp32.file, fp32.sha256), inputs={},
                               created=fp32.created)
    model_dir = repo / "onnx_int8_model"
    (model_dir / "1").mkdir(parents=True)
    os.link(repo / "onnx_model" / "1" / "model.onnx", model_dir / "1" / "model.onnx")
    os.link(repo / "onnx_model" / "labels.txt", model_dir / "labels.txt")

    def serve(entry):
        record(artifacts_copy, "onnx_int8_cpu", entry)
        restamp(repo, artifacts_copy)
        manifest = Manifest.load(artifacts_copy)
        cfg = model_config(BACKENDS["onnx_int8_model"], manifest.spec, entry, RepoOptions(), "cpu", manifest.sha256())
        (model_dir / "config.pbtxt").write_text(config_text(cfg))
        return check_repository(repo, artifacts_copy)

    gate = Gate(True, "top-1 agreement 100% >= 98%")
    gates = ServingGates(agreement=gate, speed=Gate(False, "0.9x FP32 < 1.2x"), fp32=variant.source, settings={},
                         measured=fp32.created)
    not_gated = ("onnx_int8_model", "serves model.onnx, which has not passed `convert cpu`'s gates (agreement with "
                                    "FP32, speed through the server)")
    _exactly(serve(variant), not_gated)  # never measured
    (f,) = _exactly(serve(replace(variant, cpu_serving=gates)), not_gated)  # measured, too slow
    assert f.fix == "run `tritonize convert cpu`, then rebuild with `tritonize repo build --force`"
    _exactly(serve(replace(variant, cpu_serving=replace(gates, speed=gate))))


def test_variable_dims_match_any_size_where_the_model_takes_any(repo):
    """A TorchScript module is probed by a real forward; an ONNX graph's axes are fixed (224, 1000), and Triton's
    onnxruntime backend takes a config -1 only for a variable graph axis (its CompareDimsSupported)."""
    def variable(c):  # the label file stays: a variable class count cannot be checked against it
        del c.input[0].dims[:]
        c.input[0].dims.extend([3, -1, -1])
        del c.output[0].dims[:]
        c.output[0].dims.append(-1)
    for model in ("onnx_model", "torch_model"):
        edit_config(repo / model, variable, "configs/cpu.pbtxt")
    edit_config(repo / "torch_model", _dims("output", 0, [-1]), "configs/gpu.pbtxt")  # checked by a real forward
    edit_config(repo / "preprocess_uint8", _dims("output", 0, [3, -1, -1]))  # the ensembles' tensor: fits 3x224x224
    _exactly(check_repository(repo),
             ("onnx_model", "configs/cpu.pbtxt: input 'input': config dims [3, -1, -1] do not match the graph's [3, 224, 224]"),
             ("onnx_model", "configs/cpu.pbtxt: output 'output': config dims [-1] do not match the graph's [1000]"))


def test_the_libtorch_naming_rule_allows_forward_argument_names_and_indices_below_the_count(repo):
    def rename(c):
        c.input[0].name = "x"  # forward(x)
        c.output[0].name = "output__1"  # one output: index 1 is out of range
        for warmup in c.model_warmup:
            warmup.inputs["x"].CopyFrom(warmup.inputs.pop("input__0"))
    edit_config(repo / "torch_model", rename, "configs/cpu.pbtxt")
    _exactly(check_repository(repo),
             ("torch_model", "configs/cpu.pbtxt: output 'output__1' does not follow the libtorch naming rule "
                             "`<name>__<index>` (index < 1)"))


def test_an_unknown_onnx_type_is_named_by_its_number(repo):
    path = repo / "onnx_model" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.COMPLEX64
    rewrite(path, model.SerializeToString())
    _exactly(check_repository(repo), ("onnx_model", "input 'input': config says TYPE_FP32, the graph has onnx elem_type 14"))


def test_a_python_model_without_model_py(repo):
    (repo / "preprocess" / "1" / "model.py").unlink()
    _exactly(check_repository(repo), ("preprocess", "version 1/ has no model.py"))  # and nothing about its imports


def test_a_repository_built_for_max_batch_1_passes(small_artifacts, tmp_path):
    """Batch axis present, but of size at most 1: every rule that looks at max_batch_size still holds."""
    from tritonize.repository_builder import RepoOptions, build_repository

    repo = tmp_path / "models"
    build_repository(small_artifacts, repo, RepoOptions(kind="cpu", max_batch=1, preferred=(1,)))
    _exactly(check_repository(repo, small_artifacts))
    # an ensemble batching above its steps' 1: the bound, and nothing about its tensors (the steps batch)
    edit_config(repo / "onnx_classifier", lambda c: setattr(c, "max_batch_size", 2))
    _exactly(check_repository(repo), ("onnx_classifier", "max_batch_size 2 but step 1's preprocess takes at most 1"),
             ("onnx_classifier", "max_batch_size 2 but step 2's onnx_model takes at most 1"))


# ------------------------------------------------------------------ models with more than one tensor of a kind

def _model(repo, name, config, files):
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    for rel, write in files.items():
        write(model_dir / rel)
    return model_dir


TORCH_TWO_BY_TWO = """platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] },
        { name: "scale__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "output__1" data_type: TYPE_FP32 dims: [ 1 ] %s},
         { name: "output__0" data_type: TYPE_FP32 dims: [ 3, 1 ] %s} ]
"""


def test_a_torchscript_model_with_two_inputs_and_two_outputs(repo):
    """Outputs are matched to forward()'s results by index, whatever their order in the config; inputs may be
    named after forward()'s arguments; every output's labels are checked."""
    import torch

    class TwoByTwo(torch.nn.Module):
        def forward(self, image, scale):
            return (image.mean(dim=(2, 3)) * scale).unsqueeze(-1), image.amax(dim=(1, 2, 3)).unsqueeze(-1)

    model_dir = _model(repo, "two_by_two", TORCH_TWO_BY_TWO % ("", 'label_filename: "classes.txt" '), {
        "1/model.pt": lambda path: torch.jit.script(TwoByTwo()).save(str(path)),
        "classes.txt": lambda path: path.write_text("red\ngreen\nblue\n"),
        "two.txt": lambda path: path.write_text("red\ngreen\n"),
    })
    (model_dir / "configs").mkdir()
    variants = {
        "renamed": (TORCH_TWO_BY_TWO % ("", "")).replace('"scale__1"', '"factor"'),
        "three_inputs": (TORCH_TWO_BY_TWO % ("", "")).replace(
            "dims: [ 1 ] } ]", 'dims: [ 1 ] }, { name: "extra__2" data_type: TYPE_FP32 dims: [ 1 ] } ]', 1),
        "labels_missing": TORCH_TWO_BY_TWO % ('label_filename: "missing.txt" ', 'label_filename: "two.txt" '),
        "labels_short": TORCH_TWO_BY_TWO % ("", 'label_filename: "two.txt" '),
        "labels_one": TORCH_TWO_BY_TWO % ('label_filename: "two.txt" ', ""),
    }
    for variant, text in variants.items():
        (model_dir / "configs" / f"{variant}.pbtxt").write_text(f'name: "two_by_two"\n{text}')
    _exactly(check_repository(repo),
             ("two_by_two", "parameters lack preprocess.resize", "warning"),
             ("two_by_two", "configs/renamed.pbtxt: input 'factor' does not follow the libtorch naming rule "
                            "`<name>__<index>` (index < 2) nor name a forward() argument (image, scale)"),
             ("two_by_two", "configs/three_inputs.pbtxt: config declares 3 input(s); model.pt forward(image, scale) "
                            "takes 2"),
             ("two_by_two", "configs/labels_missing.pbtxt: output 'output__1': label file missing.txt is missing"),
             ("two_by_two", "configs/labels_missing.pbtxt: output 'output__0': two.txt has 2 labels for 3 outputs"),
             ("two_by_two", "configs/labels_short.pbtxt: output 'output__0': two.txt has 2 labels for 3 outputs"),
             ("two_by_two", "configs/labels_one.pbtxt: output 'output__1': two.txt has 2 labels for 1 outputs"))


def test_onnx_models_with_two_inputs_and_with_none_and_ensembles_of_them(repo):
    from onnx import TensorProto, helper

    def save(graph):
        return lambda path: onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))

    vector = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("a", "b", "c")]
    _model(repo, "sum", """platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP16 dims: [ 4 ] } ]
output [ { name: "c" data_type: TYPE_FP32 dims: [ 4 ] } ]
""", {"1/model.onnx": save(helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "sum", vector[:2], vector[2:]))})
    constant = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1, 4], [0.0] * 4))
    _model(repo, "constant", """platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [ { name: "c" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
""", {"1/model.onnx": save(helper.make_graph([constant], "constant", [],
                                             [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4])]))})
    _model(repo, "sum_ensemble", """platform: "ensemble"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "sum" model_version: -1 input_map { key: "y" value: "X" }
                               output_map { key: "c" value: "C" } } ] }
""", {})
    _model(repo, "constant_ensemble", """platform: "ensemble"
max_batch_size: 1
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [ { name: "C" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
ensemble_scheduling { step [ { model_name: "constant" model_version: -1 input_map { key: "x" value: "X" }
                               output_map { key: "c" value: "C" } } ] }
""", {})
    _exactly(check_repository(repo),
             ("sum", "parameters lack preprocess.resize", "warning"),
             ("sum", "config input 'x' is not an input of model.onnx (graph inputs: a, b)"),
             ("sum", "input 'b': config says TYPE_FP16, the graph has TYPE_FP32"),  # still checked after 'x'
             ("sum", "model.onnx input 'a' is missing from the config"),
             ("constant", "parameters lack preprocess.resize", "warning"),
             ("constant", "config input 'x' is not an input of model.onnx (graph inputs: none)"),
             ("sum_ensemble", "parameters lack preprocess.resize", "warning"),
             ("sum_ensemble", "step 1: 'y' is not an input of sum (its inputs: x, b)"),
             ("sum_ensemble", "step 1: sum's input(s) x, b are not mapped"),
             # (an ensemble of max_batch_size 1 over a step without a batch axis: Triton's scheduler strips the batch of
             # 1 from X for it, and gives its C a batch of 1)
             ("constant_ensemble", "parameters lack preprocess.resize", "warning"))


# ------------------------------------------------------------ rules found against the real Triton (issue 37)
def test_trt_model_tensors_are_checked_against_the_onnx_the_plan_was_built_from(repo, artifacts_copy):
    """tensorrt_backend compares the config's data types and dims with the engine's, whose inputs and outputs are those
    of the ONNX it was built from (a variable dim on either side takes any)."""
    from dataclasses import replace

    from tritonclient.grpc import model_config_pb2 as pb

    from tests.conftest import record
    from tests.repository_builder.helpers import restamp

    entry = add_trt_model(repo, artifacts_copy)
    record(artifacts_copy, "tensorrt", replace(entry, onnx=replace(entry.onnx, file="model.onnx")))  # [N, 3, 224, 224]
    restamp(repo, artifacts_copy)
    _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE)

    def change(c):
        c.input[0].dims[1] = -1  # variable: takes the engine's 224
        c.output[0].dims.append(1)
        c.output[0].data_type = pb.TYPE_FP16
        for warmup in c.model_warmup:
            warmup.inputs["input"].dims[1] = 224
    edit_config(repo / "trt_model", change)
    _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE,
             ("trt_model", "output 'output': config says TYPE_FP16, the plan's is TYPE_FP32: Triton's tensorrt backend "
                           "refuses the model"),
             ("trt_model", "output 'output': config dims [1000, 1] do not match the plan's [1000] (batch axis excluded)"))
    def batch_one(c):  # batching, at 1
        c.max_batch_size = 1
        del c.dynamic_batching.preferred_batch_size[:]
        for warmup in c.model_warmup:
            warmup.batch_size = 1
    edit_config(repo / "trt_model", batch_one)
    _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE,
             ("trt_model", "output 'output': config says TYPE_FP16"),
             ("trt_model", "output 'output': config dims [1000, 1] do not match the plan's [1000] (batch axis excluded)"))

    def extra_output_first(c):  # a name the plan lacks (said by the names rule) does not stop the others' check
        outputs = [pb.ModelOutput(name="extra", data_type=pb.TYPE_FP32, dims=[1]), *c.output]
        del c.output[:]
        c.output.extend(outputs)
    edit_config(repo / "trt_model", extra_output_first)
    assert [f.message for f in check_repository(repo, artifacts_copy) if "the plan's [1000]" in f.message] == [
        "output 'output': config dims [1000, 1] do not match the plan's [1000] (batch axis excluded): Triton's tensorrt "
        "backend refuses the model"]
    edit_config(repo / "trt_model", lambda c: setattr(c, "max_batch_size", 0))  # the batch axis is then one of the dims
    assert "input 'input': config dims [3, -1, 224] do not match the plan's [-1, 3, 224, 224]" in " ".join(
        f.message for f in check_repository(repo, artifacts_copy))

    # A plan's ONNX of a fixed batch and a type TensorRT's parser knows but tritonize does not name: the engine's
    # batch is never compared with the config's (tensorrt_backend compares -1 with it), the type is named by number.
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "g",
                              [helper.make_tensor_value_info("input", TensorProto.COMPLEX64, [2, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 1000])])
    onnx.save(helper.make_model(graph), str(artifacts_copy / "fixed_batch.onnx"))
    record(artifacts_copy, "tensorrt", replace(entry, onnx=replace(entry.onnx, file="fixed_batch.onnx")))
    restamp(repo, artifacts_copy)
    edit_config(repo / "trt_model", lambda c: (setattr(c, "max_batch_size", 4), c.output.pop(0), c.output[0].dims.pop(),
                                               setattr(c.output[0], "data_type", pb.TYPE_FP32)))
    assert [f.message for f in check_repository(repo, artifacts_copy) if "plan's" in f.message] == [
        "input 'input': config says TYPE_FP32, the plan's is onnx elem_type 14: Triton's tensorrt backend refuses the model"]


@pytest.mark.parametrize("model, change, backend", [
    ("onnx_model", {"platform": ""}, "onnxruntime"),  # model.onnx in version 1
    ("torch_model", {"platform": ""}, "pytorch"),  # model.pt
    ("preprocess", {"backend": ""}, "python"),  # model.py
    ("onnx_model", {"platform": "", "default_model_filename": "model.plan"}, None),  # tensorrt: no model.plan there
])
def test_triton_fills_in_the_backend_from_the_model_file_before_it_validates(repo, model, change, backend):
    """core model_config_utils.cc AutoCompleteBackendFields: a config without platform and backend serves the backend
    of its default_model_filename, else of the first version directory's model file."""
    def edit(c):
        for field, value in change.items():
            setattr(c, field, value)
    edit_config(repo / model, edit)
    errors = _errors(check_repository(repo), model)
    if backend:
        assert errors == []
    else:  # (and the repository's instances are on KIND_CPU)
        assert errors == ["config.pbtxt: tensorrt_plan on KIND_CPU instances (TensorRT engines only run on a GPU)",
                          "version 1/ has no model.plan"]


def test_warmup_samples_are_requests_of_the_configs_inputs(repo):
    """Triton core runs a warmup sample as `batch_size` requests of batch 1 and validates each like a request."""
    from tritonclient.grpc import model_config_pb2 as pb

    def change(c):
        c.input[0].dims[1] = -1  # a variable dim: the sample gives its size
        samples = list(c.model_warmup)
        skipped = pb.ModelWarmup(name="skipped", batch_size=0)  # batch 0: never run, never read (and the first)
        skipped.inputs["nothing"].dims.append(1)
        del c.model_warmup[:]
        c.model_warmup.extend([skipped, *samples])
        sample = c.model_warmup[2]
        sample.inputs["input"].data_type = pb.TYPE_FP16
        given = pb.ModelWarmup.Input()
        given.CopyFrom(c.model_warmup[1].inputs["input"])
        del c.model_warmup[1].inputs["input"]
        c.model_warmup[1].inputs["other"].CopyFrom(given)  # a name the config lacks, before the one it has
        c.model_warmup[1].inputs["input"].CopyFrom(given)
        c.model_warmup[1].inputs["input"].dims[2] = -1  # no size for a variable dim
    edit_config(repo / "onnx_model", change)
    _exactly(check_repository(repo),
             ("onnx_model", "config.pbtxt: warmup 'batch_1' input 'input' is TYPE_FP32 [3, 224, -1]; the config's input "
                            "is TYPE_FP32 [3, -1, 224]"),
             ("onnx_model", "config.pbtxt: warmup 'batch_32' input 'input' is TYPE_FP16 [3, 224, 224]"),
             ("onnx_model", "input 'input': config dims [3, -1, 224] do not match the graph's [3, 224, 224]"))


@pytest.mark.parametrize("max_batch, batch, refused", [(0, 1, False), (0, 2, True), (4, 4, False), (4, 5, True)])
def test_a_warmup_batch_runs_as_one_batch_of_at_most_max_batch_size(repo, max_batch, batch, refused):
    """The backend runs a sample's requests as one batch and refuses it above max_batch_size, above 1 without batching
    (the backend library's total batch rule; the Python backend's too)."""
    def change(c):
        c.max_batch_size = max_batch
        c.ClearField("dynamic_batching")
        del c.model_warmup[1:]
        c.model_warmup[0].batch_size = batch
        if not max_batch:
            for t in (*c.input, *c.output):
                t.dims.insert(0, -1)
            c.model_warmup[0].inputs["input__0"].dims.insert(0, 1)
    edit_config(repo / "torch_model", change)
    errors = _errors(check_repository(repo), "torch_model")
    assert errors == ([f"config.pbtxt: warmup 'batch_1' uses batch {batch} > max_batch_size {max_batch}"] if refused else [])


@pytest.mark.parametrize("names, refused", [(["0"], None), (["1st"], None), ([" 1", "+0"], None), (["-1"], "-1"),
                                            (["a"], "a"), ([""], ""), (["0", "b"], "b")])
def test_profile_names_are_read_as_triton_reads_them(repo, artifacts_copy, names, refused):
    """Triton core parses each name with std::stoi (GetProfileIndex): a leading integer, not negative."""
    add_trt_model(repo, artifacts_copy)
    edit_config(repo / "trt_model", lambda c: c.instance_group[0].profile.extend(names))
    _exactly(check_repository(repo), NO_PLAN_FILE, *([] if refused is None else [
        ("trt_model", f"config.pbtxt: instance_group #1: profile {names} names {refused!r}, which is not a profile index; "
                      "Triton refuses to load the model")]))


def test_profile_in_a_model_of_another_backend_is_refused(repo):
    edit_config(repo / "onnx_model", lambda c: c.instance_group[0].profile.append("0"))
    _exactly(check_repository(repo), ("onnx_model", "config.pbtxt: instance_group #1 lists profile in a model of the "
                                                    "onnxruntime backend: Triton refuses it"))


def test_what_triton_refuses_in_an_ensemble_config(repo):
    """core ValidateEnsembleSchedulingConfig: no instance_group, optimization or model_warmup; input_map and output_map in
    every step; each tensor written once; each ensemble input and each written tensor read (or an ensemble output)."""
    def change(c):
        c.instance_group.add(count=1)
        c.optimization.input_pinned_memory.enable = True
        c.model_warmup.add(name="w", batch_size=1)
        c.input.add(name="EXTRA", data_type=c.input[0].data_type, dims=[1])
        first, second = c.ensemble_scheduling.step
        first.output_map["PREPROCESSED"] = "ALSO"  # written by step 1 and by step 2 below
        second.output_map["output"] = "ALSO"
    edit_config(repo / "onnx_classifier", change)
    edit_config(repo / "onnx_classifier_uint8", lambda c: c.ensemble_scheduling.step[1].ClearField("output_map"))
    _exactly(check_repository(repo),
             *[("onnx_classifier", f"an ensemble with {what}: Triton refuses it") for what in
               ("instance_group", "optimization", "model_warmup")],
             ("onnx_classifier", "the ensemble's input 'EXTRA' is read by no step"),
             ("onnx_classifier", "tensor 'ALSO' is written by step 1 and step 2"),
             ("onnx_classifier", "step 1 writes tensor 'ALSO', which no step reads and the ensemble does not output"),
             ("onnx_classifier", "onnx_model's input 'input' reads tensor 'PREPROCESSED', which no step produces"),
             ("onnx_classifier", "the ensemble's output reads tensor 'LOGITS', which no step produces"),
             ("onnx_classifier_uint8", "step 2 has no output_map: Triton refuses the ensemble"),
             ("onnx_classifier_uint8", "the ensemble's output reads tensor 'LOGITS', which no step produces"))


def test_an_ensemble_may_batch_over_a_step_without_a_batch_axis_whose_dims_hold_it(repo):
    """ensemble_utils.cc ValidateEnsembleConfig: a step of max_batch_size 0 in a batching ensemble, when its dims are the
    other side's with the batch axis ([-1, 3, 224, 224] for [3, 224, 224])."""
    def no_batch_axis(c):
        c.max_batch_size = 0
        c.ClearField("dynamic_batching")
        for t in (*c.input, *c.output):
            t.dims.insert(0, -1)
        del c.model_warmup[:]
    for name in ("config.pbtxt", "configs/cpu.pbtxt", "configs/gpu.pbtxt"):
        edit_config(repo / "onnx_model", no_batch_axis, name)
    _exactly(check_repository(repo))


def test_an_ensemble_without_a_batch_axis_over_batching_steps_passes(repo):
    """Triton's ensemble scheduler gives a batching step the ensemble's unbatched tensor as a batch of 1, and strips
    that batch from the step's output (ensemble_scheduler.cc ReshapeTensorDims); the embedded Triton serves it."""
    edit_config(repo / "onnx_classifier", lambda c: setattr(c, "max_batch_size", 0))
    _exactly(check_repository(repo))


@pytest.mark.parametrize("ensemble_batch, step_dims, refused", [
    (1, [1, 4], None),  # only batches of 1 reach the step: Triton strips the batch axis for it
    (2, [1, 4], "tensor 'X': the ensemble's input is TYPE_FP32 [1, 4] with a batch axis, pair's input 'x' is TYPE_FP32 "
                "[1, 4] without a batch axis (Triton passes it batches of 1 only)"),
    (2, [2, 1, 4], None),  # the step's dims are the ensemble's with a batch axis (a fixed one agrees with -1)
    (1, [2, 1, 4], None),  # so at max_batch_size 1 too: the ensemble's input has its batch axis there as well
    (0, [-1, 1, 4], "tensor 'X': the ensemble's input is TYPE_FP32 [1, 4], pair's input 'x' is TYPE_FP32 [-1, 1, 4]"),
])
def test_an_ensemble_passes_tensors_to_a_step_without_a_batch_axis_as_triton_does(repo, ensemble_batch, step_dims,
                                                                                refused):
    dims = ", ".join(map(str, step_dims))
    _model(repo, "pair", f"""backend: "python"
max_batch_size: 0
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
""", {"1/model.py": lambda path: path.write_text("")})
    _model(repo, "pair_ensemble", f"""platform: "ensemble"
max_batch_size: {ensemble_batch}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1, 4 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "pair" model_version: -1 input_map {{ key: "x" value: "X" }}
                                output_map {{ key: "y" value: "Y" }} }} ] }}
""", {})
    errors = _errors(check_repository(repo), "pair_ensemble")
    assert [e for e in errors if not e.startswith("tensor 'Y'")] == ([refused] if refused else [])


def test_each_map_of_a_step_must_be_there_and_name_the_models_tensors(repo):
    """A step without an input_map; a step mapping a key of a model that declares no inputs (its inputs: none)."""
    _model(repo, "source", """backend: "python"
max_batch_size: 0
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
""", {"1/model.py": lambda path: path.write_text("")})
    _model(repo, "source_ensemble", """platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "source" model_version: -1 input_map { key: "x" value: "X" }
                               output_map { key: "y" value: "Y" } } ] }
""", {})
    edit_config(repo / "onnx_classifier", lambda c: c.ensemble_scheduling.step[0].ClearField("input_map"))
    errors = _errors(check_repository(repo))
    assert "step 1: 'x' is not an input of source (its inputs: none)" in errors
    assert "step 1 has no input_map: Triton refuses the ensemble" in errors


@pytest.mark.parametrize("precision, counts", [("fp16", {"FP32": 2, "FP16": 2}), ("fp16", {"FP32": 3, "FP16": 1}),
                                               ("fp32", {"FP32": 4}), ("int8", {"FP32": 5, "INT8": 1})])
def test_a_plan_that_runs_more_than_half_its_layers_in_fp32_is_flagged(repo, artifacts_copy, precision, counts):
    """From the engine's layers as the manifest records them: an fp16 or int8 plan with more than half its layers in
    FP32 (half is not more), never an FP32 plan, which runs FP32 as asked."""
    from dataclasses import replace

    from tests.conftest import record
    from tests.repository_builder.helpers import restamp
    from tritonize.manifest import LayerPrecisions

    entry = add_trt_model(repo, artifacts_copy)
    layers = LayerPrecisions(counts=counts, fp32_layers=("conv1", "conv2", "fc", "pool", "add")[:counts["FP32"]],
                             source="IEngineInspector")
    record(artifacts_copy, "tensorrt", replace(entry, precision=precision, layers=layers))
    restamp(repo, artifacts_copy)
    flagged = precision != "fp32" and counts["FP32"] * 2 > sum(counts.values())
    found = _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE,
                     *([("trt_model", f"the {precision} plan runs", "warning")] if flagged else []))
    if flagged:  # (the whole text: tests/golden/check_findings.json)
        assert found[1].message.startswith(f"the {precision} plan runs {counts['FP32'] / sum(counts.values()):.0%} of its "
                                           f"layers in FP32 ({layers.summary()}; e.g. conv1, conv2, fc): it will be about "
                                           "as slow as an FP32 plan")


@pytest.mark.parametrize("verified, max_batch, refused", [(16, 16, False), (16, 17, True), (16, 32, True)])
def test_a_plan_serves_no_batch_above_the_one_it_was_verified_at_within_its_profile(repo, artifacts_copy, verified,
                                                                                    max_batch, refused):
    """A plan of profile 1..32 verified up to batch 16 serves at most 16, whatever its profile takes."""
    from dataclasses import replace

    import numpy as np

    from tests.conftest import record
    from tests.repository_builder.helpers import restamp
    from tritonize.verify import verify_runner

    entry = add_trt_model(repo, artifacts_copy)  # profile 1/16/32
    ref = np.eye(verified, 10)
    report = verify_runner(lambda b: ref[: len(b)], np.zeros((verified, 1)), ref)  # batches 1, odd, `verified`
    record(artifacts_copy, "tensorrt", replace(entry, verification=report))
    restamp(repo, artifacts_copy)

    def bound(c):
        c.max_batch_size = max_batch
        del c.dynamic_batching.preferred_batch_size[:]
        for warmup in c.model_warmup:
            warmup.batch_size = 1
    edit_config(repo / "trt_model", bound)
    _exactly(check_repository(repo, artifacts_copy), NO_PLAN_FILE, *([("trt_model", f"max_batch_size {max_batch} is above "
                                                                       f"the batch model.plan was verified at ({verified})")]
                                                                     if refused else []))


def test_trt_models_rules_run_on_trt_model(repo, artifacts_copy):
    """The rules of TensorRT models' options (plan_options.py), on a config of the tensorrt backend: the GPU kind of its
    plan, CUDA graphs, profiles against the plan's, the execution context's memory."""
    add_trt_model(repo, artifacts_copy)

    def options(c):
        c.parameters["source.compute_capability"].string_value = "8.6"
        c.optimization.cuda.graphs = True
        c.optimization.cuda.graph_spec.add(batch_size=0)
        c.instance_group[0].profile.append("2")
        c.parameters["execution_context_allocation_strategy"].string_value = "DYNAMIC"
    edit_config(repo / "trt_model", options)
    _exactly(check_repository(repo, artifacts_copy, gpu_cc="7.5"), NO_PLAN_FILE,
             ("trt_model", "no plan for this GPU's compute capability 7.5 (plans for 8.6)"),
             ("trt_model", "graph_spec batch_size 0: Triton's tensorrt backend expects 'batch_size' to be >= 1"),
             ("trt_model", "instance_group #1: profile 2 is not one of the plan's 1 optimization profile(s)"),
             ("trt_model", "execution_context_allocation_strategy is 'DYNAMIC': Triton's tensorrt backend refuses"),
             ("trt_model", "execution_context_allocation_strategy: Triton 24.04's tensorrt backend does not read it",
              "warning"))


@pytest.mark.parametrize("every_subdirectory", [False, True], ids=["no_version", "no_subdirectory"])
def test_a_model_directory_without_any_version_directory(repo, every_subdirectory):
    """Also with no subdirectory at all (no configs/ either): the backend Triton fills in from the first one's files
    has none to look in."""
    import shutil

    model = repo / "onnx_model"
    for subdirectory in [p for p in model.iterdir() if p.is_dir()] if every_subdirectory else [model / "1"]:
        shutil.rmtree(subdirectory)
    _exactly(check_repository(repo), ("onnx_model", "no numeric version directory: Triton finds no version to serve"))


def test_an_onnx_model_kept_as_a_directory_fills_in_the_onnxruntime_backend(repo):
    """Triton fills in onnxruntime for a version directory's model.onnx whether it is a file or a directory (an ONNX
    with its external data); model.plan and model.pt only as files."""
    import os

    model = repo / "onnx_model"
    onnx_file = model / "1" / "model.onnx"
    os.link(onnx_file, repo / "kept.onnx")
    onnx_file.unlink()
    onnx_file.mkdir()
    edit_config(model, lambda c: setattr(c, "platform", ""))
    assert _errors(check_repository(repo), "onnx_model") == []
    edit_config(repo / "torch_model", lambda c: setattr(c, "platform", ""))
    torchscript = repo / "torch_model" / "1" / "model.pt"
    os.link(torchscript, repo / "kept.pt")
    torchscript.unlink()
    torchscript.mkdir()
    assert _errors(check_repository(repo), "torch_model") == ["config.pbtxt: neither platform nor backend is set"]
