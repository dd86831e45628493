"""One TensorRT plan per GPU kind.

A plan runs on the compute capability it was built for (unless built hardware-compatible). Triton's tensorrt
backend takes, for an instance on a GPU of compute capability "major.minor", the file that the config's
`cc_model_filenames` maps that key to, else `default_model_filename`, else `model.plan`
(triton-inference-server/tensorrt_backend, src/model_state.cc: `std::to_string(cuprops.major) + "." +
std::to_string(cuprops.minor)` looked up in `cc_model_filenames`; common's model_config.proto:
`map<string, string> cc_model_filenames`).

`repo build --plans DIR` gathers the plans built on several machines (each an artifacts directory of the same
export) into that map; `repo check` and `serve` say which GPU kind has no plan (model_repository.missing_plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonize.errors import TritonizeError
from tritonize.manifest import Manifest, Plan, Status
from tritonize.model_repository import CC_PATTERN


def plan_cc(plan: Plan) -> str | None:
    """The compute capability of the GPU a plan was built on, as `convert trt` recorded it (None: unknown)."""
    cc = (plan.details.get("gpu") or {}).get("compute_capability")
    return cc if isinstance(cc, str) and CC_PATTERN.fullmatch(cc) else None


def cc_filename(cc: str) -> str:
    """The file name of the plan for compute capability `cc` in a fleet's model directory: 8.6 -> model_sm86.plan."""
    return f"model_sm{cc.replace('.', '')}.plan"


@dataclass(frozen=True)
class FleetPlan:
    """One plan of a fleet: the GPU kind it was built on, its entry and its file."""

    cc: str
    entry: Plan
    path: Path
    artifacts: Path


def gather(manifest: Manifest, plan_dirs: tuple[Path, ...]) -> list[FleetPlan]:
    """The artifacts' own plan and the plan of each directory in `plan_dirs`, each checked: built and verified,
    its file the one its manifest describes, made from the same export, with the same precision, profile,
    tensor names and TensorRT (one Triton release serves them all), and one plan per GPU kind."""
    own = manifest.plan
    if own is None or own.status is not Status.built:
        raise TritonizeError(f"--plans adds plans to the one in {manifest.directory}, which has no built plan: "
                             "run `tritonize convert trt` there first")
    plans = [_fleet_plan(manifest, own)]
    for directory in plan_dirs:
        other = Manifest.load(Path(directory))
        entry = other.plan
        if entry is None or entry.status is not Status.built:
            status = entry.status.value if entry is not None else "absent"
            raise TritonizeError(f"--plans {directory}: its TensorRT plan is {status}, not built: run `tritonize "
                                 f"convert trt --artifacts {directory}` on that GPU first")
        plan = _fleet_plan(other, entry)
        if (other.onnx and other.onnx.sha256) != (manifest.onnx and manifest.onnx.sha256):
            raise TritonizeError(f"--plans {directory}: its plan was made from another export than {manifest.directory} "
                                 "(model.onnx differs): copy one artifacts directory to each GPU machine and build there")
        for what, mine, theirs in (("precision", own.precision, entry.precision),
                                   ("batch profile", own.profiles, entry.profiles),
                                   ("tensor names", (own.input_name, own.output_name), (entry.input_name, entry.output_name)),
                                   ("TensorRT", own.tensorrt_version, entry.tensorrt_version)):
            if mine != theirs:
                raise TritonizeError(f"--plans {directory}: its plan's {what} is {_show(theirs)}, the one in "
                                     f"{manifest.directory} has {_show(mine)}; one model serves one of each: rebuild it "
                                     "with the same `tritonize convert trt` options")
        plans.append(plan)
    seen: dict[str, Path] = {}
    for plan in plans:
        if plan.cc in seen:
            raise TritonizeError(f"two plans for compute capability {plan.cc}: {seen[plan.cc]} and {plan.artifacts}; "
                                 "give one directory per GPU kind")
        seen[plan.cc] = plan.artifacts
    return sorted(plans, key=lambda p: tuple(int(x) for x in p.cc.split(".")))


def _fleet_plan(manifest: Manifest, entry: Plan) -> FleetPlan:
    where = manifest.directory
    problem = manifest.file_problem(entry) if manifest.path(entry).is_file() else f"{manifest.path(entry)} is missing"
    if problem:
        raise TritonizeError(f"--plans: the plan in {where}: {problem}; rebuild it with `tritonize convert trt --force`")
    cc = plan_cc(entry)
    if cc is None:
        raise TritonizeError(f"--plans: the manifest in {where} does not say which GPU its plan was built on; rebuild "
                             "it with this tritonize's `convert trt --force` on that GPU")
    return FleetPlan(cc, entry, manifest.path(entry), where)


def _show(value) -> str:
    if isinstance(value, list):  # a plan's profiles
        return " and ".join(_show(v) for v in value)
    if hasattr(value, "to_dict"):
        return "/".join(str(v) for v in value.to_dict().values())
    return "/".join(value) if isinstance(value, tuple) else str(value)
