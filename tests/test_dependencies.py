"""Every package the code and the tests import is one that pyproject.toml asks for, directly or through what it asks
for: a clean venv (CI's) has nothing else. A venv grown over many sessions hides a requirement that went missing."""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.pyproject import tomllib

ROOT = Path(__file__).resolve().parent.parent

# Imported, never installed by pyproject.toml: where each comes from.
NOT_OURS = {
    "tritonize": "this project", "tests": "this project", "common": "benchmarks/common.py",
    "tensorrt": "a GPU box's release pins (`convert releases`); here the emulation in tests/standins",
    "torch_tensorrt": "a GPU box's release pins; here the emulation in tests/standins",
    "modelopt": "optional, for INT8 calibration on a GPU box",
    "triton_python_backend_utils": "Triton's Python backend, inside the server",
}


def _imported() -> dict[str, Path]:
    """Top-level module name -> a file importing it, for every absolute import outside the standard library."""
    found: dict[str, Path] = {}
    for folder in ("tritonize", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.partition(".")[0]
                    if top not in sys.stdlib_module_names and (ROOT / folder / f"{top}.py") != path:
                        found.setdefault(top, path.relative_to(ROOT))
    return found


def _required(pyproject: str, extras: tuple[str, ...] = ("dev",)) -> set[str]:
    """The distributions a pyproject.toml's dependencies and `extras` bring, with everything they require in turn."""
    project = tomllib.loads(pyproject)["project"]
    pending = [Requirement(r) for r in project["dependencies"]]
    pending += [Requirement(r) for extra in extras for r in project["optional-dependencies"][extra]]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # not for this Python (tomli below 3.11): required, and not installed here
        for text in md.requires(requirement.name) or []:
            needed = Requirement(text)
            wanted = [""] + sorted(requirement.extras)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in wanted):
                pending.append(needed)
    return seen


def test_every_imported_package_is_required_by_pyproject():
    required = _required((ROOT / "pyproject.toml").read_text())
    distributions = md.packages_distributions()
    missing = {}
    for module, path in _imported().items():
        if module in NOT_OURS or (ROOT / "tests" / module).is_dir() or (ROOT / "benchmarks" / f"{module}.py").is_file():
            continue
        names = distributions.get(module) or ([module] if canonicalize_name(module) in required else None)
        assert names, f"{module} (imported by {path}) is not installed, and not listed in NOT_OURS"
        if not {canonicalize_name(n) for n in names} & required:
            missing[module] = str(path)
    assert missing == {}, f"imported but not required by pyproject.toml (nor by what it requires): {missing}"


def test_the_check_sees_a_requirement_that_went_missing():
    """c892129 lost kubernetes-validate and jsonschema to a comment written before them on their line: CI could not
    import jsonschema. The same loss, made here, is seen."""
    text = (ROOT / "pyproject.toml").read_text()
    line = '"kubernetes-validate>=1.37", "jsonschema>=4.23",'
    assert line in text and {"jsonschema", "kubernetes-validate"} <= _required(text)
    assert not {"jsonschema", "kubernetes-validate"} & _required(text.replace(line, ""))
