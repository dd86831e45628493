"""The ledger of bugs planted by hand (benchmarks/planted/, `make planted`, docs/mutation.md) stays usable: every
patch says what it is and which tests catch it, those tests exist, and it still applies to the code as it is now
(the ledger would report a stale one as "no longer applies": this says so in `make test`, at the change that
moved the code). The runner's verdicts are checked on patches made here: caught, SURVIVED, no longer applies."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("planted", ROOT / "benchmarks" / "planted.py")
planted = sys.modules.setdefault("planted", importlib.util.module_from_spec(_spec))  # dataclasses look it up
_spec.loader.exec_module(planted)
PATCHES = sorted(planted.PLANTED.glob("*.patch"))


def test_the_ledger_keeps_at_least_ten_bugs():
    assert len(PATCHES) >= 10


@pytest.mark.parametrize("path", PATCHES, ids=lambda p: p.stem)
def test_each_planted_bug_is_described_names_tests_that_exist_and_still_applies(path):
    patch = planted.Patch.read(path)
    assert re.findall(r"^diff --git a/(\S+) b/", path.read_text(), re.M) == [patch.file]
    assert patch.file.startswith("tritonize/")  # product code only: the tests are what is measured
    for node in patch.tests:
        file, _, name = node.partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (ROOT / file).read_text(), re.M), f"{node}: no such test"
    checked = subprocess.run(["git", "apply", "--check", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert checked.returncode == 0, f"{path.name} no longer applies: {checked.stderr}"


def _patch(folder: Path, name: str, old: str, new: str, tests: str) -> None:
    """A planted bug in tritonize/client/stats.py, made as the ledger's are (a git diff with a header)."""
    source = (ROOT / "tritonize/client/stats.py").read_text()
    assert source.count(old) == 1
    a, b = folder / "a", folder / "b"
    for side, text in ((a, source), (b, source.replace(old, new))):
        (side / "tritonize/client").mkdir(parents=True, exist_ok=True)
        (side / "tritonize/client/stats.py").write_text(text)
    diff = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "a/tritonize/client/stats.py", "b/tritonize/client/stats.py"],
                          cwd=folder, capture_output=True, text=True).stdout
    (folder / "patches").mkdir(exist_ok=True)
    (folder / "patches" / f"{name}.patch").write_text(f"# bug: {name}\n# file: tritonize/client/stats.py\n"
                                                      f"# user: -\n# tests: {tests}\n{diff}")


def test_the_runner_plants_each_bug_in_a_scratch_copy_and_says_which_test_caught_it(tmp_path, capsys):
    rank = "rank = max(1, math.ceil(pct / 100 * len(ordered)))"
    units = "tests/client/test_perf_units.py::test_latency_summary_is_in_milliseconds_with_nearest_rank_percentiles"
    _patch(tmp_path, "1-truncated-rank", rank, rank.replace("math.ceil", "int"), units)
    _patch(tmp_path, "2-untested", rank, rank.replace("max(1,", "max(0 + 1,"), units)  # the same code
    _patch(tmp_path, "3-stale", "ordered = sorted(values)", "ordered = sorted(values)  # gone", units)
    (tmp_path / "patches" / "3-stale.patch").write_text(
        (tmp_path / "patches" / "3-stale.patch").read_text().replace("ordered = sorted(values)\n", "ordered = values\n"))
    assert planted.main(["--patches", str(tmp_path / "patches")]) == 1
    lines = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line[:1].isdigit()}
    assert lines["1-truncated-rank"][0] == "caught" and lines["1-truncated-rank"][-1] == units
    assert lines["2-untested"][0] == "SURVIVED"
    assert lines["3-stale"][:3] == ["no", "longer", "applies"]
    assert (ROOT / "tritonize/client/stats.py").read_text().count(rank) == 1  # this checkout never touched
