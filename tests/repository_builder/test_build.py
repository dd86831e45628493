"""`tritonize repo build` on real artifacts (the suite's classifier): the configs parse back through Triton's schema."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as pb

from tests.conftest import plan_entry, record, run_cli
from tests.repository_builder.helpers import copy_repo
from tritonize.errors import TritonizeError
from tritonize.manifest import Manifest
from tritonize.model_repository import BACKENDS, parse_config
from tritonize.preprocessing import Preprocessing
from tritonize.repository_builder import RepoOptions, build_repository, builder as builder_module
from tritonize.repository_builder.config import kind_name, model_config

EXPECTED_NAMES = {"onnx_model": ("onnxruntime_onnx", "input", "output", "model.onnx"),
                  "torch_model": ("pytorch_libtorch", "input__0", "output__0", "model.pt")}
PREPROCESSING = ["preprocess", "preprocess_uint8"]


def _built(repo) -> list[str]:
    return sorted(p.name for p in repo.iterdir() if p.is_dir())


def _kinds(cfg) -> list[str]:
    return [kind_name(g.kind) for g in cfg.instance_group]


def test_repository_parses_back_with_every_field(small_repo, small_artifacts):
    assert _built(small_repo) == sorted(["onnx_model", "torch_model", *PREPROCESSING, "onnx_classifier",
                                         "onnx_classifier_uint8", "torch_classifier", "torch_classifier_uint8"])
    manifest = Manifest.load(small_artifacts)
    spec = manifest.spec
    for name, (platform, input_name, output_name, filename) in EXPECTED_NAMES.items():
        d = small_repo / name
        cfg = parse_config(d / "config.pbtxt")
        assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, platform, 32)
        assert [(t.name, list(t.dims)) for t in cfg.input] == [(input_name, [3, 224, 224])]
        assert [(t.name, list(t.dims), t.label_filename) for t in cfg.output] == [(output_name, [1000], "labels.txt")]
        assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8, 16, 32]
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
        assert [(g.count, kind_name(g.kind)) for g in cfg.instance_group] == [(1, "KIND_CPU")]
        assert [(w.batch_size, w.inputs[input_name].zero_data) for w in cfg.model_warmup] == [(1, True), (32, True)]
        assert cfg.version_policy.latest.num_versions == 1
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        assert params["preprocess.mean"] == "0.485,0.456,0.406" and params["preprocess.std"] == "0.229,0.224,0.225"
        assert (params["preprocess.resize"], params["preprocess.crop"]) == ("256", "224")
        assert params["preprocess.interpolation"] == "bilinear" and params["preprocess.channel_order"] == "RGB"
        assert float(params["preprocess.scale"]) == pytest.approx(1 / 255)
        assert (params["source.arch"], params["source.weights"]) == (spec.arch, "none")
        assert params["source.manifest_sha256"] == manifest.sha256()
        assert (d / "labels.txt").read_text().splitlines() == list(spec.labels)
        # The model file is the verified artifact itself, hard-linked (no 500 MB copy).
        artifact = small_artifacts / filename
        assert (d / "1" / filename).stat().st_ino == artifact.stat().st_ino


def test_cpu_and_gpu_variants_and_kind_auto(small_artifacts, tmp_path):
    repo = tmp_path / "models"
    build_repository(small_artifacts, repo)  # default kind: auto
    for name in EXPECTED_NAMES:
        d = repo / name
        assert _kinds(parse_config(d / "config.pbtxt")) == ["KIND_AUTO"]
        assert _kinds(parse_config(d / "configs" / "cpu.pbtxt")) == ["KIND_CPU"]
        assert _kinds(parse_config(d / "configs" / "gpu.pbtxt")) == ["KIND_GPU"]
        # The variants differ from the default only in the instance kind.
        gpu = parse_config(d / "configs" / "gpu.pbtxt")
        del gpu.instance_group[:]
        default = parse_config(d / "config.pbtxt")
        del default.instance_group[:]
        assert gpu == default


def test_options_shape_the_config(small_artifacts, tmp_path):
    options = RepoOptions(max_batch=8, preferred=(2, 8, 16, 64), queue_delay_us=5000, instances=2, kind="gpu",
                          warmup=False, models=("onnx_model",))
    repo = tmp_path / "models"
    build_repository(small_artifacts, repo, options)
    assert _built(repo) == ["onnx_classifier", "onnx_classifier_uint8", "onnx_model", *PREPROCESSING]
    for name in PREPROCESSING:  # preprocessing runs on CPU instances whatever --kind says
        pre = parse_config(repo / name / "config.pbtxt")
        assert (pre.backend, pre.max_batch_size, pre.dynamic_batching.max_queue_delay_microseconds) == ("python", 8, 5000)
        assert [(g.count, kind_name(g.kind)) for g in pre.instance_group] == [(2, "KIND_CPU")]
    assert parse_config(repo / "onnx_classifier" / "config.pbtxt").max_batch_size == 8
    cfg = parse_config(repo / "onnx_model" / "config.pbtxt")
    assert cfg.max_batch_size == 8 and list(cfg.dynamic_batching.preferred_batch_size) == [2, 8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 5000
    assert [(g.count, kind_name(g.kind)) for g in cfg.instance_group] == [(2, "KIND_GPU")]
    assert len(cfg.model_warmup) == 0


def test_trt_config_follows_the_plan_profile(small_artifacts):
    spec = Manifest.load(small_artifacts).spec
    entry = plan_entry(profile={"min": 1, "opt": 8, "max": 16})
    cfg = model_config(BACKENDS["trt_model"], spec, entry, RepoOptions(), "gpu", "x" * 64)
    assert (cfg.platform, cfg.max_batch_size) == ("tensorrt_plan", 16)  # by default, the profile max
    with pytest.raises(TritonizeError, match="--max-batch 32: trt_model serves at most 16, the plan's profile max"):
        model_config(BACKENDS["trt_model"], spec, entry, RepoOptions(max_batch=32), "gpu", "x" * 64)
    assert model_config(BACKENDS["trt_model"], spec, entry, RepoOptions(max_batch=8), "gpu", "x" * 64).max_batch_size == 8
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8, 16]
    assert [w.batch_size for w in cfg.model_warmup] == [1, 16]
    assert [t.name for t in cfg.input] == ["input"] and _kinds(cfg) == ["KIND_GPU"]
    # What `serve` needs to pick the container release, from the repository alone.
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert (params["source.tensorrt_version"], params["source.triton_release"], params["source.version_compatible"]) == (
        "8.6.3.1", "24.04", "false")


def test_trt_model_skipped_with_reason_when_plan_not_built(artifacts_copy, tmp_path):
    record(artifacts_copy, "tensorrt", plan_entry("waiting_for_gpu"))
    result = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models")
    assert result.exit_code == 0, result.output
    assert "built onnx_model" in result.output and "built torch_model" in result.output
    assert "skipped trt_model: TensorRT plan status is 'waiting_for_gpu'" in result.output
    assert not (tmp_path / "models" / "trt_model").exists()
    # A note Triton ignores (a file at the top of the repository) says why and what to run.
    note = (tmp_path / "models" / "trt_model.not-built.txt").read_text()
    assert "waiting for a GPU" in note and "`tritonize convert trt`" in note and f"{artifacts_copy / 'convert.sh'}" in note
    again = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models")
    assert "is up to date" in again.output
    cpu = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models", "--kind", "cpu", "--force")
    assert cpu.exit_code == 0 and not (tmp_path / "models" / "trt_model.not-built.txt").exists()  # left out on purpose


def test_missing_artifact_is_skipped_and_others_built(artifacts_copy, tmp_path):
    (artifacts_copy / "model.pt").unlink()
    result = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models")
    assert result.exit_code == 0, result.output
    assert f"skipped torch_model: {artifacts_copy / 'model.pt'} is missing" in result.output
    assert _built(tmp_path / "models") == ["onnx_classifier", "onnx_classifier_uint8", "onnx_model", *PREPROCESSING]


def test_failed_build_leaves_previous_repository_untouched(small_artifacts, tmp_path, monkeypatch):
    out = tmp_path / "models"
    build_repository(small_artifacts, out, RepoOptions(models=("onnx_model",), ensembles=False))
    before = (out / "onnx_model" / "config.pbtxt").read_text()
    calls = []

    def place_then_fail(src, dst):  # fault injection: the second model file cannot be written
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_place(src, dst)

    real_place = builder_module._place
    monkeypatch.setattr(builder_module, "_place", place_then_fail)
    with pytest.raises(OSError):
        build_repository(small_artifacts, out, RepoOptions(max_batch=8, force=True))
    assert len(calls) == 2
    assert _built(out) == ["onnx_model"]
    assert (out / "onnx_model" / "config.pbtxt").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["models"]  # no temporary directory left behind


def test_existing_repository_needs_force_and_readme_is_kept(small_artifacts, tmp_path):
    out = tmp_path / "models"
    out.mkdir()
    (out / "README.md").write_text("generated, not committed\n")
    assert run_cli("repo", "build", "--artifacts", small_artifacts, out).exit_code == 0
    same = run_cli("repo", "build", "--artifacts", small_artifacts, out)
    assert same.exit_code == 0 and "up to date" in same.output  # the stage decides: nothing to do
    again = run_cli("repo", "build", "--artifacts", small_artifacts, out, "--max-batch", "8")
    assert again.exit_code != 0 and "add --force" in again.output
    forced = run_cli("repo", "build", "--artifacts", small_artifacts, out, "--force", "--max-batch", "16")
    assert forced.exit_code == 0, forced.output
    assert parse_config(out / "onnx_model" / "config.pbtxt").max_batch_size == 16
    assert (out / "README.md").read_text() == "generated, not committed\n"


def test_the_served_batch_bound_is_the_verified_one_built_checked_and_served(artifacts_copy, tmp_path):
    """`export --max-batch 8` verifies model.onnx up to batch 8 (model.pt stays verified at 32): `repo build`
    serves each at what it was verified at, refuses more, `repo check` flags a config above it, and the real
    server refuses a batch of 9."""
    from tritonize.client.connection import Connection
    from tritonize.serve.embedded import embedded_server

    if "MUTANT_UNDER_TEST" in os.environ:  # the server's preprocess model would run mutmut's copies, which need its state
        pytest.skip("runs a real server on the repository's copies of the modules: not under make mutation")
    model = Manifest.load(artifacts_copy).model  # the suite's classifier; squeezenet1_1 under `make mutation`
    labels = model.labels_source.removeprefix("--labels ")  # the same model: its labels from the same file
    exported = run_cli("export", "--format", "onnx", "--arch", model.arch, "--weights", "none", "--max-batch", "8",
                       *(["--labels", labels] if labels != model.labels_source else []), "--artifacts", artifacts_copy)
    assert exported.exit_code == 0, exported.output
    repo = tmp_path / "models"
    built = run_cli("repo", "build", "--artifacts", artifacts_copy, repo, "--kind", "cpu", "--no-warmup")
    assert built.exit_code == 0, built.output
    bounds = {name: parse_config(repo / name / "config.pbtxt").max_batch_size
              for name in ("onnx_model", "torch_model", "onnx_classifier", "torch_classifier", "preprocess")}
    assert bounds == {"onnx_model": 8, "torch_model": 32, "onnx_classifier": 8, "torch_classifier": 32, "preprocess": 32}
    assert "built onnx_model: onnxruntime_onnx, max_batch_size 8 (the batch model.onnx was verified at)" in built.output
    for asked, refused in ((16, "onnx_model"), (64, "onnx_model")):
        more = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "more",
                       "--max-batch", str(asked))
        [line] = [line for line in more.output.splitlines() if line.startswith("error:")]
        assert more.exit_code == 1 and "Traceback" not in more.output
        assert f"--max-batch {asked}: {refused} serves at most 8, the batch model.onnx was verified at" in line
        assert f"`tritonize export --max-batch {asked} --force`" in line and not (tmp_path / "more").exists()
    assert run_cli("repo", "check", repo, "--artifacts", artifacts_copy).exit_code == 0

    config = repo / "onnx_model" / "configs" / "cpu.pbtxt"  # what the embedded engine serves here
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 32"))
    check = run_cli("repo", "check", repo, "--artifacts", artifacts_copy)
    assert check.exit_code == 1
    [finding] = [line for line in check.output.splitlines() if line.startswith("error:")]
    assert "onnx_model: configs/cpu.pbtxt: max_batch_size 32 is above the batch model.onnx was verified at (8)" in finding
    config.write_text(config.read_text().replace("max_batch_size: 32", "max_batch_size: 8"))

    (repo / "torch_model").rename(tmp_path / "torch_model")  # a fast start: onnxruntime models only
    for name in ("torch_classifier", "torch_classifier_uint8"):
        (repo / name).rename(tmp_path / name)
    with embedded_server(repo) as info, Connection(info.grpc_url) as connection:
        served = connection.model("onnx_model")
        assert served.max_batch_size == 8 and connection.model("onnx_classifier").max_batch_size == 8
        x = np.zeros((9, *served.input_dims), np.float32)
        with pytest.raises(TritonizeError, match="batch-size must be <= 8"):
            connection.infer(served, x)
        assert connection.infer(served, x[:8]).shape == (8, 1000)


@pytest.mark.parametrize("args, message", [
    (["--max-batch", "0"], "Invalid value for '--max-batch'"),
    (["--preferred", "4,x"], "--preferred takes a comma-separated list like 4,8,16, got '4,x'"),
    (["--preferred", "0,8"], "--preferred sizes must be >= 1"),
    (["--queue-delay-us", "-1"], "--queue-delay-us must be >= 0"),
    (["--instances", "0"], "Invalid value for '--instances'"),
    (["--kind", "tpu"], "--kind must be one of auto, gpu, cpu"),
    (["--models", "onnx_model,tf_model"], "--models: unknown model tf_model"),
])
def test_bad_options_give_one_clear_line(small_artifacts, tmp_path, args, message):
    result = run_cli("repo", "build", "--artifacts", small_artifacts, tmp_path / "models", *args)
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "models").exists()


def test_no_manifest_and_unwritable_output(small_artifacts, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("repo", "build", "--artifacts", empty, tmp_path / "models")
    assert result.exit_code != 0 and "no manifest" in result.output and "tritonize export" in result.output
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result = run_cli("repo", "build", "--artifacts", small_artifacts, blocker / "models")
    assert result.exit_code != 0 and "cannot write to output directory" in result.output
    assert "Traceback" not in result.output


def test_all_artifacts_missing_is_an_error(artifacts_copy, tmp_path):
    (artifacts_copy / "model.pt").unlink()
    (artifacts_copy / "model.onnx").unlink()
    result = run_cli("repo", "build", "--artifacts", artifacts_copy, tmp_path / "models")
    assert result.exit_code != 0 and "no model to build" in result.output
    assert not (tmp_path / "models").exists()


def test_json_of_check_on_built_repo(small_repo, small_artifacts, tmp_path):
    repo = copy_repo(small_repo, tmp_path / "models")
    result = run_cli("repo", "check", repo, "--artifacts", small_artifacts, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["errors"] == 0 and report["findings"] == []


# ------------------------------------------------------------------ preprocessing models and ensembles

def test_ensembles_chain_a_preprocessing_model_and_each_classifier(small_repo, small_artifacts):
    spec = Manifest.load(small_artifacts).spec
    for backend, (_, input_name, output_name, _) in EXPECTED_NAMES.items():
        for pre, ensemble_input, dtype, dims in (("preprocess", "IMAGE", "TYPE_STRING", [1]),
                                                 ("preprocess_uint8", "PIXELS", "TYPE_UINT8", [224, 224, 3])):
            name = BACKENDS[backend].ensemble + ("_uint8" if pre.endswith("uint8") else "")
            cfg = parse_config(small_repo / name / "config.pbtxt")
            assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, "ensemble", 32)
            assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in cfg.input] == [(ensemble_input, dtype, dims)]
            assert [(t.name, list(t.dims), t.label_filename) for t in cfg.output] == [("LOGITS", [1000], "labels.txt")]
            steps = [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in cfg.ensemble_scheduling.step]
            assert steps == [(pre, {ensemble_input: ensemble_input}, {"PREPROCESSED": "PREPROCESSED"}),
                             (backend, {input_name: "PREPROCESSED"}, {output_name: "LOGITS"})]
            assert (small_repo / name / "labels.txt").read_text().splitlines() == list(spec.labels)
            assert list((small_repo / name / "1").iterdir()) == []  # Triton needs the version, an ensemble has no file
    for pre in ("preprocess", "preprocess_uint8"):
        cfg = parse_config(small_repo / pre / "config.pbtxt")
        assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in cfg.output] == [("PREPROCESSED", "TYPE_FP32", [3, 224, 224])]
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        assert Preprocessing.from_parameters(params) == spec.preprocessing  # the contract it applies
    assert (small_repo / "preprocess" / "requirements.txt").read_text() == "pillow>=10\n"  # decoding needs Pillow
    assert not (small_repo / "preprocess_uint8" / "requirements.txt").exists()  # normalizing needs numpy only


def test_preprocessing_models_carry_the_very_code_the_client_runs(small_repo):
    """model.py and, beside it, byte-identical copies of the modules it imports; those import nothing else
    from tritonize, so the model loads where tritonize is not installed (the NGC container)."""
    import ast

    from tritonize.repository_builder.builder import PREPROCESS_CODE

    for pre in ("preprocess", "preprocess_uint8"):
        version = small_repo / pre / "1"
        placed = sorted(str(p.relative_to(version)) for p in version.rglob("*.py"))
        assert placed == sorted(PREPROCESS_CODE)
        for rel, source in PREPROCESS_CODE.items():
            assert (version / rel).read_bytes() == source.read_bytes()
    modules = {rel.removeprefix("tritonize/").removesuffix(".py") for rel in PREPROCESS_CODE}
    for source in PREPROCESS_CODE.values():
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tritonize"):
                assert node.module.split(".")[-1] in modules, f"{source.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("tritonize") for a in node.names), source.name


def test_no_ensembles_leaves_them_out(small_artifacts, tmp_path):
    result = run_cli("repo", "build", "--artifacts", small_artifacts, tmp_path / "models", "--no-ensembles")
    assert result.exit_code == 0, result.output
    assert _built(tmp_path / "models") == ["onnx_model", "torch_model"]


def test_trt_model_gets_its_ensembles_capped_at_the_plan_profile(small_artifacts):
    """trt_model is built only where a plan is (a GPU box); its ensembles take its batch limit."""
    from tritonize.model_repository import PREPROCESSORS
    from tritonize.repository_builder.config import ensemble_config, preprocessor_config

    spec = Manifest.load(small_artifacts).spec
    trt = model_config(BACKENDS["trt_model"], spec, plan_entry(profile={"min": 1, "opt": 8, "max": 16}),
                       RepoOptions(), "gpu", "x" * 64)
    names = []
    for pre in PREPROCESSORS:
        cfg = ensemble_config(pre.ensemble(BACKENDS["trt_model"]), preprocessor_config(pre, spec, 32, RepoOptions(), "x" * 64),
                              trt, spec, "x" * 64)
        assert cfg.max_batch_size == 16 and cfg.ensemble_scheduling.step[1].model_name == "trt_model"
        names.append(cfg.name)
    assert names == ["trt_classifier", "trt_classifier_uint8"]
