"""`repo check`: find what would make Triton refuse or misbehave, before any server starts.

Rules (each finding names the model, what is wrong and how to fix it). configs/*.pbtxt, which Triton serves
with --model-config-name (the embedded engine's choice on a machine without a GPU), get every rule that
config.pbtxt gets; a variant's finding says its file, and what config.pbtxt already says is not repeated.
  schema      every config.pbtxt / configs/*.pbtxt parses as Triton's ModelConfig; its name is the directory's
  platform    platform or backend is one Triton ships; a backend Triton knows by type with its own platform only
  dims        every input and output has dims, each >= 1 or -1
  batching    max_batch_size >= 0; dynamic batching needs max_batch_size > 0; preferred and warmup
              batch sizes in 1..max_batch_size
  instances   counts >= 1 (a warning: Triton runs 1); tensorrt_plan never on KIND_CPU instances
  versions    numeric version directories exist and each holds the backend's model file
  labels      the label file exists and has one line per output class
  onnx        config names, types and dims match the real ONNX graph; its batch axis is symbolic
  torchscript the module's forward() takes as many inputs as the config declares, names follow
              Triton's `<name>__<index>` rule, and a batch-1 forward gives the configured output dims
  plan        (manifest) profile min is 1 and max >= max_batch_size; names match the plan's ONNX names
  batch       (manifest) max_batch_size is no larger than the batch the artifact was verified at
  hashes      (manifest) model files have the sha256 the manifest recorded (the artifact a model names in its
              `source.artifact` parameter, else its backend's export), and so have the artifacts themselves
              (an export killed mid-publish leaves a `pending` entry or another file)
  gates       (manifest) a CPU precision variant is served only with `convert cpu`'s gates passed
  provenance  contract parameters present (and trt_model's plan provenance); (manifest) source.manifest_sha256
              is this manifest's hash
  ensemble    steps name models of the repository; each step maps every input of its model and only its
              tensor names; every tensor read is the ensemble's input or a step's output, with the same
              dtype and dims; the ensemble batches no more than its steps
  python code a Python model that imports tritonize holds the modules it imports (1/tritonize/), equal to
              this tritonize's: the server preprocesses with the client's code
  release     (--triton-release) the plan's TensorRT is the one that release runs
  cuda graphs graph_spec only on tensorrt models, with graphs: true; batch sizes in 1..max_batch_size (Triton's
              tensorrt backend refuses the model otherwise) and (manifest) within the plan's profile; inputs and
              shapes the config's
  memory      execution_context_allocation_strategy only on tensorrt models, STATIC or ON_PROFILE_CHANGE, and
              served by a release that reads it (25.05+)
  profiles    instance_group.profile only on tensorrt models, integer names; (manifest) indices of the plan's
              verified profiles, whose batch ranges take every batch up to max_batch_size in each group
  precision   (manifest) an fp16/int8 plan whose engine runs most of its layers in FP32 (read from the engine)
  gpu kind    a tensorrt_plan model has a plan for the serving GPU's compute capability (--gpu-cc, else this
              machine's GPU when one is visible): its one plan's, or a key of cc_model_filenames (gpus.py);
              every file cc_model_filenames names is in each version
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from tritonize.errors import TritonizeError
from tritonize.files import sha256_file
from tritonize.manifest import MOSTLY_FP32, Manifest, Plan, PrecisionVariant, Status
from tritonize.model_repository import CONFIG_NAME, parse_config, profile_index, serving_cc
from tritonize.releases import release_info, releases_for_tensorrt, tensorrt_loads
from tritonize.repository_builder.builder import PREPROCESS_CODE, VERSION
from tritonize.repository_builder.findings import REBUILD, CheckContext, Finding, Severity
from tritonize.repository_builder.model_files import ModelFileChecks
from tritonize.repository_builder.config import CONTRACT_KEYS, PLAN_KEYS, batch_bound, kind_name
from tritonize.repository_builder.plan_options import PlanOptionChecks

# platform -> backend, and the file each backend loads by default.
PLATFORMS = {
    "tensorrt_plan": "tensorrt", "onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch",
    "tensorflow_graphdef": "tensorflow", "tensorflow_savedmodel": "tensorflow", "ensemble": "ensemble",
}
TYPED_BACKENDS = {"tensorrt", "onnxruntime", "pytorch", "tensorflow"}  # the backends Triton's core knows by type
TRITON_BACKENDS = {"tensorrt", "onnxruntime", "pytorch", "tensorflow", "openvino", "python", "fil", "dali", "vllm",
            "tensorrtllm", "identity", "repeat", "square"}
DEFAULT_FILES = {"tensorrt": "model.plan", "onnxruntime": "model.onnx", "pytorch": "model.pt",
                 "tensorflow": "model.savedmodel", "openvino": "model.xml", "python": "model.py"}
ARTIFACT_KEYS = {"tensorrt": "tensorrt", "onnxruntime": "onnx", "pytorch": "torchscript"}



def check_repository(repo: Path, artifacts: Path | None = None, triton_release: str | None = None,
                     gpu_cc: str | None = None) -> list[Finding]:
    """Lint every model directory of `repo`; with `artifacts`, also against its manifest; trt_model's plans
    against `gpu_cc` (default: this machine's GPU, when one is visible)."""
    repo = Path(repo)
    if not repo.is_dir():
        raise TritonizeError(f"no model repository at {repo}: run `tritonize repo build {repo}` first")
    manifest = Manifest.load(artifacts) if artifacts is not None else None
    model_dirs = sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not model_dirs:
        raise TritonizeError(f"{repo} holds no model directories: run `tritonize repo build {repo}`")
    context = CheckContext(
        manifest=manifest,
        manifest_sha256=manifest.sha256() if manifest else None,
        release=release_info(triton_release) if triton_release else None,
        configs={d.name: _parsed_or_none(d / CONFIG_NAME) for d in model_dirs},
    )
    plans = any(_backend_of(c) == "tensorrt" for c in context.configs.values() if c is not None)
    context = replace(context, gpu_cc=serving_cc(gpu_cc) if plans or gpu_cc else (None, "no tensorrt_plan model"))
    findings = _check_artifacts(manifest) if manifest else []
    for model_dir in model_dirs:
        findings += _ModelCheck(model_dir, context).run()
    return findings


def _check_artifacts(manifest: Manifest) -> list[Finding]:
    """Each artifact file the manifest describes is the file on disk (a missing one is the concern of the
    model that serves it, below)."""
    findings = []
    for key, entry in manifest.artifacts.items():
        if getattr(entry, "file", None) is None:  # a plan waiting for a GPU has no file yet
            continue
        problem = manifest.file_problem(entry)
        if problem and (entry.status is Status.pending or manifest.path(entry).is_file()):
            findings.append(Finding(
                "artifacts", Severity.error, f"{problem}: the manifest's {key!r} entry does not describe {manifest.path(entry)}",
                f"re-run the stage that writes it (`tritonize export --force` for model.pt / model.onnx), then {REBUILD}",
            ))
    return findings


class _ModelCheck(ModelFileChecks, PlanOptionChecks):
    def __init__(self, model_dir: Path, context: CheckContext, loaded: dict | None = None):
        self.dir = model_dir
        self.ctx = context
        self.findings: list[Finding] = []
        self.loaded = {} if loaded is None else loaded  # what was read from the model files, shared by the variants

    def add(self, severity: Severity, message: str, fix: str) -> None:
        self.findings.append(Finding(self.dir.name, severity, message, fix))

    def run(self) -> list[Finding]:
        configs = self._parse_all()
        if CONFIG_NAME not in configs:
            return self.findings
        for rel, cfg in configs.items():
            self._check_config(rel, cfg)
        served = self._check_served(configs[CONFIG_NAME])
        # A variant is what Triton serves with --model-config-name (the embedded engine's choice on a machine
        # without a GPU): it gets the same checks, and says only what config.pbtxt does not already say.
        said = {(f.severity, f.message) for f in served}
        for rel, cfg in configs.items():
            if rel != CONFIG_NAME:
                variant = _ModelCheck(self.dir, self.ctx, self.loaded)._check_served(cfg)
                self.findings += [replace(f, message=f"{rel}: {f.message}") for f in variant
                                  if (f.severity, f.message) not in said]
        if _backend_of(configs[CONFIG_NAME]) == "python":
            self._check_python_code()
        return self.findings

    def _check_served(self, cfg) -> list[Finding]:
        """The checks of the model Triton loads with this config; returns their findings (also in self.findings)."""
        start = len(self.findings)
        backend = _backend_of(cfg)
        model_file = self._check_versions(cfg, backend)
        self._check_labels(cfg)
        if model_file is not None and backend == "onnxruntime":
            self._check_onnx(cfg, model_file)
        if model_file is not None and backend == "pytorch":
            self._check_torchscript(cfg, model_file)
        self._check_parameters(cfg, backend)
        if backend == "tensorrt":
            self._check_gpu_kind(cfg)
        self._check_cuda_graphs(cfg, backend)
        self._check_profiles(cfg, backend)
        self._check_allocation_strategy(cfg, backend)
        if backend == "ensemble":
            self._check_ensemble(cfg)
        if self.ctx.manifest is not None:
            self._check_against_manifest(cfg, backend, model_file)
        return self.findings[start:]

    def _read(self, path: Path, what: str, read):
        """`read(path)` once per model file and kind of reading, for all the configs of the model."""
        key = (path, what)
        if key not in self.loaded:
            self.loaded[key] = read(path)
        return self.loaded[key]

    # --- schema, platform, batching, instances ------------------------------------------------------
    def _parse_all(self) -> dict[str, Any]:
        paths = [self.dir / CONFIG_NAME] + sorted((self.dir / "configs").glob("*.pbtxt"))
        if not paths[0].is_file():
            self.add(Severity.error, f"no {CONFIG_NAME}: Triton cannot load the model", REBUILD)
        configs = {}
        for path in paths:
            if not path.is_file():
                continue
            rel = str(path.relative_to(self.dir))
            try:
                configs[rel] = _autocompleted(parse_config(path), self.dir)
            except TritonizeError as e:
                detail = str(e).split(": ", 1)[-1]
                self.add(Severity.error, f"{rel} does not parse against Triton's ModelConfig schema: {detail}",
                         f"correct that field (see model_config.proto) or {REBUILD}")
        return configs

    def _check_config(self, rel: str, cfg) -> None:
        if cfg.name and cfg.name != self.dir.name:
            self.add(Severity.error, f"{rel}: name {cfg.name!r} differs from the directory name {self.dir.name!r}",
                     f"set name: \"{self.dir.name}\" (Triton requires them equal)")
        if cfg.backend and cfg.backend not in TRITON_BACKENDS:
            self.add(Severity.error, f"{rel}: unknown backend {cfg.backend!r}", f"use one of {', '.join(sorted(TRITON_BACKENDS))}")
        if cfg.platform and cfg.platform not in PLATFORMS and (not cfg.backend or cfg.backend in TYPED_BACKENDS):
            # (any platform string goes with a backend Triton does not know by type, e.g. python)
            self.add(Severity.error, f"{rel}: unknown platform {cfg.platform!r}", f"use one of {', '.join(PLATFORMS)}")
        if not cfg.backend and not cfg.platform:  # (and no model file Triton recognizes to fill them in)
            self.add(Severity.error, f"{rel}: neither platform nor backend is set", "set platform (e.g. onnxruntime_onnx)")
        # Triton: a backend it knows by type takes only its own platform; an ensemble has no backend.
        if cfg.backend and cfg.platform in PLATFORMS and PLATFORMS[cfg.platform] != cfg.backend and \
                (cfg.backend in TYPED_BACKENDS or cfg.platform == "ensemble"):
            self.add(Severity.error, f"{rel}: platform {cfg.platform!r} with backend {cfg.backend!r} (Triton refuses "
                                     "the pair)", f"drop the platform or set the one of backend {cfg.backend!r}")
        for role, tensors in (("input", cfg.input), ("output", cfg.output)):
            for t in tensors:  # Triton's ValidateIOShape
                if not t.dims or any(d < 1 and d != -1 for d in t.dims):
                    self.add(Severity.error, f"{rel}: {role} {t.name!r} has dims {list(t.dims)}; Triton wants at least "
                                             "one, each >= 1 or -1 (variable)", f"set the dims the model takes or {REBUILD}")

        mb = cfg.max_batch_size
        if mb < 0:
            self.add(Severity.error, f"{rel}: max_batch_size is {mb}", "set max_batch_size >= 0")
        if cfg.HasField("dynamic_batching"):
            if mb == 0:
                self.add(Severity.error, f"{rel}: dynamic_batching with max_batch_size 0", "set max_batch_size > 0 or drop dynamic_batching")
            bad = [p for p in cfg.dynamic_batching.preferred_batch_size if p < 1 or p > mb]
            if bad and mb > 0:
                self.add(Severity.error, f"{rel}: preferred_batch_size {bad} outside 1..max_batch_size {mb}",
                         f"keep preferred sizes <= {mb} (tritonize repo build caps them)")

        self._check_warmup(rel, cfg)
        for number, group in enumerate(cfg.instance_group):
            self._check_instance_group(rel, group.name or f"#{number + 1}", group, _backend_of(cfg))

    def _check_warmup(self, rel: str, cfg) -> None:
        """Triton core runs each warmup sample as `batch_size` requests of batch 1 through the model's own validation
        (backend_model_instance.cc GenerateWarmupData, InferenceRequest::PrepareForInference): every input of the
        config, its data type, its dims with each variable one given a size; a batch_size of 0 skips the sample. The
        backend then runs them as one batch, which it refuses above max_batch_size (1 without batching: the backend
        library's total_batch_size rule, also in the Python backend)."""
        if cfg.platform == "ensemble":
            return  # (an ensemble takes no warmup at all: _check_ensemble)
        mb = cfg.max_batch_size
        inputs = {t.name: t for t in cfg.input}
        for w in cfg.model_warmup:
            if w.batch_size == 0:
                continue
            if mb >= 0 and w.batch_size > max(mb, 1):
                self.add(Severity.error, f"{rel}: warmup {w.name!r} uses batch {w.batch_size} > max_batch_size {mb}",
                         f"warm up at batch <= {max(mb, 1)} or {REBUILD}")
            missing = [name for name in inputs if name not in w.inputs]
            if missing:
                self.add(Severity.error, f"{rel}: warmup {w.name!r} gives no data for input(s) {', '.join(missing)}: "
                                         "Triton refuses the model", f"warm up every input or {REBUILD}")
            for name, given in w.inputs.items():
                t = inputs.get(name)
                if t is None:
                    continue
                dims, declared = list(given.dims), list(t.dims)
                if given.data_type != t.data_type or len(dims) != len(declared) or any(
                        g < 0 or d not in (-1, g) for g, d in zip(dims, declared)):
                    self.add(Severity.error, f"{rel}: warmup {w.name!r} input {name!r} is "
                                             f"{pb.DataType.Name(given.data_type)} {dims}; the config's input is "
                                             f"{pb.DataType.Name(t.data_type)} {declared} (each variable dim given a size)",
                             f"warm up with the input's data type and dims or {REBUILD}")

    def _check_instance_group(self, rel: str, name: str, group, backend: str | None) -> None:
        """An instance group as Triton reads it: a count below 1 runs one instance (core model_config_utils.cc
        NormalizeInstanceGroup); tensorrt_backend refuses any kind but KIND_GPU (src/instance_state.cc: "TensorRT
        backend supports only GPU device"); profile only in tensorrt_plan models, each name read by `std::stoi` and not
        negative, else core refuses the model (ValidateInstanceGroup, GetProfileIndex)."""
        if group.count < 1:
            self.add(Severity.warning, f"{rel}: instance_group count {group.count}: Triton runs 1 instance",
                     "set count >= 1 to say how many")
        if backend == "tensorrt" and kind_name(group.kind) == "KIND_CPU":
            self.add(Severity.error, f"{rel}: tensorrt_plan on KIND_CPU instances (TensorRT engines only run on a GPU)",
                     "use kind: KIND_GPU for trt_model; serve CPU-only boxes with onnx_model/torch_model")
        if not group.profile:
            return
        if backend != "tensorrt":
            self.add(Severity.error, f"{rel}: instance_group {name} lists profile in a model of the {backend} backend: "
                                     "Triton refuses it (only TensorRT models take profile)", "remove profile")
            return
        bad = [p for p in group.profile if profile_index(p) is None or profile_index(p) < 0]
        if bad:
            self.add(Severity.error, f"{rel}: instance_group {name}: profile {list(group.profile)} names {bad[0]!r}, which "
                                     "is not a profile index; Triton refuses to load the model",
                     f"list profile indices (\"0\", \"1\") or {REBUILD}")

    # --- files --------------------------------------------------------------------------------------
    def _check_versions(self, cfg, backend: str | None) -> Path | None:
        """Numeric version directories holding the model file; returns the served (latest) file."""
        versions = []
        for p in sorted(self.dir.iterdir()):
            if not p.is_dir() or p.name == "configs":
                continue
            if p.name.isdigit() and not (len(p.name) > 1 and p.name.startswith("0")):
                versions.append(p)
            else:
                self.add(Severity.warning, f"directory {p.name!r} is not a version number; Triton ignores it",
                         "name version directories 1, 2, ... (no leading zero)")
        if not versions:
            self.add(Severity.error, "no numeric version directory: Triton finds no version to serve", REBUILD)
            return None
        if backend == "tensorrt" and cfg.cc_model_filenames:
            return self._check_plan_files(cfg, versions)
        filename = cfg.default_model_filename or DEFAULT_FILES.get(backend or "", "")
        for v in versions:
            if filename and not (v / filename).exists():
                self.add(Severity.error, f"version {v.name}/ has no {filename}", f"place the model file as {v.name}/{filename} or {REBUILD}")
        latest = max(versions, key=lambda p: int(p.name)) / filename
        return latest if filename and latest.is_file() else None

    def _check_labels(self, cfg) -> None:
        for out in cfg.output:
            if not out.label_filename:
                continue
            path = self.dir / out.label_filename
            if not path.is_file():
                self.add(Severity.error, f"output {out.name!r}: label file {out.label_filename} is missing", REBUILD)
                continue
            count = len([line for line in path.read_text().splitlines() if line.strip()])
            size = _product(out.dims)
            if size > 0 and count != size:
                self.add(Severity.error, f"output {out.name!r}: {out.label_filename} has {count} labels for {size} outputs",
                         f"write one label per class ({size} in all) or {REBUILD}")

    def _check_parameters(self, cfg, backend: str | None) -> None:
        missing = [k for k in CONTRACT_KEYS if k not in cfg.parameters]
        if missing:
            self.add(Severity.warning, f"parameters lack {', '.join(missing)}: clients cannot fetch the preprocessing contract",
                     REBUILD)
        missing = [k for k in PLAN_KEYS if k not in cfg.parameters] if backend == "tensorrt" else []
        if missing:
            self.add(Severity.warning, f"parameters lack {', '.join(missing)}: `tritonize serve --engine docker` cannot choose "
                                "the container release whose TensorRT runs the plan", REBUILD)

    # --- ensembles and the preprocessing code -------------------------------------------------------
    def _check_ensemble(self, cfg) -> None:
        """As Triton core validates an ensemble: when it reads the config (model_config_utils.cc
        ValidateEnsembleSchedulingConfig) no instance_group, optimization or model_warmup, every step maps inputs and
        outputs, each tensor is written once, and each ensemble input and each written tensor is read (or is an
        ensemble output); against its steps' configs (ensemble_utils.cc ValidateEnsembleConfig) a step maps all its
        model's inputs and only its names, a tensor has one data type and dims that Triton's scheduler can pass from
        its writer to each reader (_fits), and the ensemble batches no more than a batching step."""
        for what, present in (("instance_group", len(cfg.instance_group) > 0), ("optimization", cfg.HasField("optimization")),
                              ("model_warmup", len(cfg.model_warmup) > 0)):
            if present:
                self.add(Severity.error, f"an ensemble with {what}: Triton refuses it (each step's model has its own)",
                         f"remove {what} or {REBUILD}")
        steps = cfg.ensemble_scheduling.step
        if not steps:
            self.add(Severity.error, "an ensemble without ensemble_scheduling steps", REBUILD)
            return
        written: dict[str, int] = {}  # tensor -> the step that writes it
        for number, step in enumerate(steps, 1):
            for role, mapping in (("input_map", step.input_map), ("output_map", step.output_map)):
                if not mapping:
                    self.add(Severity.error, f"step {number} has no {role}: Triton refuses the ensemble",
                             f"map the step's {role.split('_')[0]}s or {REBUILD}")
            for tensor in step.output_map.values():
                if tensor in written:
                    self.add(Severity.error, f"tensor {tensor!r} is written by step {written[tensor]} and step {number}",
                             f"write each tensor once or {REBUILD}")
                written.setdefault(tensor, number)
        read_by_steps = {tensor for step in steps for tensor in step.input_map.values()}
        for t in cfg.input:
            if t.name not in read_by_steps:
                self.add(Severity.error, f"the ensemble's input {t.name!r} is read by no step: Triton refuses the ensemble",
                         f"remove the input or map it to a step's input, or {REBUILD}")
        outputs = {t.name for t in cfg.output}
        for tensor, number in written.items():
            if tensor not in read_by_steps and tensor not in outputs:
                self.add(Severity.error, f"step {number} writes tensor {tensor!r}, which no step reads and the ensemble does "
                                         "not output: Triton refuses the ensemble",
                         f"read it, make it an output of the ensemble, or drop it from the output_map, or {REBUILD}")
        batching = cfg.max_batch_size > 0
        produced = {t.name: (t, "the ensemble's input", batching) for t in cfg.input}  # tensor -> (declaration, by whom, batching)
        read = [(t.name, t, "the ensemble's output", batching) for t in cfg.output]  # (tensor, declaration, by whom, batching)
        known = True  # every step's model could be read: a tensor nobody produces is then a fault of its own
        configs = self.ctx.configs
        for number, step in enumerate(steps, 1):
            name = step.model_name
            if name not in configs:
                self.add(Severity.error, f"step {number} names model {name!r}, which is not in the repository",
                         f"name one of {', '.join(sorted(n for n in configs if n != self.dir.name))} or {REBUILD}")
            model = configs.get(name)
            if model is None:  # missing, or its own findings say why its config is unusable
                known = False
                continue
            inputs, outputs_of = {t.name: t for t in model.input}, {t.name: t for t in model.output}
            for role, mapping, tensors in (("input", step.input_map, inputs), ("output", step.output_map, outputs_of)):
                for key in mapping:
                    if key not in tensors:
                        self.add(Severity.error, f"step {number}: {key!r} is not an {role} of {name} (its {role}s: "
                                          f"{', '.join(tensors) or 'none'})", f"map {name}'s own {role} names or {REBUILD}")
            unmapped = [t for t in inputs if t not in step.input_map]
            if unmapped:
                self.add(Severity.error, f"step {number}: {name}'s input(s) {', '.join(unmapped)} are not mapped",
                         f"map every input of {name} in input_map or {REBUILD}")
            step_batching = model.max_batch_size > 0
            read += [(tensor, inputs[key], f"{name}'s input {key!r}", step_batching)
                     for key, tensor in step.input_map.items() if key in inputs]
            produced.update({tensor: (outputs_of[key], f"{name}'s output {key!r}", step_batching)
                             for key, tensor in step.output_map.items() if key in outputs_of})
            if model.max_batch_size != 0 and model.max_batch_size < cfg.max_batch_size:
                self.add(Severity.error, f"max_batch_size {cfg.max_batch_size} but step {number}'s {name} takes at most "
                                  f"{model.max_batch_size}",
                         f"set the ensemble's max_batch_size <= {model.max_batch_size} or {REBUILD}")
        for tensor, declared, reader, reader_batching in read:
            if tensor not in produced:
                if known:
                    self.add(Severity.error, f"{reader} reads tensor {tensor!r}, which no step produces and the ensemble does "
                                      "not take", f"map a step's output to {tensor!r} or {REBUILD}")
                continue
            source, writer, writer_batching = produced[tensor]
            if not _fits(source, writer_batching, declared, reader_batching, cfg.max_batch_size):
                axes = ["", ""] if writer_batching == reader_batching else \
                    [" with a batch axis" if b else " without a batch axis (Triton passes it batches of 1 only)"
                     for b in (writer_batching, reader_batching)]
                self.add(Severity.error, f"tensor {tensor!r}: {writer} is {pb.DataType.Name(source.data_type)} "
                                  f"{list(source.dims)}{axes[0]}, {reader} is {pb.DataType.Name(declared.data_type)} "
                                  f"{list(declared.dims)}{axes[1]}",
                         f"make them the same dtype and dims or {REBUILD}")

    def _check_python_code(self) -> None:
        """A model.py that imports tritonize runs the copies beside it: they must be there, and be this tritonize's."""
        version = self.dir / VERSION
        model_py = version / "model.py"
        if not model_py.is_file() or "from tritonize." not in model_py.read_text():
            return
        for rel, source in PREPROCESS_CODE.items():
            placed = version / rel
            rel = placed.relative_to(self.dir)
            if not placed.is_file():
                self.add(Severity.error, f"{rel} is missing: model.py imports it and the model will not load", REBUILD)
            elif placed.read_bytes() != source.read_bytes():
                self.add(Severity.warning, f"{rel} differs from this tritonize's {source.name}: the server would not "
                                    "preprocess as this client does", REBUILD)

    # --- the manifest -------------------------------------------------------------------------------
    def _check_against_manifest(self, cfg, backend: str | None, model_file: Path | None) -> None:
        manifest: Manifest = self.ctx.manifest
        sha = self.ctx.manifest_sha256
        recorded = cfg.parameters["source.manifest_sha256"].string_value if "source.manifest_sha256" in cfg.parameters else ""
        if recorded and recorded != sha:
            self.add(Severity.warning, f"built from another manifest (sha256 {recorded[:12]}, artifacts now {sha[:12]})",
                     f"{REBUILD} after re-exporting")
        named = cfg.parameters["source.artifact"].string_value if "source.artifact" in cfg.parameters else ""
        key = named or ARTIFACT_KEYS.get(backend or "")  # a precision variant names the artifact it serves
        entry = manifest.artifacts.get(key) if key else None
        if entry is None:
            if key:
                self.add(Severity.warning, f"the manifest has no {key!r} artifact to check this model against",
                         "pass the artifacts directory the repository was built from (--artifacts)")
            return
        if model_file is not None and entry.sha256 and self._read(model_file, "sha256", sha256_file) != entry.sha256:
            self.add(Severity.error, f"{model_file.parent.name}/{model_file.name} does not match the manifest's sha256 for "
                              f"{entry.file or key} (changed or corrupted since export)",
                     f"{REBUILD} from the verified artifacts")
        if isinstance(entry, Plan):
            self._check_plan(cfg, entry)
        bound = batch_bound(entry)
        beyond_profile = isinstance(entry, Plan) and entry.profile.max < cfg.max_batch_size  # said by _check_plan
        if cfg.max_batch_size > bound.max_batch and not beyond_profile:
            self.add(Severity.error, f"max_batch_size {cfg.max_batch_size} is above {bound.limit} ({bound.max_batch}): "
                              "larger batches were never verified",
                     f"set max_batch_size <= {bound.max_batch}, or {bound.raise_with.format(n=cfg.max_batch_size)} "
                     f"and {REBUILD}")
        if isinstance(entry, PrecisionVariant) and not (entry.cpu_serving and entry.cpu_serving.passed):
            self.add(Severity.error, f"serves {entry.file}, which has not passed `convert cpu`'s gates (agreement with FP32, "
                              "speed through the server)", f"run `tritonize convert cpu`, then {REBUILD}")

    def _check_plan(self, cfg, plan: Plan) -> None:
        layers = plan.layers
        if layers is not None and plan.precision != "fp32" and layers.fp32_share > MOSTLY_FP32:
            self.add(Severity.warning, f"the {plan.precision} plan runs {layers.fp32_share:.0%} of its layers in FP32 "
                                f"({layers.summary()}; e.g. {', '.join(layers.fp32_layers[:3])}): it will be about as "
                                "slow as an FP32 plan",
                     f"rebuild it strongly typed from the {plan.precision} ONNX (TensorRT 10+: `tritonize convert trt "
                     f"--precision {plan.precision} --force`), or serve it knowing it is mostly FP32")
        profile = plan.profile
        if profile.min != 1:
            self.add(Severity.error, f"the plan's profile min is {profile.min}: requests of batch 1 will be refused",
                     "rebuild the plan with --min-batch 1")
        if profile.max < cfg.max_batch_size:
            self.add(Severity.error, f"the plan's profile max {profile.max} is below max_batch_size "
                              f"{cfg.max_batch_size}: larger batches fail at inference",
                     f"set max_batch_size <= {profile.max} or rebuild the plan with --max-batch {cfg.max_batch_size}")
        for role, tensors, name in (("input", cfg.input, plan.input_name), ("output", cfg.output, plan.output_name)):
            if name not in {t.name for t in tensors}:
                self.add(Severity.error, f"the plan's {role} is {name!r}; the config names {[t.name for t in tensors]}",
                         f"name the config {role} {name!r} or {REBUILD}")
        if plan.status is Status.built and self.ctx.manifest.path(plan.onnx).is_file():
            self._check_plan_tensors(cfg, self.ctx.manifest.path(plan.onnx))

        release = self.ctx.release
        if release is None:
            return
        built = plan.tensorrt_version
        if not built:
            self.add(Severity.warning, "the manifest does not say which TensorRT built the plan; cannot check it against "
                                f"release {release.release}", "rebuild the plan with `tritonize convert trt`")
        elif not release.tensorrt:
            self.add(Severity.warning, f"the compatibility table has no confirmed TensorRT version for release {release.release}",
                     "check NVIDIA's Frameworks Support Matrix for that release")
        elif not tensorrt_loads(built, release.tensorrt, plan.options.version_compatible):
            matching = [r.release for r in releases_for_tensorrt(built, plan.options.version_compatible)]
            where = f"serve it with release {', '.join(matching)}" if matching else "no release in the table runs it"
            self.add(Severity.error, f"plan built with TensorRT {built}; Triton {release.release} runs TensorRT "
                              f"{release.tensorrt} and will refuse to deserialize it",
                     f"{where}, or rebuild the plan with `tritonize convert trt --triton-release {release.release}`")


def _autocompleted(cfg, model_dir: Path):
    """`cfg` with the backend and platform Triton fills in before it validates a config (core model_config_utils.cc
    AutoCompleteBackendFields, which runs with --disable-auto-complete-config too): from the platform, the
    default_model_filename, or the files of the first version directory."""
    subdirs = sorted(p for p in model_dir.iterdir() if p.is_dir()) if model_dir.is_dir() else []
    content = {p.name: p for p in subdirs[0].iterdir()} if subdirs else {}
    named = cfg.default_model_filename
    for backend, platform, filename in (("tensorrt", "tensorrt_plan", "model.plan"),
                                        ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
                                        ("pytorch", "pytorch_libtorch", "model.pt"), ("python", "", "model.py")):
        if not cfg.backend:
            found = filename in content and (backend in ("onnxruntime", "python") or content[filename].is_file())
            if (platform and cfg.platform == platform) or named == filename or (not cfg.platform and not named and found):
                cfg.backend = backend
        if cfg.backend == backend:
            cfg.platform = cfg.platform or platform
            return cfg
    return cfg


def _parsed_or_none(path: Path):
    try:
        return parse_config(path) if path.is_file() else None
    except TritonizeError:
        return None


def _fits(writer, writer_batching: bool, reader, reader_batching: bool, ensemble_batch: int) -> bool:
    """Same dtype, and dims equal where neither is variable (-1), as Triton's ensemble scheduler passes a tensor
    (ensemble_scheduler.cc ReshapeTensorDims): with their batch axes ([-1, *dims] for a batching model), or between a
    model with a batch axis and one without when their dims agree without it: a reader that batches gets the tensor
    as a batch of 1; a reader that does not gets the batch axis stripped when the batch is 1, and larger batches,
    which only an ensemble batching above 1 passes, fail there."""
    def same(x: list[int], y: list[int]) -> bool:
        return len(x) == len(y) and all(p == q or -1 in (p, q) for p, q in zip(x, y))

    def full(t, batching: bool) -> list[int]:
        return [-1, *t.dims] if batching else list(t.dims)

    if writer.data_type != reader.data_type:
        return False
    if same(full(writer, writer_batching), full(reader, reader_batching)):
        return True
    return same(list(writer.dims), list(reader.dims)) and (reader_batching or ensemble_batch <= 1)


def _backend_of(cfg) -> str | None:
    return cfg.backend or PLATFORMS.get(cfg.platform)


def _product(dims) -> int:
    n = 1
    for d in dims:
        if d < 0:
            return -1
        n *= d
    return n
