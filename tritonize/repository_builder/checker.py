"""`repo check`: find what would make Triton refuse or misbehave, before any server starts.

Rules (each finding names the model, what is wrong and how to fix it). configs/*.pbtxt, which Triton serves
with --model-config-name (the embedded engine's choice on a machine without a GPU), get every rule that
config.pbtxt gets; a variant's finding says its file, and what config.pbtxt already says is not repeated.
  schema      every config.pbtxt / configs/*.pbtxt parses as Triton's ModelConfig; its name is the directory's
  platform    platform or backend is one Triton ships; a backend Triton knows by type with its own platform only;
              without either, the backend of the model file, as Triton fills it in
  dims        every input and output has dims, each >= 1 or -1
  batching    max_batch_size >= 0; dynamic batching needs max_batch_size > 0; preferred batch sizes in
              1..max_batch_size
  warmup      a sample's batch at most max_batch_size (1 without a batch axis); every input of the config, with its
              data type and dims, each variable one given a size
  instances   counts >= 1 (a warning: Triton runs 1); tensorrt_plan never on KIND_CPU instances
  versions    numeric version directories exist and each holds the backend's model file
  labels      the label file exists and has one line per output class
  onnx        config names, types and dims match the real ONNX graph as onnxruntime's session has it (an output's
              dims exactly); its batch axis is symbolic
  torchscript the module's forward() takes as many inputs as the config declares, names follow
              Triton's `<name>__<index>` rule, and a batch-1 forward gives the configured output dims
  package     a PyTorch 2 model (an AOTInductor package): its release (--triton-release, else the config's
              source.triton_release) serves the platform (from 26.05) and, before 26.07, it neither batches nor
              sequence-batches; its instances are of the package's device; the config names tensors the pytorch
              backend binds from the package's call spec; a batch-1 run of a CPU package gives the configured dims;
              (manifest) it was compiled from the manifest's ExportedProgram (package_rules.py)
  plan        (manifest) profile min is 1 and max >= max_batch_size; names match the plan's ONNX names, data types
              and dims those of the ONNX the plan was built from
  batch       (manifest) max_batch_size is no larger than the batch the artifact was verified at
  hashes      (manifest) model files have the sha256 the manifest recorded (the artifact a model names in its
              `source.artifact` parameter, else its backend's export), and so have the artifacts themselves
              (an export killed mid-publish leaves a `pending` entry or another file)
  gates       (manifest) a CPU precision variant is served only with `convert cpu`'s gates passed
  provenance  contract parameters present (and trt_model's plan provenance); (manifest) source.manifest_sha256
              is this manifest's hash
  ensemble    no instance_group, optimization or model_warmup; steps name models of the repository; each step
              maps inputs and outputs, every input of its model and only its tensor names; each tensor is written
              once and read (or an ensemble output), each ensemble input read; every tensor read is the ensemble's
              input or a step's output, with the same dtype and dims Triton can pass between them; the ensemble
              batches no more than its batching steps
  python code a Python model that imports tritonize holds the modules it imports (1/tritonize/), equal to
              this tritonize's: the server preprocesses with the client's code
  release     (--triton-release) the plan's TensorRT is the one that release runs
  cuda graphs graph_spec only on tensorrt models, with graphs: true; batch sizes in 1..max_batch_size (0 without
              batching) and lower bounds no larger (Triton's tensorrt backend refuses the model otherwise); a graph
              it would serve without (warnings): inputs and shapes not the config's, (manifest) batch outside the
              plan's profile
  memory      execution_context_allocation_strategy only on tensorrt models, STATIC or ON_PROFILE_CHANGE, and
              served by a release that reads it (25.05+)
  profiles    instance_group.profile only on tensorrt models, names read as Triton reads them (`std::stoi`), not
              negative; (manifest) indices of the plan's
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

from tritonize.errors import TritonizeError
from tritonize.files import sha256_file
from tritonize.manifest import MOSTLY_FP32, Manifest, Package, Plan, PrecisionVariant, Status
from tritonize.model_repository import (
    AOTI_MODEL,
    CONFIG_NAME,
    TORCH_MODEL,
    artifact_key,
    autocompleted,
    backend_of,
    default_file,
    parse_config,
    serving_cc,
)
from tritonize.releases import release_info, releases_for_tensorrt, tensorrt_loads
from tritonize.repository_builder.builder import PREPROCESS_CODE, VERSION
from tritonize.repository_builder.config import CONTRACT_KEYS, PACKAGE_KEYS, PLAN_KEYS, batch_bound
from tritonize.repository_builder.config_rules import ConfigRuleChecks
from tritonize.repository_builder.findings import REBUILD, CheckContext, Finding, Severity
from tritonize.repository_builder.model_files import ModelFileChecks
from tritonize.repository_builder.package_rules import PackageChecks
from tritonize.repository_builder.plan_options import PlanOptionChecks


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
    plans = any(backend_of(c) == "tensorrt" for c in context.configs.values() if c is not None)
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


class _ModelCheck(ConfigRuleChecks, ModelFileChecks, PlanOptionChecks, PackageChecks):
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
        if backend_of(configs[CONFIG_NAME]) == "python":
            self._check_python_code()
        return self.findings

    def _check_served(self, cfg) -> list[Finding]:
        """The checks of the model Triton loads with this config; returns their findings (also in self.findings)."""
        start = len(self.findings)
        backend = backend_of(cfg)
        model_file = self._check_versions(cfg, backend)
        self._check_labels(cfg)
        if model_file is not None and backend == "onnxruntime":
            self._check_onnx(cfg, model_file)
        if model_file is not None and cfg.platform == TORCH_MODEL.platform:
            self._check_torchscript(cfg, model_file)
        if cfg.platform == AOTI_MODEL.platform:
            self._check_package(cfg, model_file)
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
                configs[rel] = autocompleted(parse_config(path), self.dir)
            except TritonizeError as e:
                detail = str(e).split(": ", 1)[-1]
                self.add(Severity.error, f"{rel} does not parse against Triton's ModelConfig schema: {detail}",
                         f"correct that field (see model_config.proto) or {REBUILD}")
        return configs

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
        filename = cfg.default_model_filename or default_file(backend, cfg.platform)
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
        missing = [k for k in PACKAGE_KEYS if k not in cfg.parameters] if cfg.platform == AOTI_MODEL.platform else []
        if missing:
            self.add(Severity.warning, f"parameters lack {', '.join(missing)}: nothing says which release and device the "
                                       "package was made for", REBUILD)

    # --- the preprocessing code ------------------------------------------------------------------------
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
        key = named or artifact_key(backend, cfg.platform)  # a precision variant names the artifact it serves
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
        program = manifest.exported_program
        if isinstance(entry, Package) and program is not None and entry.source.sha256 != program.sha256:
            self.add(Severity.warning, f"{entry.file or 'the package'} was compiled from another ExportedProgram than "
                                       f"{program.file} (sha256 {entry.source.sha256[:12]}, now {program.sha256[:12]})",
                     f"run `tritonize convert aoti`, then {REBUILD}")
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
        onnx_file = self.ctx.manifest.path(plan.onnx)  # what the engine is (to be) built from
        if onnx_file.is_file():
            self._check_plan_tensors(cfg, onnx_file)

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


def _parsed_or_none(path: Path):
    try:
        return parse_config(path) if path.is_file() else None
    except TritonizeError:
        return None


def _product(dims) -> int:
    n = 1
    for d in dims:
        if d < 0:
            return -1
        n *= d
    return n
