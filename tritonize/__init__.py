"""tritonize: a PyTorch image classifier to a served, verified Triton model repository.

From Python, each stage under its command's name (tritonize.api): `export`, `build`, `convert_trt`, `repo_build`,
`repo_check`, `serve`, `client_classify`, `client_compare`; `Preprocessing` is the preprocessing contract and
`TritonizeError` what a failure raises. They are imported when first used: the commands start fast, and the
repository's preprocessing models, which carry a copy of this file, load it where tritonize is not installed.
"""

import importlib
import sys
import types

_API = ("export", "build", "convert_trt", "repo_build", "repo_check", "serve", "client_classify", "client_compare")
_PACKAGES = ("export", "serve")  # also subpackages: `tritonize.export` is the package, called as the function
_TYPES = {"Preprocessing": "tritonize.preprocessing", "TritonizeError": "tritonize.errors"}
__all__ = [*_API, *_TYPES]


class _CallablePackage(types.ModuleType):
    """A subpackage that is also the API function of its name. Python sets `tritonize.export` to the subpackage
    whenever it is imported, so the function cannot be that attribute; the package calls it instead."""

    def __call__(self, *args, **kwargs):
        api = importlib.import_module("tritonize.api")
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _callable_package(name: str) -> None:
    sys.modules[name].__class__ = _CallablePackage


def __getattr__(name: str):
    if name in _PACKAGES:
        return importlib.import_module(f"tritonize.{name}")
    if name in _API:
        return getattr(importlib.import_module("tritonize.api"), name)
    if name in _TYPES:
        return getattr(importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'tritonize' has no attribute {name!r}")
