"""AOTInductor packages (PyTorch 2's `.pt2` archives that torch._inductor.aoti_compile_and_package writes), read as
Triton's pytorch backend reads them: the device a package was compiled for, and the tensor names that backend binds.

Light on purpose (zipfile and json only): the embedded engine's backend imports it in every model instance.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

METADATA_SUFFIX = "wrapper_metadata.json"  # data/aotinductor/<model>/<hash>.wrapper_metadata.json
WRAPPER_SUFFIX = ".wrapper.cpp"
# The call spec as the compiled model returns it (AOTInductorModelContainerGetCallSpec): the pytree specs of its
# inputs and outputs, written into the wrapper's source as raw string literals.
_SPEC = re.compile(r'\b(in|out)_spec_ = R"\((.*?)\)";', re.S)


@contextlib.contextmanager
def inductor_files(parent: Path | None = None) -> Iterator[Path]:
    """Inductor's files, which importing it, compiling or loading a package write (by default into
    /tmp/torchinductor_<user>, where they stay), in a directory of their own under `parent` (default: the system's
    temporary directory), removed afterwards: its cache directory and this process's temporary directory (where
    torch._inductor puts that default when first imported, and the loader unpacks a package) point there meanwhile."""
    scratch = Path(tempfile.mkdtemp(prefix=".inductor-", dir=parent))
    before = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR")}
    temporary, tempfile.tempdir = tempfile.tempdir, str(scratch)
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=str(scratch), TMPDIR=str(scratch))
    try:
        yield scratch
    finally:
        tempfile.tempdir = temporary
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(scratch, ignore_errors=True)


def metadata(path: Path) -> dict:
    """The package's compile metadata: AOTI_DEVICE_KEY ("cpu", "cuda"), AOTI_CPU_ISA, AOTI_COMPUTE_CAPABILITY, ...
    ({} when it has none)."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if "/data/aotinductor/" in name and name.endswith(METADATA_SUFFIX):
                return json.loads(archive.read(name))
    return {}


def device(path: Path) -> str | None:
    return metadata(path).get("AOTI_DEVICE_KEY") or None


def archived_call_spec(path: Path) -> list[str] | None:
    """[in_spec, out_spec] from the wrapper's source in the archive (None when it holds none): what
    `aoti_load_package(path).loader.get_call_spec()` returns, readable where the package cannot load (a GPU
    package on a machine without one)."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if "/data/aotinductor/" in name and name.endswith(WRAPPER_SUFFIX):
                specs = dict(_SPEC.findall(archive.read(name).decode(errors="replace")))
                if "in" in specs and "out" in specs:
                    return [specs["in"], specs["out"]]
    return None


def tensor_names(call_spec: list[str]) -> tuple[list[str], list[str]]:
    """The input and output names Triton's pytorch backend binds for a package with this call spec, from release
    26.05 on (pytorch_backend src/pt2/model_state.cc LoadModel and call_spec.cc get_names): positional inputs
    `ARGS[i]` (a nested tuple adds `[j]`, a dict `[key]`), keyword inputs `KWARGS` + the key as the source binds them
    (its README writes `KWARGS[key]`), and the output `RESULT` when it is one tensor, else `RESULT` + its path. The
    ordinals INPUT__i / OUTPUT__i name the same tensors."""
    inputs, outputs = (json.loads(spec)[1] for spec in call_spec)
    args, kwargs = inputs["children_spec"]
    names = [f"ARGS{n}" for n in _names(args)] + [f"KWARGS{key}" for key in _keys(kwargs)]
    return names, ([f"RESULT{n}" for n in _names(outputs)] if outputs["children_spec"] else ["RESULT"])


def _keys(node: dict) -> list[str]:
    return json.loads(node["context"]) if node.get("context") not in (None, "null") else []


def _names(node: dict) -> list[str]:
    """call_spec::get_names: a leaf has none; a tuple or list `[i]` per child, a dict `[key]`, each followed by the
    child's own names."""
    kind, children = node.get("type"), node.get("children_spec") or []
    if kind in (None, "value.tensor"):
        return []
    labels = [f"[{key}]" for key in _keys(node)] if kind == "builtins.dict" else [f"[{i}]" for i in range(len(children))]
    return [label + inner for label, child in zip(labels, children) for inner in (_names(child) or [""])]
