"""What `repo check` reports: a finding per problem, its severity, and what the checks of every model share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as pb

    from tritonize.manifest import Manifest
    from tritonize.releases import Release

REBUILD = "rebuild with `tritonize repo build --force`"


class Severity(str, Enum):
    error = "error"  # Triton would refuse the model or serve something else than was verified: `repo check` exits 1
    warning = "warning"  # it would load, but something is off

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


@dataclass(frozen=True)
class Finding:
    model: str
    severity: Severity
    message: str  # what is wrong
    fix: str  # how to fix it

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "severity": self.severity.value}


@dataclass(frozen=True)
class CheckContext:
    """What every model's checks read besides the model's own directory."""

    manifest: "Manifest | None" = None  # --artifacts: hashes, plan profiles, verified batches, gates
    manifest_sha256: str | None = None
    release: "Release | None" = None  # --triton-release: the TensorRT the plan must match
    configs: dict[str, "pb.ModelConfig | None"] = field(default_factory=dict)  # what ensemble steps name
    gpu_cc: tuple[str | None, str] | None = None  # the serving GPU's compute capability, and where it was read
