"""The plan check's name rule: the engine's I/O must be exactly what its builder says, because the
manifest records those names and `repo build` serves them."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.convert.plan_check import check_engine_io
from tritonize.errors import TritonizeError


def test_engine_names_match():
    check_engine_io(["input_0"], ["output_0"], ("input_0", "output_0"))


@pytest.mark.parametrize("inputs,outputs", [(["input_0"], ["output_0"]), (["input"], ["output", "extra"]), ([], ["output"])])
def test_other_names_are_refused(inputs, outputs):
    with pytest.raises(TritonizeError, match="the plan has inputs"):
        check_engine_io(inputs, outputs, ("input", "output"))


def _emulated_plan(tmp_path, version_compatible=False):
    """A plan of the tiny classifier built by tritonize's own Polygraphy build, on the emulated TensorRT."""
    import tensorrt as trt

    from tests.emulation import tiny_classifier
    from tritonize.convert.builders import plan_from_onnx
    from tritonize.convert.trtexec import BuildJob

    tiny_classifier(tmp_path / "tiny.onnx")
    job = BuildJob(onnx_file="tiny.onnx", plan_file="tiny.plan", input_name="images", output_name="logits",
                   input_shape=(3, 16, 16), profile={"min": 1, "opt": 2, "max": 4}, precision="fp32",
                   workspace_mib=64, timing_cache="timing.cache", version_compatible=version_compatible)
    plan = tmp_path / "tiny.plan"
    plan.write_bytes(bytes(plan_from_onnx(job, tmp_path, trt)()))
    return plan


def test_the_plan_check_runs_through_polygraphy(emulated_tensorrt, tmp_path):
    """The real Polygraphy on the emulated TensorRT, whose plans compute exactly onnxruntime's outputs: the
    check finds no error at any batch (N2: each output copied before the next run reuses its buffer), reads
    the engine's I/O from the engine (N1: TrtRunner has no get_output_metadata), loads plans on 8.6 (N20:
    no IStreamReader there) and leaves no device buffer behind (N21: the fixture's leak check)."""
    import onnxruntime as ort

    from tests.emulation import live_cuda
    from tritonize.convert.plan_check import verify_plan
    from tritonize.verify import Tolerance

    plan = _emulated_plan(tmp_path)
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    reference = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    before = live_cuda()
    report = verify_plan(plan, ("images", "logits"), x, reference, Tolerance(1e-6, 1.0), [1, 3, 4], "synthetic")
    assert report.passed and report.worst_rel_to_scale == 0.0 and set(report.batches) == {"1", "3", "4"}
    assert live_cuda()[:3] == before[:3]
    with pytest.raises(TritonizeError, match=r"the plan has inputs \['images'\] and outputs \['logits'\]"):
        verify_plan(plan, ("input_0", "output_0"), x, reference, Tolerance(), [1], "synthetic")
