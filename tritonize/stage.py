"""What every stage returns: a status the pipeline and the CLI act on, and one line for people."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class StageStatus(str, Enum):
    done = "done"  # the stage did its work
    up_to_date = "up to date"  # its outputs were current for the same inputs: nothing was done
    waiting_for_gpu = "waiting for GPU"  # everything a GPU box needs is written; TensorRT cannot run here


@dataclass(frozen=True)
class StageResult:
    stage: str
    status: StageStatus
    detail: str = ""
