"""Python-based `onnxruntime` backend: one onnxruntime session per model instance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.serve.backends.batching import BatchingModel, Placement


class TritonPythonModel(BatchingModel):
    default_model_filename = "model.onnx"

    def load(self, path: Path, placement: Placement) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = placement.threads
        options.inter_op_num_threads = 1
        # Idle threads sleep: by default they spin-wait for the next run, on the cores tritonserver (and a client on
        # this machine) needs between runs. Served resnet18 on 2 busy cores: 25 % less CPU per batch (docs/measuring.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if placement.kind == "GPU" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": placement.device_id}))
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        _require_names("input", [t.name for t in self.inputs], [i.name for i in self.session.get_inputs()])
        _require_names("output", [t.name for t in self.outputs], [o.name for o in self.session.get_outputs()])

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        feeds = {spec.name: array for spec, array in zip(self.inputs, inputs)}
        return self.session.run([spec.name for spec in self.outputs], feeds)


def _require_names(what: str, configured: list[str], in_model: list[str]) -> None:
    missing = sorted(set(configured) - set(in_model))
    if missing:
        raise RuntimeError(f"config {what}(s) {missing} are not in the ONNX model, which has {in_model}")
