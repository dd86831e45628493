"""config.pbtxt through Triton's own schema: a ModelConfig message, written with protobuf's text format."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.errors import TritonizeError
from tritonize.manifest import Entry, Package, Plan, PrecisionVariant, Profile
from tritonize.model_repository import (
    CC_PARAMETER,
    HARDWARE_PARAMETER,
    LABELS_NAME,
    LOGITS,
    PREPROCESSED,
    Backend,
    Preprocessor,
    artifact_key,
    batches,
)
from tritonize.preprocessing import Preprocessing
from tritonize.repository_builder.gpus import plan_cc
from tritonize.repository_builder.options import RepoOptions
from tritonize.spec import ModelSpec

# Provenance: which model and manifest a config was built from, and for trt_model which TensorRT built
# the plan, for which Triton release, and whether it is version-compatible (what `serve` needs to pick
# the container release from the repository alone).
SOURCE_KEYS = ("source.arch", "source.weights", "source.manifest_sha256")
PLAN_KEYS = ("source.tensorrt_version", "source.triton_release", "source.version_compatible")
# An AOTInductor package's: the release it was made for, the device it was compiled for, the torch that compiled it.
PACKAGE_KEYS = ("source.triton_release", "source.device", "source.torch_version")
CONTRACT_KEYS = Preprocessing.parameter_keys() + SOURCE_KEYS


@dataclass(frozen=True)
class BatchBound:
    """The largest batch a model may serve from its artifact, what sets it, and how to raise it."""

    max_batch: int
    limit: str  # what sets it: "the batch model.onnx was verified at", "the plan's profile max"
    raise_with: str  # the command that verifies a larger batch {n}

    def refusal(self, asked: int, model: str) -> str:
        return (f"--max-batch {asked}: {model} serves at most {self.max_batch}, {self.limit}, and nothing is served "
                f"beyond what was verified; {self.raise_with.format(n=asked)} to verify up to {asked}, or leave "
                "--max-batch out (it defaults to what each model was verified at)")


def batch_bound(entry: Entry) -> BatchBound:
    """The served batch bound of an artifact: the largest batch its verification ran, and for a TensorRT plan
    never above its profile max (the engine refuses larger batches)."""
    verified = max((int(b) for b in entry.verification.batches), default=1) if entry.verification else None
    if isinstance(entry, Plan):
        fix = "rebuild the plan with `tritonize convert trt --max-batch {n} --force` on a GPU box"
        if verified is None or verified >= entry.profile.max:
            return BatchBound(entry.profile.max, "the plan's profile max", fix)
        return BatchBound(verified, f"the batch {entry.file} was verified at", fix)
    if isinstance(entry, Package):
        fix = "run `tritonize convert aoti --max-batch {n} --force`"
    elif isinstance(entry, PrecisionVariant):
        fix = ("run `tritonize convert cpu --calib-images DIR --force` with at least {n} images beyond --calib-count "
               "(they are held out and verify it)")
    else:
        fix = "run `tritonize export --max-batch {n} --force`"
    return BatchBound(verified or 1, f"the batch {entry.file} was verified at", fix)


def contract_parameters(spec: ModelSpec, entry: Entry | None, manifest_sha256: str, fleet: bool = False) -> dict[str, str]:
    """The preprocessing contract and provenance, as the string parameters a client can fetch."""
    params = {
        **spec.preprocessing.to_parameters(),
        "source.arch": spec.arch,
        "source.weights": spec.weights,
        "source.manifest_sha256": manifest_sha256,
    }
    if isinstance(entry, Plan):
        params.update({
            "source.tensorrt_version": entry.tensorrt_version or "",
            "source.triton_release": entry.target.triton_release,
            "source.version_compatible": str(entry.options.version_compatible).lower(),
        })
        cc = plan_cc(entry)
        if cc and not fleet:  # a fleet's GPU kinds are the keys of cc_model_filenames
            params[CC_PARAMETER] = cc
        if entry.options.hardware_compatibility != "none":
            params[HARDWARE_PARAMETER] = entry.options.hardware_compatibility
    if isinstance(entry, Package):
        params.update(zip(PACKAGE_KEYS, (entry.target.triton_release, entry.device, entry.compiler)))
    if isinstance(entry, PrecisionVariant) and entry.cpu_serving is not None:
        gates = entry.cpu_serving
        params.update({
            "source.precision": entry.precision,
            "gate.agreement": gates.agreement.reason,
            "gate.speed": gates.speed.reason,
            "gate.measured": gates.measured,
        })
    return params


def model_config(backend: Backend, spec: ModelSpec, entry: Entry, options: RepoOptions, kind: str,
                 manifest_sha256: str, plans: dict[str, str] | None = None) -> pb.ModelConfig:
    """The ModelConfig for one backend. kind: "auto" | "gpu" | "cpu" (instance placement). `plans`: a fleet's
    plan file per compute capability (gpus.py), as `cc_model_filenames`."""
    bound = batch_bound(entry)
    max_batch = bound.max_batch if options.max_batch is None else options.max_batch
    if max_batch > bound.max_batch:
        raise TritonizeError(bound.refusal(max_batch, backend.name))
    input_name, output_name = entry.input_name, entry.output_name
    batching = batches(backend, served_release(entry))
    lead = [] if batching else [1]  # without Triton's batching, the model's own batch axis: one image per request

    cfg = pb.ModelConfig(name=backend.name, platform=backend.platform, max_batch_size=max_batch if batching else 0)
    if backend.first_release:  # a platform its backend took on later: named with it, as the backend's README does
        cfg.backend = backend.backend
    cfg.version_policy.latest.num_versions = 1
    inp = cfg.input.add(name=input_name, data_type=pb.TYPE_FP32)
    inp.dims.extend([*lead, *spec.input_shape])
    out = cfg.output.add(name=output_name, data_type=pb.TYPE_FP32, label_filename=LABELS_NAME)
    out.dims.extend([*lead, spec.num_classes])

    if batching:
        cfg.dynamic_batching.preferred_batch_size.extend(options.preferred_for(max_batch))
        cfg.dynamic_batching.max_queue_delay_microseconds = options.queue_delay_us

    latency = latency_instances(entry, options)
    if options.cuda_graphs and isinstance(entry, Plan):
        add_cuda_graphs(cfg, cuda_graph_batches(entry, cfg, bool(latency)), spec.input_shape)
    if options.context_memory and isinstance(entry, Plan):
        release = entry.target.triton_release
        if not release_has_allocation_strategy(release):
            raise TritonizeError(f"--context-memory: the plan is for Triton {release}, whose tensorrt backend does not read "
                                 f"{ALLOCATION_PARAMETER} (from {ALLOCATION_FROM_RELEASE}); leave it out, or build the plan "
                                 f"for {ALLOCATION_FROM_RELEASE} or later")
        cfg.parameters[ALLOCATION_PARAMETER].string_value = ALLOCATION_STRATEGIES[options.context_memory]

    kinds = {"auto": pb.ModelInstanceGroup.KIND_AUTO, "gpu": pb.ModelInstanceGroup.KIND_GPU,
             "cpu": pb.ModelInstanceGroup.KIND_CPU}
    if latency:  # the plan's two profiles: named groups, each instance with the profiles it runs (profile_groups)
        for name, count, profiles in profile_groups(backend.name, options.instances, latency, entry.latency, max_batch):
            cfg.instance_group.add(name=name, count=count, kind=kinds[kind], profile=profiles)
    else:
        cfg.instance_group.add(count=options.instances, kind=kinds[kind])

    if options.warmup:
        for batch in sorted({1, max_batch}) if batching else [1]:
            w = cfg.model_warmup.add(name=f"batch_{batch}", batch_size=batch)
            w.inputs[input_name].data_type = pb.TYPE_FP32
            w.inputs[input_name].dims.extend([*lead, *spec.input_shape])
            w.inputs[input_name].zero_data = True

    for cc, filename in (plans or {}).items():
        cfg.cc_model_filenames[cc] = filename
    for key, value in contract_parameters(spec, entry, manifest_sha256, fleet=bool(plans)).items():
        cfg.parameters[key].string_value = value
    if artifact_key(backend.backend, backend.platform) != backend.artifact:  # not its platform's first: say which
        cfg.parameters["source.artifact"].string_value = backend.artifact
    return cfg


def served_release(entry: Entry) -> str | None:
    """The Triton release an artifact was made for (a plan's, a package's); None: any."""
    target = getattr(entry, "target", None)
    return target.triton_release if target is not None else None


def latency_instances(entry: Entry, options: RepoOptions) -> int:
    """How many instances run in the plan's latency profile: --latency-instances, default 1 when the plan has a
    verified one (nothing is served beyond what was verified); asking for some without one is an error."""
    if not isinstance(entry, Plan):
        return 0
    verified = bool(entry.latency and entry.latency_verification and entry.latency_verification.passed)
    if options.latency_instances and not verified:
        raise TritonizeError(f"--latency-instances {options.latency_instances}: the plan has no verified latency profile; "
                             "build it with `tritonize convert trt --latency-profile MIN,OPT,MAX`, or leave the flag out")
    return (1 if options.latency_instances is None else options.latency_instances) if verified else 0


def profile_groups(model: str, instances: int, latency: int, profile: Profile, max_batch: int) -> list[tuple]:
    """(name, count, profiles) of trt_model's two instance groups: `--instances` in profile 0, `latency` instances in
    profile 1, and also in profile 0 when the latency profile cannot take every batch up to max_batch_size.

    Triton's dynamic batcher is the model's, not an instance's: any batch up to max_batch_size may reach any
    instance. tensorrt_backend loads an instance whose profile max is below max_batch_size (it clamps the binding:
    src/instance_state.cc TRTv3Interface::ConfigureInputDimensions) but then fails each larger batch sent to it
    ("request specifies invalid shape", SetBindingDimensions). With several profiles an instance holds one context
    per profile and runs each batch in the one whose opt is nearest among those that take it (GetMostOptimizedProfile):
    small batches run in the latency profile, larger ones in profile 0."""
    latency_profiles = ["1"] if profile.max >= max_batch else ["1", "0"]
    return [(f"{model}_throughput", instances, ["0"]), (f"{model}_latency", latency, latency_profiles)]


# tensorrt_backend src/model_state.cc ParseParameters (from release 25.05: r25.05 is the first release branch with
# tensorrt_backend#108): how each execution context holds its activation memory. Any other value fails the load.
ALLOCATION_PARAMETER = "execution_context_allocation_strategy"
ALLOCATION_STRATEGIES = {"static": "STATIC", "on-profile-change": "ON_PROFILE_CHANGE"}
ALLOCATION_FROM_RELEASE = "25.05"


def release_has_allocation_strategy(release: str) -> bool:
    return tuple(int(p) for p in release.split(".")) >= tuple(int(p) for p in ALLOCATION_FROM_RELEASE.split("."))


def cuda_graph_batches(plan: Plan, cfg: pb.ModelConfig, latency_instances: bool = False) -> list[int]:
    """The batch sizes to capture CUDA graphs for: those Triton's tensorrt backend would pick by default (1, the
    preferred batch sizes, max_batch_size; src/instance_state.cc InitializeGraphSpecs), kept within the plan's
    profile, which the engine cannot run outside. With latency instances, also within the latency profile (and its
    opt and max): the backend captures every graph_spec in every execution context, one per profile of an instance
    (InitializeCudaGraph), and a batch outside a context's profile fails there with an ERROR line at each load
    (TRTv3Interface::BuildCudaGraph). Graphs help small batches most (InitializeGraphSpecs says so), which that
    profile takes; graph_spec is the model's, so no group can have graphs of its own."""
    profiles = [plan.profile, *([plan.latency] if latency_instances and plan.latency else [])]
    wanted = {1, *cfg.dynamic_batching.preferred_batch_size, cfg.max_batch_size, *(b for p in profiles[1:] for b in (p.opt, p.max))}
    return sorted(b for b in wanted if b <= cfg.max_batch_size and all(p.min <= b <= p.max for p in profiles))


def add_cuda_graphs(cfg: pb.ModelConfig, batches: list[int], input_shape) -> None:
    """`optimization { cuda { graphs: true, graph_spec {...} } }`: one graph per batch size, each with the input's
    non-batch shape (model_config.proto ModelOptimizationPolicy.Cuda.GraphSpec)."""
    cfg.optimization.cuda.graphs = True
    for batch in batches:
        graph = cfg.optimization.cuda.graph_spec.add(batch_size=batch)
        for tensor in cfg.input:
            graph.input[tensor.name].dim.extend(input_shape)


def preprocessor_config(pre: Preprocessor, spec: ModelSpec, max_batch: int, options: RepoOptions,
                        manifest_sha256: str) -> pb.ModelConfig:
    """A preprocessing model: Python backend on CPU instances (decoding is CPU work on any machine), the
    contract in its parameters like every model's, batched so that queued requests share an execution
    (`max_batch`: the largest of the classifiers it feeds; each ensemble takes the smaller of its two steps)."""
    cfg = pb.ModelConfig(name=pre.name, backend="python", max_batch_size=max_batch)
    cfg.version_policy.latest.num_versions = 1
    if pre.form == "bytes":
        cfg.input.add(name=pre.input_name, data_type=pb.TYPE_STRING, dims=[1])
    else:
        cfg.input.add(name=pre.input_name, data_type=pb.TYPE_UINT8, dims=spec.preprocessing.pixels_shape)
    cfg.output.add(name=PREPROCESSED, data_type=pb.TYPE_FP32, dims=spec.input_shape)
    cfg.dynamic_batching.max_queue_delay_microseconds = options.queue_delay_us
    cfg.instance_group.add(count=options.instances, kind=pb.ModelInstanceGroup.KIND_CPU)
    for key, value in contract_parameters(spec, None, manifest_sha256).items():
        cfg.parameters[key].string_value = value
    return cfg


def ensemble_config(name: str, pre: pb.ModelConfig, classifier: pb.ModelConfig, spec: ModelSpec,
                    manifest_sha256: str) -> pb.ModelConfig:
    """preprocessing model -> classifier, as one model: the preprocessor's input in, LOGITS out, with the
    classifier's labels for Triton's classification extension."""
    cfg = pb.ModelConfig(name=name, platform="ensemble", max_batch_size=min(pre.max_batch_size, classifier.max_batch_size))
    cfg.input.add().CopyFrom(pre.input[0])
    cfg.output.add(name=LOGITS, data_type=classifier.output[0].data_type, dims=list(classifier.output[0].dims),
                   label_filename=LABELS_NAME)
    first = cfg.ensemble_scheduling.step.add(model_name=pre.name, model_version=-1)
    first.input_map[pre.input[0].name] = pre.input[0].name
    first.output_map[PREPROCESSED] = PREPROCESSED
    second = cfg.ensemble_scheduling.step.add(model_name=classifier.name, model_version=-1)
    second.input_map[classifier.input[0].name] = PREPROCESSED
    second.output_map[classifier.output[0].name] = LOGITS
    for key, value in contract_parameters(spec, None, manifest_sha256).items():
        cfg.parameters[key].string_value = value
    return cfg


def config_text(cfg, header: str = "") -> str:
    """Text format of a ModelConfig, with an optional comment header (Triton's parser skips # lines)."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + text_format.MessageToString(cfg)


def kind_name(kind: int) -> str:
    return pb.ModelInstanceGroup.Kind.Name(kind)
