"""Reviewed copies of generated text (configs, findings) in tests/golden/, compared whole.

Run the tests with TRITONIZE_UPDATE_GOLDEN=1 to rewrite them after an intended change, then review the diff.
Text that differs between runs (hashes, temporary paths) is normalized first.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

DIRECTORY = Path(__file__).with_name("golden")
UPDATE = os.environ.get("TRITONIZE_UPDATE_GOLDEN") == "1"


def normalize(text: str) -> str:
    """Hex digests of 12+ digits (manifest and file hashes change with every export) keep only their length;
    pytest's temporary directories (a pytest-xdist worker's too) and the first layer's weight shape in torch's errors (the suite's classifier,
    `make mutation`'s squeezenet1_1) are left out."""
    text = re.sub(r"(?<=[\s(\"])[0-9a-f]{12,64}\b", lambda m: f"<hex{len(m.group())}>", text)
    text = re.sub(r"/\S*/pytest-of-[^/]+/pytest-\d+/(popen-gw\d+/)?", "<tmp>/", text)  # xdist: a worker's folder
    return re.sub(r"weight of size \[[\d, ]+\]", "weight of size [...]", text)


class Golden:
    """One JSON file of reviewed texts, keyed by test and by call within the test."""

    every: list["Golden"] = []

    def __init__(self, name: str):
        self.path = DIRECTORY / f"{name}.json"
        self.calls: dict[str, int] = {}
        Golden.every.append(self)

    @classmethod
    def new_test(cls) -> None:
        """Count calls afresh (tests/conftest.py calls this before each test: pytest may run a test twice in one
        process, as mutmut does)."""
        for golden in cls.every:
            golden.calls.clear()

    def _key(self) -> str:
        test = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0].split("::", 1)[1]
        self.calls[test] = self.calls.get(test, 0) + 1
        return f"{test} #{self.calls[test]}"

    def check(self, lines: list[str]) -> None:
        key, got = self._key(), [normalize(line) for line in lines]
        stored = json.loads(self.path.read_text()) if self.path.exists() else {}
        if UPDATE:
            stored[key] = got
            DIRECTORY.mkdir(exist_ok=True)
            self.path.write_text(json.dumps(dict(sorted(stored.items())), indent=1, ensure_ascii=False) + "\n")
            return
        assert key in stored, f"no reviewed text for {key} in {self.path}: run with TRITONIZE_UPDATE_GOLDEN=1 and review"
        assert got == stored[key]
