"""EMULATION of NVIDIA's `tensorrt` Python package, for tritonize's tests only. It is not TensorRT: it
builds nothing for a GPU and runs plans with onnxruntime on the CPU.

It loads only where the test environment asks for it: TRITONIZE_EMULATED_TENSORRT names the TensorRT
version to emulate (tests/emulation sets it, with this directory on PYTHONPATH). Anywhere else
`import tensorrt` fails here, so nothing outside the tests can mistake it for TensorRT.

Every public name is gated by the real bindings inventory of that version (tests/data/tensorrt_api/):
a name the version lacks is an AttributeError (`hasattr` is False), a name it has that is not emulated
is a NotImplementedError, and properties are read-only or writable as the inventory says. What it
enforces, and the NVIDIA source of each rule, is in tests/data/tensorrt_emulation_rules.json; what a
plan is, in tests/standins/README.md.
"""

import os as _os

ENV = "TRITONIZE_EMULATED_TENSORRT"

if not _os.environ.get(ENV):
    raise ImportError(
        "this `tensorrt` is tritonize's test emulation (tests/standins/emulated), not NVIDIA TensorRT: it loads "
        f"only in tritonize's tests, which set {ENV}=<TensorRT version>"
    )

from . import _api  # noqa: E402

__version__ = _api.VERSION


def __getattr__(name):
    return _api.lookup(name)


def __dir__():
    return _api.names()
