"""Python-based `pytorch` backend: a TorchScript module per model instance, on the instance's GPU
when the instance kind is GPU and torch sees one, otherwise on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tritonize.serve.backends.batching import BatchingModel, Placement, ordered_by_index, sleeping_openmp_threads


class TritonPythonModel(BatchingModel):
    default_model_filename = "model.pt"

    def load(self, path: Path, placement: Placement) -> None:
        sleeping_openmp_threads()
        import torch

        torch.set_num_threads(placement.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only settable before the first parallel op; the default is harmless
            pass
        on_gpu = placement.kind == "GPU" and torch.cuda.is_available()
        self.device = torch.device(f"cuda:{placement.device_id}" if on_gpu else "cpu")
        self.module = torch.jit.load(str(path), map_location=self.device).eval()
        # Like Triton's pytorch backend: `input__1` is the forward()'s second argument, `output__0`
        # the first element of what it returns.
        self.input_order = [[t.name for t in self.inputs].index(n) for n in ordered_by_index([t.name for t in self.inputs])]
        self.output_order = [ordered_by_index([t.name for t in self.outputs]).index(t.name) for t in self.outputs]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            args = [torch.from_numpy(_writable(inputs[i])).to(self.device) for i in self.input_order]
            result = self.module(*args)
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        return [results[i].cpu().numpy() for i in self.output_order]


def _writable(array: np.ndarray) -> np.ndarray:
    # Tensors from the request are read-only views; torch wants memory it may write.
    return array if array.flags.writeable else array.copy()
