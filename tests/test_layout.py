"""The house: rooms of a size one can read, floors that import only downwards, and no circle of imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tritonize"
MAX_LINES = 450


def imports(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:from|import) (tritonize(?:\.\w+)*)", path.read_text(), re.M))


def test_no_product_file_is_over_450_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_repository_builder_reaches_no_operating_command():
    """`repo push` lived in the builder's CLI and imported deploy/; it is `deploy push` now."""
    reaching = {str(p.relative_to(PACKAGE)): sorted(i for i in imports(p) if i.startswith("tritonize.deploy"))
                for p in (PACKAGE / "repository_builder").rglob("*.py")}
    assert {k: v for k, v in reaching.items() if v} == {}


def test_monitoring_and_process_helpers_do_not_reach_into_serve():
    """Child-process handling lives at the ground floor (tritonize/processes.py), not in serve/."""
    for path in (PACKAGE / "monitor" / "prometheus.py", PACKAGE / "control" / "models.py"):
        assert not [i for i in imports(path) if i.startswith("tritonize.serve")], path


# The floors, from the ground up. A room (a package of tritonize/, or a module at its top) imports only rooms on
# lower floors; the ground floor's modules import one another without circles. Where a new room stands is a choice:
# make it here.
FLOORS = (
    # what every stage shares: errors, progress, files, the machine, the contracts (spec, manifest, model repository)
    {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", "api", "cli"},
    {"sources"},  # where the model comes from (torchvision, timm, Hugging Face, the user's code): one ModelSpec
    {"tools"},  # external tools tritonize fetches and runs (perf_analyzer)
    {"client", "serve"},  # talking to a Triton, running one: for any repository, neither knowing the other
    {"export"},
    {"convert"},  # `convert cpu`'s speed gate serves both variants and measures them with the client
    {"repository_builder"},
    {"control", "monitor", "pipeline"},  # operating a repository and a server; the stages in order
    {"tune", "deploy"},  # tune loads what it finds through control; deploy bundles monitor's configs
    {"api"},  # the Python API: every stage and command under its CLI name
    {"cli"},  # a thin layer over the API
    {"__main__"},
)


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The tritonize modules `path` imports, wherever the import stands (in a function, under TYPE_CHECKING):
    `from a.b import c` is a.b.c where c is a module, else a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names}
    return {m for m in found if m in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    return {module: imported_modules(path, set(paths)) - {module} for module, path in paths.items()}


def room(module: str) -> str:
    """The package a module is in; a package's `cli` module is the CLI's (a thin layer over the API)."""
    if module.endswith(".cli"):
        return "cli"
    return module.split(".")[1] if "." in module else module


def test_every_import_runs_down_the_floors():
    floor = {name: i for i, rooms in enumerate(FLOORS) for name in rooms}
    graph = import_graph()
    unplaced = {room(m) for m in graph} - set(floor) - {"tritonize"}
    assert not unplaced, f"rooms on no floor: {sorted(unplaced)}; place each in FLOORS"
    upwards = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if b != "tritonize"
                     and floor[room(a)] <= floor[room(b)] and room(a) != room(b) and floor[room(b)] > 0)
    assert not upwards, "imports that run up the floors:\n" + "\n".join(upwards)


def test_no_modules_import_each_other_in_a_circle():
    graph, circles = import_graph(), []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert not circles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in circles)


def _texts(path: Path):
    """(line, text, is_code_literal) of every string constant and comment of a module: docstrings and the parts of
    f-strings are text; a plain string constant outside a docstring is also a code literal."""
    import io
    import tokenize

    source = path.read_text()
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    in_fstring = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value, id(node) not in docstrings and id(node) not in in_fstring
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, False


def test_each_backend_is_named_in_one_place():
    """The Backend records of model_repository.py are the one place that names a classifier, its ensembles and its
    platform: elsewhere in the product no code spells one (they use the record), no text lists several (a list that
    goes stale when a backend is added: derive it), and no table holds Triton backends or platforms side by side."""
    from tritonize.model_repository import BACKENDS, PREPROCESSORS

    names = {}  # word -> the record it names
    for b in BACKENDS.values():
        for word in (b.name, b.platform, *(p.ensemble(b) for p in PREPROCESSORS)):
            names[word] = b.name
    triton = {b.backend for b in BACKENDS.values()} | {b.platform for b in BACKENDS.values()}
    word = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    spelled, listed, tables = [], [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "model_repository.py" and path.parent == PACKAGE:
            continue
        rel = str(path.relative_to(PACKAGE))
        for line, text, literal in _texts(path):
            if literal and text in names:
                spelled.append(f"{rel}:{line}: {text!r}")
            named = {names[w] for w in word.findall(text)}
            if len(named) > 1:
                listed.append(f"{rel}:{line}: {sorted(named)}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                elements = node.keys + node.values if isinstance(node, ast.Dict) else node.elts
                held = {e.value for e in elements if isinstance(e, ast.Constant) and e.value in triton}
                if len(held) > 1:
                    tables.append(f"{rel}:{node.lineno}: {sorted(held)}")
    assert spelled == [], "use the Backend record (model_repository.py) instead of its name:\n" + "\n".join(spelled)
    assert listed == [], "derive these lists from BACKENDS:\n" + "\n".join(listed)
    assert tables == [], "derive these tables from BACKENDS:\n" + "\n".join(tables)
