"""What the user can choose about the repository, validated once (the models it knows are in
tritonize/model_repository.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.model_repository import BACKENDS

KINDS = ("auto", "gpu", "cpu")


@dataclass(frozen=True)
class RepoOptions:
    """Options of `tritonize repo build`; each maps onto a field of Triton's ModelConfig proto
    (https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto)."""

    max_batch: int | None = None  # max_batch_size; None: what each model's artifact was verified at (config.batch_bound)
    preferred: tuple[int, ...] = (4, 8, 16, 32)  # dynamic_batching.preferred_batch_size, capped at max_batch
    queue_delay_us: int = 100  # dynamic_batching.max_queue_delay_microseconds
    instances: int = 1  # instance_group.count
    kind: str = "auto"  # instance_group.kind of config.pbtxt: auto | gpu | cpu
    warmup: bool = True  # model_warmup at batch 1 and at max batch
    models: tuple[str, ...] | None = None  # subset of BACKENDS names; None = all
    ensembles: bool = True  # the preprocessing models and one ensemble per classifier and preprocessor
    force: bool = False  # rebuild even when the repository is up to date (implies overwrite)
    overwrite: bool = False  # replace an existing repository that differs from what this build writes
    cuda_graphs: bool = False  # trt_model: optimization.cuda.graphs with a graph_spec per batch size (config.py)
    context_memory: str | None = None  # trt_model: execution_context_allocation_strategy (config.py); None: Triton's
    plans: tuple[Path, ...] = ()  # other artifacts directories whose plans join trt_model's (one per GPU kind: gpus.py)
    latency_instances: int | None = None  # trt_model: instances in the plan's latency profile (config.profile_groups)

    def __post_init__(self):
        if self.max_batch is not None and self.max_batch < 1:
            raise TritonizeError(f"--max-batch must be >= 1 (got {self.max_batch})")
        preferred = tuple(self.preferred)
        if any(p < 1 for p in preferred):
            raise TritonizeError(f"--preferred sizes must be >= 1 (got {','.join(map(str, preferred))})")
        object.__setattr__(self, "preferred", preferred)
        if self.queue_delay_us < 0:
            raise TritonizeError(f"--queue-delay-us must be >= 0 (got {self.queue_delay_us})")
        if self.latency_instances is not None and self.latency_instances < 0:
            raise TritonizeError(f"--latency-instances must be >= 0 (got {self.latency_instances})")
        if self.instances < 1:
            raise TritonizeError(f"--instances must be >= 1 (got {self.instances})")
        if self.kind not in KINDS:
            raise TritonizeError(f"--kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if self.force:
            object.__setattr__(self, "overwrite", True)
        object.__setattr__(self, "plans", tuple(Path(p) for p in self.plans))
        if self.context_memory not in (None, "static", "on-profile-change"):
            raise TritonizeError(f"--context-memory must be static or on-profile-change (got {self.context_memory!r})")
        if self.models is not None:
            models = tuple(self.models)
            unknown = [m for m in models if m not in BACKENDS]
            if unknown or not models:
                raise TritonizeError(
                    f"--models: unknown model {', '.join(unknown) or '(none given)'}; choose from {', '.join(BACKENDS)}"
                )
            object.__setattr__(self, "models", models)

    def preferred_for(self, max_batch: int) -> list[int]:
        """Preferred batch sizes that fit `max_batch`, sorted, without duplicates."""
        return sorted({p for p in self.preferred if p <= max_batch})
