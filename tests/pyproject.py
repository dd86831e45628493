"""pyproject.toml as the tests read it: tomllib from Python 3.11, the tomli backport (the dev extra's) on 3.10,
which requires-python admits."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PATH = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pyproject() -> dict:
    return tomllib.loads(PATH.read_text())
