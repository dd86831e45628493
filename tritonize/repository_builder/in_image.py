"""`repo check --in-image`: the plan proven in the image that will serve it.

Comparing version strings says a plan should load; loading it says it does. The serving release's own image
(nvcr.io/nvidia/tritonserver:<release>-py3, the release in trt_model's provenance or --triton-release) runs the
plan that Triton would pick for this GPU with its trtexec (`--loadEngine`, one batch of the model's synthetic
inputs), and the output is compared with onnxruntime on the FP32 export, with the tolerance the plan was built to.
The same check as `convert trt --builder container` (convert/plan_check.py verify_with_trtexec), run on the
repository's copy of the plan, from a private directory (nothing is written into the repository).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tritonize.convert import precision as prec
from tritonize.convert.builders import container_argv, container_name
from tritonize.convert.engine import plan_tolerance
from tritonize.convert.network import Network
from tritonize.convert.plan_check import PlanCheck, verify_with_trtexec
from tritonize.errors import TritonizeError
from tritonize.manifest import Manifest, Status
from tritonize.model_repository import CONFIG_NAME, TRT_MODEL, parse_config, served_plans
from tritonize.releases import Release, release_info
from tritonize.repository_builder.gpus import plan_cc
from tritonize.verify import VerificationReport

MODEL = TRT_MODEL.name
TIMEOUT_S = 900  # the first `docker run` pulls the image


def check_in_image(repository: Path, artifacts: Path | None, triton_release: str | None,
                   timeout_s: float = TIMEOUT_S) -> tuple[Release, str, VerificationReport]:
    """Run trt_model's plan in its release's image: (the release, the plan file, the comparison)."""
    if artifacts is None:
        raise TritonizeError("--in-image compares the plan with onnxruntime on the export: give --artifacts DIR")
    manifest = Manifest.load(Path(artifacts))
    plan = manifest.plan
    if plan is None or plan.status is not Status.built or manifest.onnx is None:
        raise TritonizeError(f"--in-image: {artifacts} has no built plan and ONNX export to check")
    config_file = Path(repository) / MODEL / CONFIG_NAME
    if not config_file.is_file():
        raise TritonizeError(f"--in-image: {repository} has no {MODEL} (build it with `tritonize repo build`)")
    cfg = parse_config(config_file)
    recorded = cfg.parameters["source.triton_release"].string_value if "source.triton_release" in cfg.parameters else ""
    release = release_info(triton_release or recorded or "")
    filename = served_plans(cfg).get(plan_cc(plan) or "", cfg.default_model_filename or "model.plan")
    versions = sorted((p for p in config_file.parent.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not versions or not (versions[-1] / filename).is_file():
        raise TritonizeError(f"--in-image: {MODEL} has no {filename} in its latest version")
    network = Network.from_spec(manifest.spec)
    batch = min(plan.profile.opt, plan.profile.max, cfg.max_batch_size or plan.profile.max)
    inputs = network.synthetic(batch, seed=0)
    reference = prec.run_onnx(prec.ort_session(manifest.path(manifest.onnx)), inputs, network.input_name,
                              network.output_name)
    check = PlanCheck(inputs, reference, plan_tolerance(plan.precision, network), [batch],
                      "synthetic (normalized uniform noise)")
    with tempfile.TemporaryDirectory(prefix="tritonize-in-image-") as tmp:
        placed = Path(tmp) / filename
        try:
            os.link(versions[-1] / filename, placed)
        except OSError:
            shutil.copy2(versions[-1] / filename, placed)
        os.chmod(tmp, 0o755)  # the image's user reads it
        name = container_name()
        report = verify_with_trtexec(container_argv(release.image, Path(tmp), [], name=name), Path(tmp), filename,
                                     (plan.input_name, plan.output_name), check, plan.options.version_compatible,
                                     timeout_s, kill=["docker", "kill", name])
    return release, filename, report
