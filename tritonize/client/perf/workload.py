"""What every request of one model carries, in the gRPC message or in system shared memory."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import numpy as np

from tritonize.client.connection import Connection, ModelInfo, refused, short_reason
from tritonize.client.perf.results import PerfOptions
from tritonize.errors import TritonizeError
from tritonize.images import load_images
from tritonize.progress import say

_REGION_IDS = itertools.count()


class Workload:
    """What every request of one model carries: `batch` in the form the model takes, in the gRPC message or
    in system shared memory."""

    def __init__(self, info: ModelInfo, batch: np.ndarray, shared_memory: bool, model: str | None = None):
        from tritonclient.utils import serialize_byte_tensor

        self.info, self.batch, self.shared_memory = info, batch, shared_memory
        self.model = model or info.name  # the name asked for; `info` is what the requests go to
        # BYTES travel as a 4-byte length and the bytes of each element.
        self.raw = serialize_byte_tensor(batch).item() if batch.dtype == np.object_ else batch.tobytes()
        self.in_bytes = len(self.raw)
        self.out_shape = (len(batch), info.num_classes)
        self.out_bytes = int(np.prod(self.out_shape)) * 4

    @property
    def transport(self) -> str:
        return "system shared memory" if self.shared_memory else "grpc"

    @property
    def tensor_bytes_on_wire(self) -> int:
        return 0 if self.shared_memory else self.in_bytes + self.out_bytes

    def serialized(self, regions: "SharedMemoryRegions | None" = None, slot: int = 0) -> bytes:
        """The ModelInferRequest as gRPC sends it, built once: data inline, or the shared memory regions of `slot`."""
        from tritonclient.grpc import service_pb2

        info = self.info
        request = service_pb2.ModelInferRequest(model_name=info.name)
        tensor = request.inputs.add(name=info.input_name, datatype=info.input_dtype)
        tensor.shape.extend(self.batch.shape if info.batch_axis else self.batch.shape[1:])
        output = request.outputs.add(name=info.output_name)
        if regions is None:
            request.raw_input_contents.append(self.raw)
        else:
            for target, (region, size) in ((tensor, regions.input), (output, regions.output(slot))):
                target.parameters["shared_memory_region"].string_param = region
                target.parameters["shared_memory_byte_size"].int64_param = size
        return request.SerializeToString()


class SharedMemoryRegions:
    """System shared memory for the built-in load generator: one read-only input region, one output region per worker."""

    def __init__(self, connection: Connection, workload: Workload, slots: int):
        import tritonclient.utils.shared_memory as shm

        self.connection, self.handles = connection, []
        # Unique per run: a region the server still holds from an earlier run never collides.
        tag = f"tritonize_{os.getpid()}_{next(_REGION_IDS)}_{workload.info.name}"
        self.specs = [(f"{tag}_in", workload.in_bytes)] + [(f"{tag}_out{i}", workload.out_bytes) for i in range(slots)]
        try:
            for name, size in self.specs:
                self.handles.append((name, shm.create_shared_memory_region(name, f"/{name}", size)))
                connection.client.register_system_shared_memory(name, f"/{name}", size, headers=connection.control_headers)
            shm.set_shared_memory_region(self.handles[0][1], [np.frombuffer(workload.raw, np.uint8)])
        except Exception as e:  # noqa: BLE001 - tritonclient's and the OS's errors: one line for the user
            self.close()
            problem = refused(connection.url, e, "shared-memory registration", connection.key is not None)
            raise problem or TritonizeError(
                f"cannot set up system shared memory with the server at {connection.url} ({short_reason(e)}); "
                "it needs a server on this machine sharing /dev/shm, or run without --shared-memory") from None

    @property
    def input(self) -> tuple[str, int]:
        return self.specs[0]

    def output(self, slot: int) -> tuple[str, int]:
        return self.specs[1 + slot]

    def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        for name, handle in self.handles:
            self._unregister(name)
            shm.destroy_shared_memory_region(handle)
        self.handles.clear()

    def _unregister(self, name: str, patience: float = 5.0) -> None:
        """Unregister a region, waiting while the server still holds it for a just-finished response."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self.connection.client.unregister_system_shared_memory(name, client_timeout=self.connection.timeout,
                                                                       headers=self.connection.control_headers)
                return
            except Exception as e:  # noqa: BLE001 - retried until the deadline; a server that is gone ends it
                gone = "UNAVAILABLE" in str(getattr(e, "status", lambda: "")())
                if gone or time.monotonic() > deadline:
                    if not gone:
                        say(f"warning: could not unregister shared memory region {name} ({short_reason(e)})")
                    return
                time.sleep(0.05)



def request_batch(info: ModelInfo, options: PerfOptions) -> np.ndarray:
    """`options.batch` copies of the image, in the form the model takes."""
    if options.image is None:
        from matplotlib import cbook

        image = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    else:
        image = Path(options.image)
    loaded = load_images([image], info.preprocess, form=info.form)
    if loaded.failures:
        raise TritonizeError(f"--image {loaded.failures[0]}")
    return np.stack(loaded.arrays * options.batch)
