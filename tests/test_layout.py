"""The house: rooms of a size one can read, and no arrow running back up."""

from __future__ import annotations

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
