"""`repo check`'s rules about trt_model's TensorRT options: the plans of each GPU kind (cc_model_filenames), CUDA
graphs and the execution context's memory, as Triton's tensorrt backend reads them."""

from __future__ import annotations

from pathlib import Path

from tritonize.manifest import Manifest, Status
from tritonize.model_repository import missing_plan
from tritonize.repository_builder.config import (
    ALLOCATION_FROM_RELEASE, ALLOCATION_PARAMETER, ALLOCATION_STRATEGIES, release_has_allocation_strategy,
)
from tritonize.repository_builder.findings import REBUILD, Severity
from tritonize.repository_builder.gpus import plan_cc


class PlanOptionChecks:
    """Mixed into the checker of one model: `add` a finding, `ctx` the CheckContext."""

    def _check_plan_files(self, cfg, versions: list[Path]) -> Path | None:
        """A fleet's plans: each file cc_model_filenames names, in each version. Returns the latest version's plan
        for the GPU kind the manifest's plan was built on (what its sha256 is checked against), else None."""
        for v in versions:
            for cc, filename in sorted(cfg.cc_model_filenames.items()):
                if not (v / filename).is_file():
                    self.add(Severity.error, f"version {v.name}/ has no {filename}, the plan cc_model_filenames names for "
                                      f"compute capability {cc}", f"{REBUILD} --plans DIR... with the plan of each GPU kind")
        manifest: Manifest | None = self.ctx.manifest
        cc = plan_cc(manifest.plan) if manifest is not None and manifest.plan is not None else None
        latest = max(versions, key=lambda p: int(p.name))
        path = latest / cfg.cc_model_filenames[cc] if cc in cfg.cc_model_filenames else None
        return path if path is not None and path.is_file() else None

    def _check_cuda_graphs(self, cfg, backend: str | None) -> None:
        """As Triton's tensorrt backend validates graph specs when an instance loads (src/instance_state.cc
        ValidateGraphSpec), before any server starts; and against the plan's profile with the manifest."""
        cuda = cfg.optimization.cuda
        if not cuda.graph_spec:
            return
        if backend != "tensorrt":
            self.add(Severity.warning, f"optimization.cuda.graph_spec in a model of the {backend} backend: only the tensorrt "
                                "backend captures CUDA graphs from it", "remove graph_spec")
            return
        if not cuda.graphs:
            self.add(Severity.warning, "optimization.cuda.graph_spec without graphs: true: no graph is captured",
                     "set optimization { cuda { graphs: true } } or remove graph_spec")
        inputs = {t.name: list(t.dims) for t in cfg.input}
        manifest: Manifest | None = self.ctx.manifest
        plan = manifest.plan if manifest is not None else None
        for spec in cuda.graph_spec:
            lower = spec.graph_lower_bound.batch_size if spec.HasField("graph_lower_bound") else spec.batch_size
            if not (1 <= spec.batch_size <= cfg.max_batch_size and 1 <= lower <= cfg.max_batch_size):
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: Triton's tensorrt backend expects 'batch_size' "
                                  f"to be >= 1 and <= {cfg.max_batch_size} and refuses to load the model",
                         f"capture graphs for batch sizes 1..{cfg.max_batch_size} or {REBUILD} --cuda-graphs")
            elif lower > spec.batch_size:
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: its graph_lower_bound {lower} is larger",
                         "set graph_lower_bound.batch_size <= batch_size")
            elif plan is not None and plan.status is Status.built and not plan.profile.min <= spec.batch_size <= plan.profile.max:
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size} is outside the plan's profile "
                                  f"{plan.profile.min}..{plan.profile.max}: the engine cannot run it to capture a graph",
                         f"capture graphs for batch sizes {plan.profile.min}..{plan.profile.max} or {REBUILD} --cuda-graphs")
            for name, shape in spec.input.items():
                if name not in inputs:
                    self.add(Severity.error, f"graph_spec batch_size {spec.batch_size} names input {name!r}, which the config "
                                      f"does not have ({', '.join(inputs)})", f"{REBUILD} --cuda-graphs")
                elif any(d >= 0 and g != d for g, d in zip(shape.dim, inputs[name])) or len(shape.dim) != len(inputs[name]):
                    self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: input {name!r} shape {list(shape.dim)} is "
                                      f"not the config's {inputs[name]}", f"{REBUILD} --cuda-graphs")

    def _check_allocation_strategy(self, cfg, backend: str | None) -> None:
        if ALLOCATION_PARAMETER not in cfg.parameters:
            return
        value = cfg.parameters[ALLOCATION_PARAMETER].string_value
        if backend != "tensorrt":
            self.add(Severity.warning, f"{ALLOCATION_PARAMETER} in a model of the {backend} backend: only the tensorrt backend "
                                "reads it", f"remove the {ALLOCATION_PARAMETER} parameter")
            return
        if value not in ALLOCATION_STRATEGIES.values():
            self.add(Severity.error, f"{ALLOCATION_PARAMETER} is {value!r}: Triton's tensorrt backend refuses to load the model "
                              "(supported values are 'STATIC' and 'ON_PROFILE_CHANGE')",
                     f"set it to STATIC or ON_PROFILE_CHANGE, or {REBUILD} --context-memory")
        release = self.ctx.release.release if self.ctx.release else (
            cfg.parameters["source.triton_release"].string_value if "source.triton_release" in cfg.parameters else "")
        if release and not release_has_allocation_strategy(release):
            self.add(Severity.warning, f"{ALLOCATION_PARAMETER}: Triton {release}'s tensorrt backend does not read it (from "
                                f"{ALLOCATION_FROM_RELEASE}): the contexts keep static memory",
                     f"serve with Triton {ALLOCATION_FROM_RELEASE} or later, or remove the parameter")

    def _check_gpu_kind(self, cfg) -> None:
        cc, source = self.ctx.gpu_cc or (None, "")
        problem = missing_plan(cfg, cc) if cc else None
        if problem:
            self.add(Severity.error, f"{problem} (compute capability from {source})",
                     "build a plan on that GPU kind and gather it with `tritonize repo build --plans DIR`, or serve "
                     "trt_model on a GPU kind it has a plan for")
