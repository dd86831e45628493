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
    with pytest.raises(TritonizeError, match="cannot write to output directory .* choose another with --artifacts"):
        ensure_writable_dir(blocker / "out", "--artifacts")


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
