"""`repo check` against the real Triton: generated configs, each written beside its real artifact, linted and loaded
into one real embedded Triton (explicit model control) for the whole test.

The configs start from what `repo build` writes (onnx_model, torch_model, trt_model on the emulated TensorRT 10.x, the
onnx_classifier ensemble) and change the fields the checker has rules for, within and just beyond each rule's bounds.
- Every config Triton refuses is an error of `repo check` (no false "ok"), and so is every config it loads whose one
  request (the configured shapes at max_batch_size) fails or answers other than the config declares.
- Every error of `repo check` on a config Triton loads and serves is a rule of a native backend that the embedded
  server's Python-based backends do not enforce: its checker function's docstring names the backend's source.
The embedded Triton is the real 2.51 server: what its core validates (the config, ensembles, warmup samples, instance
groups) is the oracle itself; what a native backend validates is only as good as tritonize's Python-based backends
(docs/development.md says which rule is which)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import matplotlib.cbook as cbook
import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import Phase, given, settings, strategies as st
from tritonclient.grpc import model_config_pb2 as pb

from tests.conftest import run_cli

PHOTO = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
MAX_BATCH = 4
# Examples per run: bounded for `make test` (the whole test about 45 s on this 2-core machine); more for a longer search.
EXAMPLES = int(os.environ.get("TRITONIZE_DIFFERENTIAL_EXAMPLES", "20"))
CLASSIFIERS = ("onnx_model", "torch_model", "trt_model")
ENSEMBLE = "onnx_classifier"
NOT_BATCHING = "onnx_unbatched"  # onnx_model without a batch axis: [-1, 3, 224, 224] at max_batch_size 0

# --- the changes: the fields the checker has rules for, within and just beyond each rule's bounds ----------------
SIZES = (-1, 0, 1, "max", "max+1")
CLASSIFIER_CHANGES = st.one_of(
    st.tuples(st.just("max_batch_size"), st.sampled_from([-1, 0, 1, MAX_BATCH - 1, MAX_BATCH, MAX_BATCH + 1])),
    st.tuples(st.just("unbatched"), st.just(True)),
    st.tuples(st.just("preferred"), st.lists(st.sampled_from(SIZES), min_size=1, max_size=2).map(tuple)),
    st.tuples(st.just("dynamic_batching"), st.just(False)),
    st.tuples(st.just("warmup"), st.sampled_from([0, 1, 2, "max", "max+1"])),
    st.tuples(st.just("count"), st.sampled_from([-1, 0, 2])),
    st.tuples(st.just("kind"), st.sampled_from(["KIND_CPU", "KIND_AUTO"])),
    st.tuples(st.just("profile"), st.sampled_from([("0",), ("1",), ("2",), ("-1",), ("1x",), ("a",), (" 1",), ("",),
                                                   ("0", "1")])),
    st.tuples(st.just("input_dim"), st.tuples(st.integers(0, 2), st.sampled_from([-2, 0, -1, 225]))),
    st.tuples(st.just("output_dim"), st.sampled_from([-2, 0, -1, 999])),
    st.tuples(st.just("rank"), st.sampled_from(["input+", "input-", "output+"])),
    st.tuples(st.just("dtype"), st.tuples(st.sampled_from(["input", "output"]), st.sampled_from(["TYPE_FP16", "TYPE_INT64"]))),
    st.tuples(st.just("tensor_name"), st.tuples(st.sampled_from(["input", "output"]),
                                                st.sampled_from(["renamed", "__1", "__0", "argument"]))),
    st.tuples(st.just("name"), st.just("another")),
    st.tuples(st.just("platform"), st.sampled_from([("onnxruntime_onnx", ""), ("", "onnxruntime"), ("pytorch_libtorch", ""),
                                                    ("", "pytorch"), ("tensorrt_plan", ""), ("pytorch_libtorch", "onnxruntime"),
                                                    ("onnxruntime_onnxx", ""), ("", "onnxruntimee"), ("ensemble", ""),
                                                    ("", "")])),
    st.tuples(st.just("labels"), st.sampled_from(["missing", "none"])),
    st.tuples(st.just("graphs"), st.tuples(st.booleans(), st.sampled_from([0, 1, "max", "max+1"]),
                                           st.sampled_from([None, 0, 1, "max+1"]))),
    st.tuples(st.just("allocation"), st.sampled_from(["STATIC", "ON_PROFILE_CHANGE", "static", ""])),
)
ENSEMBLE_CHANGES = st.one_of(
    st.tuples(st.just("max_batch_size"), st.sampled_from([-1, 0, 1, MAX_BATCH, MAX_BATCH + 1])),
    st.tuples(st.just("step_model"), st.tuples(st.integers(0, 1), st.sampled_from(["missing", "torch_model", "trt_model",
                                                                                   NOT_BATCHING, "preprocess_uint8"]))),
    st.tuples(st.just("map"), st.tuples(st.integers(0, 1), st.sampled_from(["input_key", "input_value", "output_key",
                                                                            "output_value", "input_drop", "output_drop"]))),
    st.tuples(st.just("ensemble_tensor"), st.tuples(st.sampled_from(["input", "output"]),
                                                    st.sampled_from(["TYPE_UINT8", (-1,), (2,), "extra"]))),
    st.tuples(st.just("scheduling"), st.sampled_from(["instance_group", "warmup", "no_steps"])),
    st.tuples(st.just("name"), st.just("another")),
)


def _size(value, mbs: int) -> int:
    return {"max": mbs, "max+1": mbs + 1}.get(value, value) if isinstance(value, str) else value


def apply(cfg: pb.ModelConfig, change: tuple) -> None:
    """Apply one change to `cfg`."""
    field, value = change
    mbs = cfg.max_batch_size
    if field == "max_batch_size":
        cfg.max_batch_size = value
    elif field == "unbatched":  # a legal config without a batch axis: the axis goes into dims
        cfg.max_batch_size = 0
        cfg.ClearField("dynamic_batching")
        for t in [*cfg.input, *cfg.output]:
            t.dims.insert(0, -1)
        for w in cfg.model_warmup:
            w.batch_size = 1
            for i in w.inputs.values():
                i.dims.insert(0, 1)
    elif field == "preferred":
        cfg.dynamic_batching.ClearField("preferred_batch_size")
        cfg.dynamic_batching.preferred_batch_size.extend(_size(v, mbs) for v in value)
    elif field == "dynamic_batching":
        cfg.ClearField("dynamic_batching")
    elif field == "warmup":
        del cfg.model_warmup[1:]
        if cfg.model_warmup:
            cfg.model_warmup[0].batch_size = _size(value, mbs)
            cfg.model_warmup[0].name = "warm"
    elif field == "count":
        cfg.instance_group[0].count = value
    elif field == "kind":
        for g in cfg.instance_group:
            g.kind = pb.ModelInstanceGroup.Kind.Value(value)
    elif field == "profile":
        del cfg.instance_group[0].profile[:]
        cfg.instance_group[0].profile.extend(value)
    elif field == "input_dim":
        axis, d = value
        cfg.input[0].dims[axis] = d
    elif field == "output_dim":
        cfg.output[0].dims[0] = value
    elif field == "rank":
        role, how = value[:-1], value[-1]
        dims = getattr(cfg, role)[0].dims
        dims.append(1) if how == "+" else dims.pop()
    elif field == "dtype":
        role, dtype = value
        getattr(cfg, role)[0].data_type = pb.DataType.Value(dtype)
    elif field == "tensor_name":
        role, how = value
        tensor = getattr(cfg, role)[0]
        old = tensor.name
        tensor.name = {"renamed": f"{role.upper()}_RENAMED", "__1": f"{role}__1", "__0": f"{role}__0",
                       "argument": "x"}[how]
        if role == "input":
            for w in cfg.model_warmup:
                w.inputs[tensor.name].CopyFrom(w.inputs[old])
                del w.inputs[old]
    elif field == "name":
        cfg.name = value
    elif field == "platform":
        cfg.platform, cfg.backend = value
    elif field == "labels":
        if value == "missing":
            cfg.output[0].label_filename = "missing.txt"
        else:
            cfg.output[0].ClearField("label_filename")
    elif field == "graphs":
        graphs, batch, lower = value
        cuda = cfg.optimization.cuda
        cuda.graphs = graphs
        del cuda.graph_spec[:]
        spec = cuda.graph_spec.add(batch_size=_size(batch, mbs))
        spec.input[cfg.input[0].name].dim.extend(cfg.input[0].dims)
        if lower is not None:
            spec.graph_lower_bound.batch_size = _size(lower, mbs)
            spec.graph_lower_bound.input[cfg.input[0].name].dim.extend(cfg.input[0].dims)
    elif field == "allocation":
        cfg.parameters["execution_context_allocation_strategy"].string_value = value
    # ensembles
    elif field == "step_model":
        index, name = value
        if index >= len(cfg.ensemble_scheduling.step):
            return
        cfg.ensemble_scheduling.step[index].model_name = name
        if name in CLASSIFIERS or name == NOT_BATCHING:
            step = cfg.ensemble_scheduling.step[index]
            names = {"torch_model": ("input__0", "output__0")}.get(name, ("input", "output"))
            tensor_in, tensor_out = next(iter(step.input_map.values())), next(iter(step.output_map.values()))
            step.ClearField("input_map")
            step.ClearField("output_map")
            step.input_map[names[0]] = tensor_in
            step.output_map[names[1]] = tensor_out
    elif field == "map":
        index, how = value
        if index >= len(cfg.ensemble_scheduling.step):
            return
        step = cfg.ensemble_scheduling.step[index]
        where, how = how.split("_")
        mapping = step.input_map if where == "input" else step.output_map
        key, tensor = next(iter(mapping.items()))
        del mapping[key]
        if how == "key":
            mapping["WRONG"] = tensor
        elif how == "value":
            mapping[key] = "WRONG"
    elif field == "ensemble_tensor":
        role, how = value
        tensor = getattr(cfg, role)[0]
        if how == "extra":
            getattr(cfg, role).add(name=f"EXTRA_{role.upper()}", data_type=pb.TYPE_FP32, dims=[1])
        elif isinstance(how, tuple):
            del tensor.dims[:]
            tensor.dims.extend(how)
        else:
            tensor.data_type = pb.DataType.Value(how)
    elif field == "scheduling":
        if value == "instance_group":
            cfg.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
        elif value == "warmup":
            w = cfg.model_warmup.add(name="warm", batch_size=1)
            w.inputs[cfg.input[0].name].data_type = cfg.input[0].data_type
            w.inputs[cfg.input[0].name].dims.extend(cfg.input[0].dims)
            w.inputs[cfg.input[0].name].zero_data = True
        else:
            cfg.ensemble_scheduling.ClearField("step")
            cfg.ensemble_scheduling.SetInParent()
    else:
        raise AssertionError(change)


@st.composite
def cases(draw):
    # (torch_model's instances start slowest: each imports torch)
    base = draw(st.sampled_from(["onnx_model", "onnx_model", "torch_model", "trt_model", "trt_model", ENSEMBLE, ENSEMBLE]))
    changes = draw(st.lists(ENSEMBLE_CHANGES if base == ENSEMBLE else CLASSIFIER_CHANGES, min_size=1, max_size=2))
    return base, changes


# --- what justifies an error on a config the embedded Triton serves ----------------------------------------------
def _justifications():
    """finding fragment -> (the checker function holding the rule, the native backend whose source its docstring
    names): the rules the Python-based backends do not enforce."""
    from tritonize.repository_builder.checker import _ModelCheck

    return {
        "tensorrt_plan on KIND_CPU": (_ModelCheck._check_instance_group, "tensorrt_backend"),
        "graph_spec": (_ModelCheck._check_cuda_graphs, "tensorrt_backend"),
        "the plan's": (_ModelCheck._check_plan_tensors, "tensorrt_backend"),
        "optimization profile": (_ModelCheck._check_profiles, "tensorrt_backend"),
        "would fail there": (_ModelCheck._check_profiles, "tensorrt_backend"),
        "do not match the graph's": (_ModelCheck._check_onnx, "onnxruntime_backend"),
        "the graph has": (_ModelCheck._check_onnx, "onnxruntime_backend"),
        "libtorch naming rule": (_ModelCheck._check_torchscript, "pytorch_backend"),
        "forward(": (_ModelCheck._check_torchscript, "pytorch_backend"),
    }


def _justified(message: str) -> bool:
    for fragment, (function, source) in _justifications().items():
        if fragment in message:
            assert source in (function.__doc__ or ""), f"{function.__qualname__}'s docstring does not name {source}"
            return True
    return False


# --- the setting: one repository of real artifacts, one real Triton ------------------------------------------------
def _link_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, copy_function=os.link, ignore=shutil.ignore_patterns("configs", "config.pbtxt"))


def _write(path: Path, cfg: pb.ModelConfig) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text_format.MessageToString(cfg))


def _served(cfg: pb.ModelConfig) -> pb.ModelConfig:
    """What the embedded Triton loads: trt_model's instances on KIND_CPU (tests/serve/test_emulated_trt_model.py: Triton
    core refuses KIND_GPU without a GPU before any backend runs), else the linted config itself."""
    served = pb.ModelConfig()
    served.CopyFrom(cfg)
    if served.platform == "tensorrt_plan" or served.backend == "tensorrt":
        for group in served.instance_group:
            group.kind = pb.ModelInstanceGroup.KIND_CPU
    return served


def _request(client, cfg: pb.ModelConfig, base: pb.ModelConfig, model: str) -> str | None:
    """One request of the served config's shapes at max_batch_size (a variable dim at the base config's size); None
    when it answers as the config declares, else what went wrong."""
    import tritonclient.http as http
    from tritonclient.utils import triton_to_np_dtype

    batch = [cfg.max_batch_size] if cfg.max_batch_size > 0 else []
    known = {t.name: list(t.dims) for t in base.input}
    inputs = []
    for t in cfg.input:
        sizes = known.get(t.name, [])
        dims = [d if d > 0 else (sizes[i] if i < len(sizes) and sizes[i] > 0 else 1) for i, d in enumerate(t.dims)]
        dtype = pb.DataType.Name(t.data_type).removeprefix("TYPE_").replace("STRING", "BYTES")
        tensor = http.InferInput(t.name, batch + dims, dtype)
        data = np.full(batch + dims, PHOTO.read_bytes(), dtype=object) if dtype == "BYTES" else \
            np.zeros(batch + dims, dtype=triton_to_np_dtype(dtype))
        tensor.set_data_from_numpy(data, binary_data=True)
        inputs.append(tensor)
    try:
        result = client.infer(model, inputs, outputs=[http.InferRequestedOutput(t.name) for t in cfg.output])
    except Exception as e:  # noqa: BLE001 - whatever the server says is the finding
        return str(e).splitlines()[0]
    for t in cfg.output:
        array, expected = result.as_numpy(t.name), batch + list(t.dims)
        if array is None or len(array.shape) != len(expected) or any(e not in (-1, g) for e, g in zip(expected, array.shape)):
            return f"output {t.name} came back {None if array is None else list(array.shape)}, declared {expected}"
    return None


@pytest.mark.parametrize("emulated_tensorrt", ["10.5.0.18"], indirect=True)
def test_repo_check_agrees_with_the_real_triton(emulated_tensorrt, artifacts_copy, tmp_path):
    import tritonclient.http as http

    from tritonize.model_repository import parse_config
    from tritonize.repository_builder import check_repository
    from tritonize.serve.embedded import EmbeddedServer

    result = run_cli("convert", "trt", "--artifacts", artifacts_copy, "--precision", "fp32", "--min-batch", "1",
                     "--opt-batch", "2", "--max-batch", str(MAX_BATCH), "--builder", "tensorrt",
                     "--triton-release", emulated_tensorrt.release)
    assert result.exit_code == 0, result.output
    built = tmp_path / "built"
    result = run_cli("repo", "build", "--artifacts", artifacts_copy, built, "--max-batch", str(MAX_BATCH),
                     "--preferred", "2,4", "--models", ",".join(CLASSIFIERS))
    assert result.exit_code == 0, result.output
    bases = {d.name: parse_config(d / "config.pbtxt") for d in built.iterdir() if d.is_dir()}

    served, lint = tmp_path / "served", tmp_path / "lint"  # the models Triton serves; each example's linted repository
    for name in ("preprocess", "preprocess_uint8", *CLASSIFIERS):
        _link_tree(built / name, served / name)
        _write(served / name / "config.pbtxt", _served(bases[name]))
    bases[NOT_BATCHING] = pb.ModelConfig()
    bases[NOT_BATCHING].CopyFrom(bases["onnx_model"])
    apply(bases[NOT_BATCHING], ("unbatched", True))
    bases[NOT_BATCHING].name = NOT_BATCHING
    _link_tree(built / "onnx_model", served / NOT_BATCHING)
    _write(served / NOT_BATCHING / "config.pbtxt", bases[NOT_BATCHING])

    def start():  # the steps of the ensembles load when an example first names them
        server = EmbeddedServer(served, models=("preprocess",), model_config_name="config", supervise=False)
        info = server.start()
        return server, http.InferenceServerClient(info.http_url.removeprefix("http://"), network_timeout=300)

    server, client = start()
    counter = iter(range(10_000))
    try:
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate])  # (shrinking would reload models for minutes)
        @given(case=cases())
        def one(case):
            nonlocal server, client
            base, changes = case
            model = f"x{next(counter):03d}"
            cfg = pb.ModelConfig()
            cfg.CopyFrom(bases[base])
            cfg.name = model
            for change in changes:
                apply(cfg, change)
            stage = lint / model  # this model beside its real files, and the models its steps name
            _link_tree(built / base, stage / model)
            _write(stage / model / "config.pbtxt", cfg)
            steps = [s.model_name for s in cfg.ensemble_scheduling.step if (served / s.model_name).is_dir()]
            for name in steps:
                (stage / name).symlink_to(served / name, target_is_directory=True)
            findings = check_repository(stage, artifacts_copy, gpu_cc="8.6")
            errors = [f.message for f in findings if f.model == model and f.severity == "error"]

            _link_tree(built / base, served / model)
            _write(served / model / "config.pbtxt", _served(cfg))
            for name in steps:  # (a load of a loaded, unchanged model does nothing)
                client.load_model(name)
            try:
                client.load_model(model)
                refused = None
            except Exception as e:  # noqa: BLE001 - Triton's reason
                refused = str(e)
            if server.server.exit_code() is not None:  # Triton died loading it: refused, and started again
                refused = f"tritonserver exited ({server.server.exit_code()}) loading it: {refused}"
                server.stop()
                server, client = start()
            answer = None if refused else _request(client, _served(cfg), bases[base], model)
            if not refused:
                client.unload_model(model)

            where = f"{base} with {changes}: repo check's errors {errors}"
            assert errors or not refused, f"{where}, but Triton refuses it: {refused}"
            assert errors or not answer, f"{where}, but Triton loads it and its request fails: {answer}"
            if not refused and not answer:
                unjustified = [e for e in errors if not _justified(e)]
                assert not unjustified, f"{where}, and Triton loads and serves it: {unjustified} not a native backend's rule"

        one()
    finally:
        server.stop()

