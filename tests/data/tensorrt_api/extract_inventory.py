#!/usr/bin/env python3
"""Inventory of the TensorRT Python API, read from NVIDIA's real `tensorrt*_bindings` wheels.

How: the wheel's pybind11 extension (tensorrt_bindings/tensorrt.so) links libnvinfer/libnvonnxparser/
libnvinfer_plugin (+libnvparsers on 8.x) but, at import, needs only to *resolve* the ~10-15 C entry
points it imports from them (createInferBuilder_INTERNAL, getPluginRegistry, ...). We compile stub
libraries exporting exactly those undefined symbols, each of which prints its name and abort()s if it
is ever called, put them on LD_LIBRARY_PATH and import the module in a child process. Module import
then runs only pybind11's registration code (class/enum/method/property tables, enum values,
docstrings with signatures), all of which lives in the wheel; a TensorRT function that import itself
called would abort the child and the extraction would fail loudly. Nothing is executed beyond
introspection (dir(), __doc__, enum __members__); no object is constructed.

Usage:  extract_inventory.py WHEEL.whl [WHEEL.whl ...] --out DIR
Writes DIR/<wheel-name>-<version>.json. Needs gcc, nm (binutils), readelf and a CPython matching the
wheel's tag (cp311 here).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

NV_LIB = re.compile(r"\[(lib(nvinfer|nvonnxparser|nvparsers|nvinfer_plugin)[^\]]*\.so\.\d+)\]")


def undefined_trt_symbols(so: Path) -> list[str]:
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 2 or parts[0] != "U":
            continue
        name = parts[1].split("@")[0]
        if name.startswith(("Py", "_Py")) or name in ("dlopen", "dlsym", "dlclose", "dlerror"):
            continue
        # libc/libstdc++/libm/libgcc symbols carry a version (GLIBC_, GLIBCXX_, CXXABI_, GCC_)
        if "@" in parts[1]:
            continue
        syms.append(name)
    return sorted(set(syms))


def needed_nv_libs(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in NV_LIB.finditer(out)]


def build_stubs(so: Path, stubdir: Path) -> list[str]:
    syms = undefined_trt_symbols(so)
    src = ["#include <stdio.h>", "#include <stdlib.h>"]
    for i, s in enumerate(syms):
        src.append(f'void stub_{i}(void) __asm__("{s}");')
        src.append(f'void stub_{i}(void) {{ fprintf(stderr, "STUB CALLED: {s}\\n"); abort(); }}')
    c = stubdir / "stubs.c"
    c.write_text("\n".join(src) + "\n")
    libs = needed_nv_libs(so)
    for lib in libs:  # every stub lib exports every symbol: resolution needs only one of them
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stubdir / lib), f"-Wl,-soname,{lib}", str(c)], check=True)
    return syms


CHILD = r'''
import inspect, json, sys
sys.path.insert(0, sys.argv[1])
import tensorrt_bindings as trt
mod = trt  # the package namespace: `import tensorrt` re-exports it (star import + python helpers)

def sig_lines(doc):
    # pybind11 puts "name(self: ..., ...) -> ret" first; overloads as "1. name(...)".
    out = []
    for line in (doc or "").splitlines():
        s = line.strip()
        if s.startswith(tuple(f"{i}. " for i in range(1, 20))):
            s = s.split(". ", 1)[1]
        if "(" in s and ")" in s and "->" in s and not s.startswith(":"):
            out.append(s)
    return out

def is_enum(cls):
    return hasattr(cls, "__members__") and isinstance(getattr(cls, "__members__"), dict)

classes, enums, functions, constants = {}, {}, {}, {}
for name in sorted(dir(mod)):
    if name.startswith("__"):
        continue
    obj = getattr(mod, name)
    if inspect.isclass(obj):
        if is_enum(obj):
            enums[name] = {k: int(v) for k, v in obj.__members__.items()}
            continue
        members = {}
        for attr in sorted(dir(obj)):
            if attr.startswith("__") and attr not in ("__init__", "__call__", "__getitem__", "__len__"):
                continue
            raw = None
            for klass in obj.__mro__:
                if attr in klass.__dict__:
                    raw = klass.__dict__[attr]
                    break
            if raw is None:
                raw = getattr(obj, attr, None)
            if isinstance(raw, property):
                members[attr] = {"kind": "property", "writable": raw.fset is not None,
                                 "doc": (raw.__doc__ or "").strip().splitlines()[:1]}
            elif isinstance(raw, (staticmethod,)) or type(raw).__name__ == "builtin_function_or_method":
                members[attr] = {"kind": "staticmethod", "signatures": sig_lines(getattr(raw, "__doc__", ""))}
            elif callable(raw):
                members[attr] = {"kind": "method", "signatures": sig_lines(getattr(raw, "__doc__", ""))}
            else:
                members[attr] = {"kind": "attribute", "type": type(raw).__name__,
                                 "value": int(raw) if hasattr(raw, "__int__") and type(raw).__name__ in ("int",) else None}
        classes[name] = {"bases": [b.__name__ for b in obj.__bases__], "members": members}
    elif inspect.ismodule(obj):
        continue
    elif callable(obj):
        if inspect.isfunction(obj):  # defined in python (tensorrt_bindings/__init__.py)
            functions[name] = {"python": True, "signatures": [f"{name}{inspect.signature(obj)}"]}
        else:
            functions[name] = {"signatures": sig_lines(getattr(obj, "__doc__", ""))}
    else:
        try:
            constants[name] = {"type": type(obj).__name__, "repr": repr(obj)[:80]}
        except Exception as e:
            constants[name] = {"type": type(obj).__name__, "repr": f"<repr failed: {e}>"}
# Enum-typed members set on classes by the python package (e.g. Logger.WARNING) are classes' attributes.
print(json.dumps({"version": getattr(trt, "__version__", None), "classes": classes, "enums": enums,
                  "functions": functions, "constants": constants}))
'''


def inventory(wheel: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp / "site")
        so = next((tmp / "site").glob("tensorrt_bindings/tensorrt*.so"))
        stubdir = tmp / "stubs"
        stubdir.mkdir()
        syms = build_stubs(so, stubdir)
        env = dict(os.environ, LD_LIBRARY_PATH=str(stubdir))
        done = subprocess.run([sys.executable, "-c", CHILD, str(tmp / "site")], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"import of {wheel.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        data = json.loads(done.stdout)
    dist = wheel.name.split("-")
    return {
        "source": {
            "wheel": wheel.name,
            "distribution": dist[0],
            "version": dist[1],
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "method": "import of the wheel's real pybind11 module against stub libnvinfer/libnvonnxparser/"
                      "libnvinfer_plugin libraries that export only the undefined symbols and abort() if called; "
                      "introspection only (dir, __doc__ signatures, enum __members__)",
            "stubbed_symbols": syms,
            "python": sys.version.split()[0],
        },
        **data,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wheels", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for w in a.wheels:
        inv = inventory(w)
        name = f"{inv['source']['distribution']}-{inv['source']['version']}.json"
        (a.out / name).write_text(json.dumps(inv, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(inv['classes'])} classes, {len(inv['enums'])} enums, {len(inv['functions'])} functions")


if __name__ == "__main__":
    main()
