"""`repo check`'s rules that Triton core applies to a config when it loads the model, before any backend runs: the
backend it fills in, platform and backend, dims, batching, warmup samples, instance groups and ensembles
(triton-inference-server/core: model_config_utils.cc, ensemble_utils.cc, ensemble_scheduler.cc)."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as pb

from tritonize.model_repository import (
    ANY,
    BACKENDS,
    ENSEMBLE,
    PLATFORMS,
    TRITON_BACKENDS,
    TRT_MODEL,
    TYPED_BACKENDS,
    backend_of,
    profile_index,
)
from tritonize.repository_builder.config import kind_name
from tritonize.repository_builder.findings import REBUILD, Severity


class ConfigRuleChecks:
    """Mixed into the checker of one model: `add` a finding, `ctx` the CheckContext."""

    def _check_config(self, rel: str, cfg) -> None:
        """Name, platform and backend, dims, batching (model_config_utils.cc ValidateModelConfig, ValidateIOShape),
        then the warmup samples and instance groups."""
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
                (cfg.backend in TYPED_BACKENDS or cfg.platform == ENSEMBLE):
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
            self._check_instance_group(rel, group.name or f"#{number + 1}", group, backend_of(cfg))

    def _check_warmup(self, rel: str, cfg) -> None:
        """Triton core runs each warmup sample as `batch_size` requests of batch 1 through the model's own validation
        (backend_model_instance.cc GenerateWarmupData, InferenceRequest::PrepareForInference): every input of the
        config, its data type, its dims with each variable one given a size; a batch_size of 0 skips the sample. The
        backend then runs them as one batch, which it refuses above max_batch_size (1 without batching: the backend
        library's total_batch_size rule, also in the Python backend)."""
        if cfg.platform == ENSEMBLE:
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
                     f"use kind: KIND_GPU for {TRT_MODEL.name}; serve CPU-only boxes with "
                     f"{'/'.join(b.name for b in BACKENDS.values() if b.runs == ANY)}")
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

    def _check_ensemble(self, cfg) -> None:
        """As Triton core validates an ensemble: when it reads the config (model_config_utils.cc
        ValidateEnsembleSchedulingConfig) no instance_group, optimization or model_warmup, every step maps inputs and
        outputs, each tensor is written once, and each ensemble input and each written tensor is read (or is an
        ensemble output); against its steps' configs (ensemble_utils.cc ValidateEnsembleConfig) a step maps all its
        model's inputs and only its names, a tensor has one data type and dims that Triton's scheduler can pass from
        its writer to each reader (fits), and the ensemble batches no more than a batching step."""
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
            if not fits(source, writer_batching, declared, reader_batching, cfg.max_batch_size):
                axes = ["", ""] if writer_batching == reader_batching else \
                    [" with a batch axis" if b else " without a batch axis (Triton passes it batches of 1 only)"
                     for b in (writer_batching, reader_batching)]
                self.add(Severity.error, f"tensor {tensor!r}: {writer} is {pb.DataType.Name(source.data_type)} "
                                  f"{list(source.dims)}{axes[0]}, {reader} is {pb.DataType.Name(declared.data_type)} "
                                  f"{list(declared.dims)}{axes[1]}",
                         f"make them the same dtype and dims or {REBUILD}")


def fits(writer, writer_batching: bool, reader, reader_batching: bool, ensemble_batch: int) -> bool:
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
