"""The lowest Python that requires-python admits runs the product, its tests, benchmarks and dev/ (Build 2 of issue 41).
No such interpreter runs here, so the check is static: vermin reads each file's syntax and standard-library use
against its table of the version each appeared in, annotations as evaluated (typer and dataclasses evaluate them).
`make test` runs this file first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from packaging.specifiers import SpecifierSet

from tests.pyproject import pyproject

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("tritonize", "tests", "benchmarks", "dev")
VERMIN = str(Path(sys.executable).parent / "vermin")  # the dev extra's (it has no `python -m vermin`)


def lowest_python() -> str:
    """The lowest 3.x minor that requires-python admits."""
    admitted = SpecifierSet(pyproject()["project"]["requires-python"])
    return next(f"3.{minor}" for minor in range(6, 20) if f"3.{minor}.0" in admitted)


def test_n35_the_lowest_python_requires_python_admits_runs_the_code():
    """N35: requires-python says >=3.10 (Ubuntu 22.04's Python), but tests/test_gpu_install.py and
    tests/test_dependencies.py imported tomllib, new in 3.11: on 3.10 the suite did not collect, and
    gpu_acceptance.sh reported `gpu-tests | FAIL (exit 2)`. Nothing checked the lowest declared Python."""
    floor = lowest_python()
    done = subprocess.run([VERMIN, "--no-tips", "--eval-annotations", "--violations", "-q",
                           f"--target={floor}-", *FOLDERS], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and not done.stdout.strip(), (
        f"requires-python admits Python {floor}, which cannot run:\n{done.stdout}{done.stderr}")


def test_the_check_sees_a_module_newer_than_the_floor(tmp_path):
    """The same vermin call finds what N35 was: `import tomllib` under a 3.10 floor."""
    (tmp_path / "uses_tomllib.py").write_text("import tomllib\n")
    done = subprocess.run([VERMIN, "--no-tips", "--eval-annotations", "--violations", "-q",
                           "--target=3.10-", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "'tomllib' module requires !2, 3.11" in done.stdout
