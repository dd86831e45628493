"""`repo check`'s rules about trt_model's TensorRT options: the plans of each GPU kind (cc_model_filenames), CUDA
graphs, the execution context's memory and the optimization profiles of each instance group, as Triton's tensorrt
backend reads them."""

from __future__ import annotations

from pathlib import Path

from tritonize.manifest import Manifest, Status
from tritonize.model_repository import missing_plan, profile_index
from tritonize.repository_builder.config import (
    ALLOCATION_FROM_RELEASE,
    ALLOCATION_PARAMETER,
    ALLOCATION_STRATEGIES,
    release_has_allocation_strategy,
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
        """As Triton's tensorrt backend reads graph specs: with graphs: true it validates each when an instance loads
        and refuses the model on a bad one (tensorrt_backend src/instance_state.cc InitializeGraphSpecs,
        ValidateGraphSpec: batch sizes in 1..max_batch_size, 0 without batching, the lower bound's no larger, shapes of
        sizes >= 0 and lower bounds no larger); a graph it then cannot capture (an input the engine lacks, a shape or batch outside the plan's profile)
        is logged and served without (BuildCudaGraph): a warning. Without graphs: true it reads none."""
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
            return
        mb = cfg.max_batch_size
        inputs = {t.name: list(t.dims) for t in cfg.input}
        manifest: Manifest | None = self.ctx.manifest
        plan = manifest.plan if manifest is not None else None
        for spec in cuda.graph_spec:
            bounded = spec.HasField("graph_lower_bound")
            lower = spec.graph_lower_bound.batch_size if bounded else spec.batch_size
            if mb == 0 and (spec.batch_size, lower) != (0, 0):
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: without batching (max_batch_size 0) "
                                         "Triton's tensorrt backend expects 'batch_size' to be 0 and refuses to load the model",
                         f"set batch_size: 0 (and the lower bound's) or {REBUILD} --cuda-graphs")
                continue
            if mb > 0 and not (1 <= spec.batch_size <= mb and 1 <= lower <= mb):
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: Triton's tensorrt backend expects 'batch_size' "
                                  f"to be >= 1 and <= {mb} and refuses to load the model",
                         f"capture graphs for batch sizes 1..{mb} or {REBUILD} --cuda-graphs")
                continue
            if lower > spec.batch_size:
                self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: its graph_lower_bound {lower} is larger",
                         "set graph_lower_bound.batch_size <= batch_size")
                continue
            lower_shapes = spec.graph_lower_bound.input if bounded else spec.input
            for name, shape in spec.input.items():
                low = lower_shapes.get(name)
                if low is None or len(low.dim) != len(shape.dim) or any(d < 0 for d in [*shape.dim, *low.dim]) or any(
                        lo > hi for lo, hi in zip(low.dim, shape.dim)):
                    self.add(Severity.error, f"graph_spec batch_size {spec.batch_size}: input {name!r} shape {list(shape.dim)} "
                                             f"with lower bound {list(low.dim) if low is not None else 'none'}: Triton's "
                                             "tensorrt backend expects sizes >= 0, a lower bound of the same rank and no "
                                             "larger, and refuses to load the model", f"{REBUILD} --cuda-graphs")
                elif name not in inputs:
                    self.add(Severity.warning, f"graph_spec batch_size {spec.batch_size} names input {name!r}, which the config "
                                        f"does not have ({', '.join(inputs)}): no graph is captured for it",
                             f"{REBUILD} --cuda-graphs")
                elif any(d >= 0 and g != d for g, d in zip(shape.dim, inputs[name])) or len(shape.dim) != len(inputs[name]):
                    self.add(Severity.warning, f"graph_spec batch_size {spec.batch_size}: input {name!r} shape {list(shape.dim)} is "
                                        f"not the config's {inputs[name]}: no graph is captured for it",
                             f"{REBUILD} --cuda-graphs")
            if plan is not None and plan.status is Status.built and not plan.profile.min <= spec.batch_size <= plan.profile.max:
                self.add(Severity.warning, f"graph_spec batch_size {spec.batch_size} is outside the plan's profile "
                                    f"{plan.profile.min}..{plan.profile.max}: the engine cannot run it, and no graph is captured",
                         f"capture graphs for batch sizes {plan.profile.min}..{plan.profile.max} or {REBUILD} --cuda-graphs")
        if plan is not None and plan.status is Status.built:
            self._check_graphs_in_each_context(cfg, plan.profiles)

    def _check_graphs_in_each_context(self, cfg, profiles) -> None:
        """tensorrt_backend captures every graph_spec in every execution context of an instance, one per profile its
        group lists (src/instance_state.cc InitializeCudaGraph); a batch outside a context's profile fails its
        setInputShape there, and TRTv3Interface::BuildCudaGraph logs an ERROR at each load (N32 of issue 34)."""
        batches = sorted({spec.batch_size for spec in cfg.optimization.cuda.graph_spec})
        for number, group in enumerate(cfg.instance_group):
            if not all(p.strip().isdigit() for p in group.profile):
                continue  # _check_profiles names it
            for index in sorted({int(p) for p in group.profile if 0 < int(p) < len(profiles)}):  # 0: checked above
                profile = profiles[index]
                outside = [b for b in batches if not profile.min <= b <= profile.max]
                if outside:
                    self.add(Severity.warning, f"instance_group {group.name or f'#{number + 1}'} runs in profile {index} "
                                               f"(batch {profile.min}..{profile.max}), where Triton's tensorrt backend "
                                               f"also captures the CUDA graphs of batch {_ranges(outside)} and fails, "
                                               "logging an ERROR for each at every load",
                             f"capture graphs only for batch sizes every group's profiles run, or {REBUILD} --cuda-graphs")

    def _check_allocation_strategy(self, cfg, backend: str | None) -> None:
        """execution_context_allocation_strategy as tensorrt_backend reads it (src/model_state.cc ParseParameters, from
        release 25.05): STATIC or ON_PROFILE_CHANGE, anything else refuses the model; earlier releases ignore it."""
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

    def _check_profiles(self, cfg, backend: str | None) -> None:
        """instance_group.profile as tensorrt_backend reads it (e2ef6d7): an index of the plan's profiles
        (instance_state.cc InitOptimizationProfiles refuses the load otherwise), verified, and every batch up to max_batch_size taken by one of the group's profiles: the dynamic
        batcher may send any of them to any instance, and a batch outside the instance's profiles fails there
        ("request specifies invalid shape"; config.profile_groups)."""
        manifest: Manifest | None = self.ctx.manifest
        plan = manifest.plan if manifest is not None and manifest.plan is not None else None
        profiles = plan.profiles if plan is not None and plan.status is Status.built else None
        for number, group in enumerate(cfg.instance_group):
            indices = [profile_index(p) for p in group.profile]
            if not indices or backend != "tensorrt" or any(i is None or i < 0 for i in indices):
                continue  # (what Triton core refuses: the checker's _check_instance_group)
            name = group.name or f"#{number + 1}"
            if profiles is None:
                continue
            wrong = [i for i in indices if not 0 <= i < len(profiles)]
            if wrong:
                self.add(Severity.error, f"instance_group {name}: profile {wrong[0]} is not one of the plan's "
                                         f"{len(profiles)} optimization profile(s) (0..{len(profiles) - 1}); Triton's "
                                         "tensorrt backend refuses to load the model",
                         f"list profiles 0..{len(profiles) - 1}, or rebuild the plan with `tritonize convert trt "
                         "--latency-profile MIN,OPT,MAX` and then the repository")
                continue
            if 1 in indices and not (plan.latency_verification and plan.latency_verification.passed):
                self.add(Severity.error, f"instance_group {name} runs in profile 1, which the plan check did not verify",
                         "rebuild the plan with `tritonize convert trt --force`")
            taken = {b for i in indices for b in range(profiles[i].min, profiles[i].max + 1)}
            refused = [b for b in range(1, cfg.max_batch_size + 1) if b not in taken]
            if refused:
                shown = ", ".join(f"{p.min}..{p.max}" for p in (profiles[i] for i in indices))
                self.add(Severity.error, f"instance_group {name} runs in profile {', '.join(group.profile)} (batch "
                                         f"{shown}): Triton's dynamic batcher may send it any batch up to max_batch_size "
                                         f"{cfg.max_batch_size}, and batch {_ranges(refused)} would fail there",
                         "add profile \"0\" to that group (as `tritonize repo build` does) or lower max_batch_size")


def _ranges(values: list[int]) -> str:
    """[1, 5, 6, 7] -> "1, 5..7"."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)
