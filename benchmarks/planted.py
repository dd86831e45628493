"""Plant the bugs kept in benchmarks/planted/ again, one at a time, and see which test catches each.

Each `NN-name.patch` is a `git diff` against the product code with a header of `# key: value` lines before
it: `bug` (what the slip is), `file`, `user` (what it changes for a user) and `tests` (the pytest node ids
expected to catch it, space-separated). For each patch this copies the tracked files of this checkout into a
scratch directory (under $TMPDIR, removed afterwards), applies the patch there and runs only the named tests
with this checkout's venv, the scratch copy first on the import path (checked: `tritonize` must import
from the copy). The verdicts:
- caught: a named test failed (the first one is shown);
- SURVIVED: every named test passed with the bug in place;
- no longer applies: the code changed under the patch (`git apply --check` refuses it): plant it again on
  the new code (edit it in, `git diff > benchmarks/planted/NN-name.patch`, put the header back);
- broken: the tests could not run (a named test no longer exists, a collection error with the bug).
First the named tests run once on the unchanged copy: a test that fails without any bug proves nothing
(verdict `fails without the bug`).

    .venv/bin/python benchmarks/planted.py            # every patch (`make planted`)
    .venv/bin/python benchmarks/planted.py 03 17      # those whose name starts with 03 or 17

Never commit a planted bug into tritonize/: the patches live only here. Exit status 1 unless every patch
was caught.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "benchmarks" / "planted"
PYTHON = sys.executable  # this checkout's venv, as `make planted` runs it
TEST_TIMEOUT_S = 600  # all the named tests of one patch


@dataclass
class Patch:
    path: Path
    bug: str
    file: str
    user: str
    tests: list[str]

    @property
    def name(self) -> str:
        return self.path.stem

    @classmethod
    def read(cls, path: Path) -> "Patch":
        header = {}
        for line in path.read_text().splitlines():
            if line.startswith("diff --git"):
                break
            m = re.fullmatch(r"# (\w+): (.*)", line)
            if m:
                header[m[1]] = f"{header[m[1]]} {m[2]}" if m[1] in header else m[2]  # a key may run over lines
        missing = [k for k in ("bug", "file", "user", "tests") if k not in header]
        if missing:
            raise SystemExit(f"{path.name}: no {', '.join(missing)} line(s) in the header")
        return cls(path, header["bug"], header["file"], header["user"], header["tests"].split())


def scratch_copy(into: Path) -> Path:
    """The tracked files of this checkout, as they are now, copied under `into`."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copy = into / "tree"
    for rel in filter(None, listed.decode().split("\0")):
        source = ROOT / rel
        if source.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / rel)
    return copy


def environment(copy: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    env["GIT_CEILING_DIRECTORIES"] = str(copy.parent)  # `git apply` in the copy must not find this checkout's repo
    return env


def apply(patch: Patch, copy: Path) -> str | None:
    """Apply the patch to the copy; the reason it does not apply, or None."""
    for check in (["--check"], []):
        result = subprocess.run(["git", "apply", *check, str(patch.path)], cwd=copy, env=environment(copy),
                                capture_output=True, text=True)
        if result.returncode:
            return (result.stderr.strip().splitlines() or ["git apply failed"])[0]
    return None


def imported_from(copy: Path) -> None:
    """Refuse to run unless `tritonize` imports from the copy (else the bug would not be the code under test)."""
    where = subprocess.run([str(PYTHON), "-c", "import tritonize; print(tritonize.__file__)"], cwd=copy,
                           env=environment(copy), capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).is_relative_to(copy):
        raise SystemExit(f"tritonize imports from {where}, not from the scratch copy {copy}")


def run_tests(tests: list[str], copy: Path) -> tuple[int, str]:
    """pytest on the named tests in the copy: (exit status, output). Its temporary trees stay in the copy."""
    command = [str(PYTHON), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--basetemp",
               str(copy.parent / "pytest"), *tests]
    try:
        result = subprocess.run(command, cwd=copy, env=environment(copy), capture_output=True, text=True,
                                timeout=TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"the tests ran past {TEST_TIMEOUT_S} s"
    return result.returncode, result.stdout + result.stderr


def first_failure(output: str) -> str:
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return failed[0] if failed else (output.strip().splitlines() or ["?"])[-1]


def verdict(patch: Patch, baseline_failed: set[str]) -> tuple[str, str, float]:
    """(verdict, detail, seconds) for one patch."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tritonize-planted-") as scratch:
        copy = scratch_copy(Path(scratch))
        refused = apply(patch, copy)
        if refused:
            return "no longer applies", refused, time.monotonic() - start
        imported_from(copy)
        code, output = run_tests(patch.tests, copy)
    seconds = time.monotonic() - start
    if baseline_failed & set(patch.tests):
        return "fails without the bug", ", ".join(sorted(baseline_failed & set(patch.tests))), seconds
    if code == 0:
        return "SURVIVED", f"{len(patch.tests)} test(s) passed", seconds
    if code == 1:
        return "caught", first_failure(output), seconds
    return "broken", f"pytest exit {code}: {first_failure(output)}", seconds


def baseline(tests: list[str]) -> set[str]:
    """The named tests that fail with no bug planted (the names given, as the patches list them)."""
    with tempfile.TemporaryDirectory(prefix="tritonize-planted-") as scratch:
        copy = scratch_copy(Path(scratch))
        imported_from(copy)
        command_tests = sorted(set(tests))
        code, output = run_tests(command_tests, copy)
    if code == 0:
        return set()
    failed = set(re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M))
    named = {t for t in command_tests if any(f == t or f.startswith(t + "[") or f.startswith(t + "::") for f in failed)}
    return named or set(command_tests)  # no node named: it did not run at all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="plant only the patches whose names start with these")
    parser.add_argument("--patches", type=Path, default=PLANTED, help="the folder of patches (default: %(default)s)")
    args = parser.parse_args(argv)
    patches = [Patch.read(p) for p in sorted(args.patches.glob("*.patch"))
               if not args.only or any(p.name.startswith(o) for o in args.only)]
    if not patches:
        raise SystemExit(f"no patches in {args.patches} match {args.only}")
    start = time.monotonic()
    print(f"baseline: the {len({t for p in patches for t in p.tests})} named tests without any bug ...", flush=True)
    failing = baseline([t for p in patches for t in p.tests])
    if failing:
        print(f"  fail without any bug: {', '.join(sorted(failing))}")
    results = []
    for patch in patches:
        result = verdict(patch, failing)
        results.append(result)
        print(f"{patch.name:<38} {result[0]:<18} {result[2]:5.0f} s  {result[1]}", flush=True)
    caught = sum(r[0] == "caught" for r in results)
    print(f"{caught} of {len(patches)} planted bugs caught; {time.monotonic() - start:.0f} s wall clock")
    return 0 if caught == len(patches) else 1


if __name__ == "__main__":
    sys.exit(main())
