"""files.py: atomic publishing of files and directories."""

from __future__ import annotations

import pytest

from tritonize.errors import TritonizeError
from tritonize.files import atomic_path, ensure_writable_dir, sha256_file


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_a_file_appears_only_when_the_block_succeeds(tmp_path):
    final = tmp_path / "model.onnx"
    with atomic_path(final) as tmp:
        tmp.write_text("new")
        assert not final.exists() and tmp.parent == tmp_path
    assert final.read_text() == "new" and _names(tmp_path) == ["model.onnx"]


@pytest.mark.parametrize("failure", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failure_or_interrupt_keeps_the_previous_file(tmp_path, failure):
    final = tmp_path / "model.onnx"
    final.write_text("old")
    with pytest.raises(type(failure)):
        with atomic_path(final) as tmp:
            tmp.write_text("half-written")
            raise failure
    assert final.read_text() == "old" and _names(tmp_path) == ["model.onnx"]


def test_a_directory_is_swapped_whole(tmp_path):
    final = tmp_path / "models"
    final.mkdir()
    (final / "old_model").mkdir()
    with atomic_path(final) as tmp:
        tmp.mkdir()
        (tmp / "new_model").mkdir()
    assert _names(final) == ["new_model"] and _names(tmp_path) == ["models"]


def test_unwritable_directory_names_the_option(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(TritonizeError, match=f"^cannot write to output directory {blocker}/out: Not a directory; "
                                             "choose another with --artifacts$"):
        ensure_writable_dir(blocker / "out", "--artifacts")
    nested = ensure_writable_dir(tmp_path / "new" / "deeper", "--artifacts")  # parents are created
    assert nested.is_dir() and list(nested.iterdir()) == []  # and the write probe removed


def test_sha256_of_a_known_content(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"abc")
    assert sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_temporaries_of_killed_processes_are_removed_others_kept(tmp_path):
    import os
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    final = tmp_path / "model.onnx"
    for pid in (dead.pid, os.getppid()):  # a process that is gone, and one that lives (it may be writing)
        (tmp_path / f".model.onnx.tmp-{pid}").write_text("left behind")
    with atomic_path(final) as tmp:
        tmp.write_text("new")
    assert _names(tmp_path) == [f".model.onnx.tmp-{os.getppid()}", "model.onnx"]


# ------------------------------------------------------------------ killed or interrupted at each step

PUBLISH = """
import sys
from pathlib import Path
from tritonize.files import atomic_path

final, kind = Path(sys.argv[2]), sys.argv[3]
with atomic_path(final) as tmp:
    if kind == "dir":
        tmp.mkdir()
        (tmp / "content").write_text("new")
    else:
        tmp.write_text("new")
"""


def _content(final):
    if not final.exists():
        return None
    return (final / "content").read_text() if final.is_dir() else final.read_text()


# (kind, before|after, rename): what `final` holds right after the child ended, killed or interrupted. A
# directory is swapped in with two renames (final -> .old-PID, then .tmp-PID -> final).
STEPS = [
    ("file", "before", 1, "old", "old"),  # written, not yet renamed
    ("file", "after", 1, "new", "new"),  # renamed into place
    ("dir", "before", 1, "old", "old"),
    ("dir", "after", 1, None, "old"),  # the previous one moved aside: killed there, nothing is at final
    ("dir", "after", 2, "new", "new"),  # the new one in place, the previous one not yet removed
]


@pytest.mark.parametrize("kind, when, rename, killed, interrupted", STEPS)
@pytest.mark.parametrize("how", ["kill", "ctrl-c"])
def test_killed_or_interrupted_at_each_step_of_a_publish(tmp_path, kind, when, rename, killed, interrupted, how):
    """A real child process stopped at the step, then `kill -9` or Ctrl-C: an interrupt leaves the previous
    or the new version and nothing else; a kill may leave its temporaries (its pid in their names), and the
    next publish of the same path removes them, putting a previous directory moved aside back in place."""
    from tests.interrupt import stop_at_rename

    final = tmp_path / "published"
    if kind == "dir":
        final.mkdir()
        (final / "content").write_text("old")
    else:
        final.write_text("old")
    status = stop_at_rename(tmp_path, when, rename, how, "-c", PUBLISH, final, kind)
    assert status == (-9 if how == "kill" else -2)  # -2: the KeyboardInterrupt ended it, as Ctrl-C does
    if how == "ctrl-c":
        assert _content(final) == interrupted and _names(tmp_path) == ["published"]
        return
    assert _content(final) == killed
    assert all(name.startswith(".published.") for name in _names(tmp_path) if name != "published")
    with pytest.raises(RuntimeError):  # the next publish fails: still, what the killed one left is cleared
        with atomic_path(final) as tmp:
            tmp.write_text("never published")
            raise RuntimeError("boom")
    assert _content(final) == interrupted and _names(tmp_path) == ["published"]


def test_an_interrupted_directory_swap_puts_the_previous_one_back(tmp_path):
    """The second rename of a swap fails (nothing at the temporary path): the previous directory goes back."""
    final = tmp_path / "models"
    final.mkdir()
    (final / "old_model").mkdir()
    with pytest.raises(FileNotFoundError):
        with atomic_path(final):
            pass  # no directory at the temporary path: the second rename fails
    assert _names(final) == ["old_model"] and _names(tmp_path) == ["models"]


def test_replace_tree_swaps_a_whole_bundle_and_refuses_someone_elses_directory(tmp_path):
    import stat

    from tritonize.files import replace_tree

    bundle = tmp_path / "out" / "deeper" / "bundle"  # parents that do not exist yet, two levels of them
    known = ["a.yaml", "sub/run.sh", "sub/deep/b.txt", "old.yaml"]
    written = replace_tree(bundle, {"sub/deep/b.txt": "b", "a.yaml": "one", "sub/run.sh": "#!/bin/sh\n"}, known,
                           "a monitoring bundle", "--output-dir", executables=["sub/run.sh"])
    assert written == [bundle / "sub" / "deep" / "b.txt", bundle / "a.yaml", bundle / "sub" / "run.sh"]
    assert (bundle / "a.yaml").read_text() == "one" and (bundle / "sub" / "deep" / "b.txt").read_text() == "b"
    assert stat.S_IMODE((bundle / "sub" / "run.sh").stat().st_mode) == 0o755
    assert not stat.S_IMODE((bundle / "a.yaml").stat().st_mode) & stat.S_IXUSR
    (bundle / "old.yaml").write_text("a file an earlier version wrote")
    replace_tree(bundle, {"a.yaml": "two"}, known, "a monitoring bundle", "--output-dir")
    assert sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()) == ["a.yaml"]
    assert (bundle / "a.yaml").read_text() == "two"
    for name in ("mine.txt", "z.txt", "notes.md", "b.txt"):
        (bundle / name).write_text("the user's")
    with pytest.raises(TritonizeError, match=r"bundle exists and holds files that are not a monitoring bundle "
                                             r"\(b.txt, mine.txt, notes.md\); choose another --output-dir or remove it$"):
        replace_tree(bundle, {"a.yaml": "three"}, ["a.yaml"], "a monitoring bundle", "--output-dir")
    assert (bundle / "a.yaml").read_text() == "two" and (bundle / "mine.txt").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(TritonizeError, match=r"file exists and holds files that are not a bundle \(not a directory\)"):
        replace_tree(tmp_path / "file", {"a.yaml": "x"}, ["a.yaml"], "a bundle", "--output-dir")
