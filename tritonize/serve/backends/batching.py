"""What the project's Python-based Triton backends share: Triton's batching contract around a runner.

When a model's backend (onnxruntime, pytorch, tensorrt) has no native library in the backend
directory, Triton's Python backend runs `<backend-dir>/<backend>/model.py` for it, one stub process
per instance. Each of those model.py files subclasses `BatchingModel` and implements `load` and
`run`; this class does what the real backends do alike: tensor names, dtypes and max batch come
from the model config, the requests of one execute() call are concatenated, run once and split
back, and a bad request gets an error response without failing the others.

Runs inside the stub, never in the tritonize process: `triton_python_backend_utils` exists only there.
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class BadRequest(Exception):
    """A request that cannot run as sent; only that request gets an error response."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int, ...]  # without the batch dimension; -1 is any size


@dataclass(frozen=True)
class Placement:
    kind: str  # "CPU" or "GPU", as Triton resolved the instance group
    device_id: int
    threads: int  # intra-op threads for this instance


class BatchingModel:
    """Base of the Python-based backends. Subclasses set `default_model_filename` and implement
    `load(path, placement)` and `run(inputs) -> outputs` (numpy arrays in config order)."""

    default_model_filename = ""

    def require(self) -> None:
        """Raise with a clear reason when this machine cannot run the backend at all."""

    def model_path(self, version_dir: Path, config: dict, placement: Placement) -> Path:
        """The file this instance loads from its version directory."""
        return version_dir / (config.get("default_model_filename") or self.default_model_filename)

    def load(self, path: Path, placement: Placement) -> None:
        raise NotImplementedError

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    # -- Triton's Python backend interface --------------------------------------------------

    def initialize(self, args: dict) -> None:
        self.require()
        config = json.loads(args["model_config"])
        self.config = config
        self.model_name = args["model_name"]
        self.instance_name = args["model_instance_name"]
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.inputs = [_tensor_spec(t) for t in config.get("input", [])]
        self.outputs = [_tensor_spec(t) for t in config.get("output", [])]
        self.placement = Placement(
            kind=args["model_instance_kind"],
            device_id=int(args["model_instance_device_id"]),
            threads=threads_per_instance(config),
        )
        path = self.model_path(Path(args["model_repository"]) / args["model_version"], config, self.placement)
        if not path.is_file():
            raise RuntimeError(f"model file {path} not found")
        self.load(path, self.placement)
        pb_utils.Logger.log_info(
            f"{args['model_instance_name']}: {Path(inspect.getfile(type(self))).parent.name} backend on {self.placement.kind} "
            f"{self.placement.device_id}, {self.placement.threads} intra-op thread(s), "
            f"max batch {self.max_batch_size}"
        )

    def execute(self, requests: list) -> list:
        responses = [None] * len(requests)
        ready = []  # (position, input arrays)
        for i, request in enumerate(requests):
            try:
                ready.append((i, self._read(request)))
            except BadRequest as e:
                responses[i] = _error_response(str(e))
        if len(ready) > 1 and self.max_batch_size > 0:
            try:
                self._run_together(ready, responses)
            except Exception:  # noqa: BLE001 - one request may poison the batch: retry one by one
                self._run_each(ready, responses)
        else:
            self._run_each(ready, responses)
        return responses

    def finalize(self) -> None:
        pass

    # -- internals ----------------------------------------------------------------------------

    def _read(self, request) -> list[np.ndarray]:
        arrays = []
        for spec in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
            if tensor is None:
                raise BadRequest(f"{self.model_name}: input '{spec.name}' is missing")
            array = tensor.as_numpy()
            if array.dtype != spec.dtype:
                raise BadRequest(f"{self.model_name}: input '{spec.name}' has dtype {array.dtype}, expected {spec.dtype}")
            shape = array.shape[1:] if self.max_batch_size > 0 else array.shape
            if len(shape) != len(spec.dims) or any(d not in (-1, s) for d, s in zip(spec.dims, shape)):
                raise BadRequest(f"{self.model_name}: input '{spec.name}' has shape {list(array.shape)}, "
                                 f"expected {['batch', *spec.dims] if self.max_batch_size > 0 else list(spec.dims)}")
            arrays.append(array)
        if self.max_batch_size > 0:
            batches = {a.shape[0] for a in arrays}
            if len(batches) != 1 or not 1 <= batches.pop() <= self.max_batch_size:
                raise BadRequest(f"{self.model_name}: inputs must share one batch size between 1 and {self.max_batch_size}")
        return arrays

    def _run_together(self, ready, responses) -> None:
        sizes = [arrays[0].shape[0] for _, arrays in ready]
        joined = [np.concatenate(column) for column in zip(*(arrays for _, arrays in ready))]
        outputs = self._checked_run(joined, sum(sizes))
        splits = np.cumsum(sizes)[:-1]
        parts = [np.split(output, splits) for output in outputs]
        for k, (i, _) in enumerate(ready):
            responses[i] = self._response([p[k] for p in parts])

    def _run_each(self, ready, responses) -> None:
        for i, arrays in ready:
            try:
                batch = arrays[0].shape[0] if self.max_batch_size > 0 else None
                responses[i] = self._response(self._checked_run(arrays, batch))
            except Exception as e:  # noqa: BLE001 - report to this request's client, keep serving
                responses[i] = _error_response(f"{self.model_name}: {type(e).__name__}: {e}")

    def _checked_run(self, inputs: list[np.ndarray], batch: int | None) -> list[np.ndarray]:
        outputs = self.run(inputs)
        if len(outputs) != len(self.outputs):
            raise RuntimeError(f"model returned {len(outputs)} output(s), the config declares {len(self.outputs)}")
        if batch is not None and any(o.shape[0] != batch for o in outputs):
            raise RuntimeError(f"model returned batch {[o.shape[0] for o in outputs]} for an input batch of {batch}")
        return [np.ascontiguousarray(o, dtype=spec.dtype) for o, spec in zip(outputs, self.outputs)]

    def _response(self, outputs: list[np.ndarray]):
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(spec.name, o) for spec, o in zip(self.outputs, outputs)]
        )


def sleeping_openmp_threads() -> None:
    """Before torch loads OpenMP (which reads it once): idle OpenMP threads sleep, unless the user chose. By default
    they spin-wait for the next parallel region, on the cores tritonserver (and a client on this machine) needs between
    them. Served resnet18 on 2 busy cores: TorchScript 40 % less CPU per batch; an AOTInductor package spinning beside
    a sleeping TorchScript served 0.19-0.50 of its throughput, sleeping 0.93-1.32 (docs/measuring.md, RESULTS.md)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def threads_per_instance(config: dict) -> int:
    """Intra-op threads per instance: the config's `intra_op_thread_count` parameter when set (as
    Triton's onnxruntime backend reads it), otherwise the usable cores shared by this model's
    instances, so several instances do not oversubscribe the machine."""
    explicit = config.get("parameters", {}).get("intra_op_thread_count", {}).get("string_value", "")
    if explicit.strip().isdigit() and int(explicit) > 0:
        return int(explicit)
    instances = sum(int(group.get("count", 1)) for group in config.get("instance_group", [])) or 1
    return max(1, len(os.sched_getaffinity(0)) // instances)


def _tensor_spec(t: dict) -> TensorSpec:
    return TensorSpec(
        name=t["name"],
        dtype=np.dtype(pb_utils.triton_string_to_numpy(t["data_type"])),
        dims=tuple(int(d) for d in t.get("dims", [])),
    )


def _error_response(message: str):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def ordered_by_index(names: list[str]) -> list[str]:
    """TorchScript tensors named `<anything>__<i>` map to position i (the pytorch backend's
    convention); other names keep their config order."""
    suffixes = [name.rpartition("__")[2] for name in names]
    if all(s.isdigit() for s in suffixes):
        return [name for _, name in sorted(zip(map(int, suffixes), names))]
    return list(names)
