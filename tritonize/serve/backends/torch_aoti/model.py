"""Python-based backend for `platform: "torch_aoti"` models: an AOTInductor package (torch._inductor.aoti_load_package)
per model instance, as Triton's pytorch backend serves them from 26.05 (src/pt2/model_state.cc). The package runs on
the device it was compiled for: a CPU package on KIND_CPU instances, a GPU package on KIND_GPU instances.

The embedded engine runs it under this name because its Triton (2.51) predates the platform: its core refuses a
`pytorch` model of platform `torch_aoti` (serve/embedded.py presents such a config with this backend's name)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tritonize import aoti
from tritonize.serve.backends.batching import BatchingModel, Placement, sleeping_openmp_threads


class TritonPythonModel(BatchingModel):
    default_model_filename = "model.pt2"

    def load(self, path: Path, placement: Placement) -> None:
        sleeping_openmp_threads()  # as the pytorch backend's: the package's kernels are OpenMP parallel regions
        import torch

        torch.set_num_threads(placement.threads)
        compiled = aoti.device(path)
        wanted = "cuda" if placement.kind == "GPU" else "cpu"
        if compiled != wanted:
            raise RuntimeError(f"{path.name} is an AOTInductor package for {compiled or 'an unknown device'}; instances of "
                               f"kind KIND_{placement.kind} cannot run it (compile one for {wanted})")
        self.device = torch.device(f"cuda:{placement.device_id}" if wanted == "cuda" else "cpu")
        # Inductor's files and the unpacked package in a directory of this instance's, inside the server's own (gone
        # when the server stops, were this process killed), removed at finalize.
        scratch = os.environ.get("TRITONIZE_SCRATCH")
        self.files = aoti.inductor_files(Path(scratch) if scratch else None)
        self.files.__enter__()
        try:
            self.package = torch._inductor.aoti_load_package(
                str(path), device_index=placement.device_id if wanted == "cuda" else -1)
        except BaseException:
            self.finalize()
            raise

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            args = [torch.from_numpy(a if a.flags.writeable else a.copy()).to(self.device) for a in inputs]
            result = self.package(*args)
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        return [r.cpu().numpy() for r in results]

    def finalize(self) -> None:
        self.package = None  # the loader removes what it unpacked
        if getattr(self, "files", None) is not None:
            self.files.__exit__(None, None, None)
            self.files = None
