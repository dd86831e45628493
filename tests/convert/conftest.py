"""Fixtures for the convert stage: real photos for calibration, and a stand-in for trtexec."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def photo_dir(tmp_path_factory) -> Path:
    """14 real-looking images: crops and mirror images of matplotlib's bundled Grace Hopper photo."""
    import matplotlib.cbook as cbook
    from PIL import Image, ImageOps

    out = tmp_path_factory.mktemp("photos")
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = Image.open(f).convert("RGB")
    w, h = photo.size
    boxes = [(0, 0, 1.0), (0, 0, 0.6), (0.4, 0, 0.6), (0, 0.4, 0.6), (0.4, 0.4, 0.6), (0.2, 0.2, 0.5), (0.1, 0.3, 0.7)]
    n = 0
    for left, top, size in boxes:
        crop = photo.crop((int(left * w), int(top * h), int((left + size) * w), int((top + size) * h)))
        for image in (crop, ImageOps.mirror(crop)):
            image.save(out / f"photo_{n:02d}.jpg")
            n += 1
    return out


STAND_IN = '''\
#!{python}
"""STAND-IN for trtexec, written by the convert tests. It is not TensorRT: it only behaves like
trtexec's process (banner, exit codes, output file) so the subprocess handling can be tested.
Behaviour from $STANDIN_MODE: ok | fail | crash | hang."""
import os, signal, sys, time
print("&&&& RUNNING TensorRT.trtexec [TensorRT v100500] # trtexec " + " ".join(sys.argv[1:]), flush=True)
if "--help" in sys.argv:
    sys.exit(0)
mode = os.environ.get("STANDIN_MODE", "ok")
engine = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--saveEngine="))
if mode == "fail":
    print("[E] Error[4]: stand-in parse failure", flush=True)
    sys.exit(1)
with open(engine, "wb") as f:
    f.write(b"STAND-IN BYTES, NOT AN ENGINE")
    f.flush()
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        time.sleep(600)
print("[I] Engine built in 0.1 sec.", flush=True)
'''


@pytest.fixture
def standin_trtexec(tmp_path) -> Path:
    """A stand-in executable named trtexec (see STAND_IN): never a real TensorRT build."""
    path = tmp_path / "bin" / "trtexec"
    path.parent.mkdir()
    path.write_text(STAND_IN.format(python=sys.executable))
    path.chmod(0o755)
    return path
