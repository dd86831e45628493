"""Atomic publishing by property: any file name (hyphens, dots, unicode, glob characters), leftovers of
dead processes, live ones and our own, and an interrupt at any rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, strategies as st

from tritonize import files

DEAD = 4_194_304 + 17  # above the largest pid the kernel gives (2**22): never a live process
LIVE = 1  # init: alive (another user's: os.kill answers EPERM)
OURS = os.getpid()

names = st.text(st.sampled_from("ab-._1 [*?]é模"), min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))
kinds = st.sampled_from(["tmp-file", "tmp-dir", "old-dir"])
leftovers = st.lists(st.tuples(kinds, st.sampled_from([DEAD, LIVE, OURS])), max_size=4,
                     unique_by=lambda kind_pid: (kind_pid[0][:3], kind_pid[1]))  # one .tmp- per pid


def _leftover(directory: Path, name: str, kind: str, pid: int) -> Path:
    path = directory / f".{name}.{kind[:3]}-{pid}"
    if kind == "tmp-file":
        path.write_text("half-written")
    else:
        path.mkdir()
        (path / "x").write_text("previous" if kind == "old-dir" else "half-written")
    return path


def _tree(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): p.read_text() if p.is_file() else "/"
            for p in sorted(directory.rglob("*"))}


@given(name=names, neighbour=names, left=leftovers, as_dir=st.booleans(), existed=st.booleans())
def test_publish_sweeps_exactly_the_dead_leftovers_of_that_name(name, neighbour, left, as_dir, existed):
    """What is left after a publish: the new `final`, the leftovers of live processes, and everything of other
    names. Our own pid's are an earlier process's (no publish of `final` is under way here): stale as well."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if neighbour == name:
            neighbour = name + "x"
        other = directory / neighbour
        other.write_text("someone else's")
        for kind, pid in [("tmp-file", DEAD), ("old-dir", DEAD), ("tmp-dir", LIVE)]:  # the neighbour's own leftovers
            _leftover(directory, neighbour, kind, pid)
        final = directory / name
        if existed:
            final.mkdir() if as_dir else final.write_text("before")
        made = {kind_pid: _leftover(directory, name, *kind_pid) for kind_pid in left}
        before = _tree(directory)

        with files.atomic_path(final) as stage:
            assert not stage.exists() and stage.parent == directory and str(OURS) in stage.name
            if as_dir:
                stage.mkdir()
                (stage / "x").write_text("new")
            else:
                stage.write_text("new")

        assert (final / "x" if as_dir else final).read_text() == "new"
        expected = {p for (kind, pid), p in made.items() if pid == LIVE}
        mine = {p for p in directory.iterdir() if p.name.startswith(f".{name}.")}
        assert mine == expected
        theirs = lambda tree: {k: v for k, v in tree.items() if k.split("/")[0] == neighbour  # noqa: E731
                               or k.startswith(f".{neighbour}.")}
        assert theirs(_tree(directory)) == theirs(before)


@given(name=names, step=st.integers(0, 1), as_dir=st.booleans(), how=st.sampled_from([KeyboardInterrupt, OSError]))
def test_an_interrupt_at_any_rename_leaves_the_previous_final_whole(name, step, as_dir, how):
    """Interrupted at either rename of a directory's swap (a file has one), `final` is the previous one, whole,
    and nothing of ours is left beside it."""
    step = step if as_dir else 0
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        final = directory / name
        if as_dir:
            final.mkdir()
            (final / "x").write_text("before")
        else:
            final.write_text("before")
        calls = []
        real_replace = os.replace

        def replace(src, dst):
            calls.append((src, dst))
            if len(calls) == step + 1:
                raise how("interrupted")
            real_replace(src, dst)

        with mock.patch.object(files.os, "replace", replace), pytest.raises(how):
            with files.atomic_path(final) as stage:
                if as_dir:
                    stage.mkdir()
                    (stage / "x").write_text("new")
                else:
                    stage.write_text("new")
        assert (final / "x" if as_dir else final).read_text() == "before"
        assert sorted(p.name for p in directory.iterdir()) == [name]


@given(name=names)
def test_replace_tree_round_trips_any_name(name):
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / name
        files.replace_tree(target, {"a.txt": "1", "sub/b.sh": "2"}, ["a.txt", "sub/b.sh"], "a bundle", "--out",
                           executables=["sub/b.sh"])
        files.replace_tree(target, {"a.txt": "3"}, ["a.txt", "sub/b.sh"], "a bundle", "--out")
        assert _tree(target) == {"a.txt": "3"} and sorted(p.name for p in Path(tmp).iterdir()) == [name]
