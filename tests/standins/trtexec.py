"""STAND-IN for trtexec, for tests only: it is not TensorRT and builds nothing.

It enforces the command-line contract of the real trtexec of the TensorRT version it emulates, as
read in NVIDIA/TensorRT's sources (tests/data/trtexec_options.json names tag, commit and file):
- the banner first, also for --help: `[TensorRT v<N>]`, with ` [b<build>]` from 10.4 on;
- every option is one argv element, `--name=value` or a bare `--flag`; anything that version's
  parser does not take (a removed option, or the value of a `--name value` pair) is
  "Unknown option" and exit 1;
- --memPoolSize (or 8.x's --workspace) is read with that version's unit rule and the result is
  printed as "stand-in workspace limit: <MiB> MiB";
- the ONNX is read from --onnx, the timing cache from/to --timingCacheFile, and the output is
  written only at --saveEngine (bytes labelled as NOT an engine), all through the container's view
  of the file system when the docker stand-in runs it (STANDIN_MOUNTS).

Environment: STANDIN_TRT_VERSION (default 10.5.0.18); STANDIN_MODE ok | fail | crash | hang | stubborn (hangs
and ignores SIGTERM) | empty (exits 0 with an empty engine file).
"""

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "trtexec_options.json"
UNITS = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def snapshot(v):
    """The parser the emulated version has: the newest recorded tag not newer than it."""
    if v[0] == 8 and v[:3] >= (8, 6, 0):
        return "8.6.1" if v[:3] <= (8, 6, 1) else "8.6 (release/8.6 head)"
    if v[0] == 10:
        return "10.0.0" if v[:3] == (10, 0, 0) else "10.0.1" if v[:2] == (10, 0) else "10.1.0" if v[:2] < (10, 16) else "10.16"
    if v[0] == 11:
        return "11.0" if v[:2] == (11, 0) else "11.1"
    sys.exit(f"stand-in trtexec: TensorRT {v} is not emulated")


def banner(v):
    if v[0] == 8:
        return f"[TensorRT v{v[0] * 1000 + v[1] * 100 + v[2]}]"
    build = f" [b{v[3]}]" if v[:2] >= (10, 4) and len(v) > 3 else ""
    return f"[TensorRT v{v[0] * 10000 + v[1] * 100 + v[2]}]{build}"


def workspace_mib(value, v):
    """`workspace:<size>` as that version reads it (NVIDIA/TensorRT sampleOptions.cpp, see DATA 'memPoolSize')."""
    for pool in value.split(","):
        name, _, size = pool.partition(":")
        if name != "workspace":
            continue
        number, unit = re.fullmatch(r"([0-9.]+)([BKMG]?)", size).groups()
        if v[0] == 8:  # std::stod ignores the unit letter; the number is MiB
            return float(number)
        if v[:2] == (10, 0):  # the unit is multiplied into bytes, then the number is read as MiB again
            return float(number) * UNITS.get(unit, 1)
        return float(number) * UNITS[unit or "M"] / 2**20  # 10.1+: default unit M, stored in bytes
    return None


def host_path(path):
    """Where a path trtexec opens is on the host (None: it exists only inside the container)."""
    mounts = json.loads(os.environ.get("STANDIN_MOUNTS", "[]"))
    if not mounts or not path.startswith("/"):
        return Path(path)
    for host, inside in sorted(mounts, key=lambda m: -len(m[1])):
        if path == inside or path.startswith(inside.rstrip("/") + "/"):
            return Path(host) / os.path.relpath(path, inside)
    return None


def fail(message):
    print(message, file=sys.stderr, flush=True)  # trtexec's logger: warnings and errors to stderr, the rest to stdout
    sys.exit(1)


def main():
    version = os.environ.get("STANDIN_TRT_VERSION", "10.5.0.18")
    v = tuple(int(x) for x in version.split("."))
    data = json.loads(DATA.read_text())
    accepted = set(data["versions"][snapshot(v)]["accepted"])
    args = sys.argv[1:]
    print(f"&&&& RUNNING TensorRT.trtexec {banner(v)} # trtexec {' '.join(args)}", flush=True)
    options = {}
    for arg in args:
        name, _, value = arg.partition("=")
        if name not in accepted:
            fail(f"Unknown option: {arg} ")
        options[name] = value
    if "--help" in options or "-h" in options:
        sys.exit(0)
    if "--memPoolSize" in options:
        print(f"[I] stand-in workspace limit: {workspace_mib(options['--memPoolSize'], v):g} MiB", flush=True)
    elif "--workspace" in options:  # 8.x only (removed in 10.0): MiB
        print(f"[I] stand-in workspace limit: {float(options['--workspace']):g} MiB", flush=True)
    onnx = host_path(options.get("--onnx", ""))
    if onnx is None or not onnx.is_file():
        fail(f"[E] [TRT] ModelImporter: Failed to open file {options.get('--onnx')}")
    engine = host_path(options.get("--saveEngine", ""))
    if engine is None or not engine.parent.is_dir():
        fail(f"[E] Cannot open engine file: {options.get('--saveEngine')}")
    cache = host_path(options["--timingCacheFile"]) if "--timingCacheFile" in options else None
    if "--timingCacheFile" in options and (cache is None or not cache.parent.is_dir()):
        fail(f"[E] stand-in: timing cache {options['--timingCacheFile']} cannot be written (not mounted)")
    mode = os.environ.get("STANDIN_MODE", "ok")
    if mode == "fail":
        fail("[E] Error[4]: stand-in parse failure")
    with open(engine, "wb") as f:
        f.write(b"STAND-IN BYTES, NOT AN ENGINE")
        f.flush()
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if mode in ("hang", "stubborn"):
            time.sleep(600)
    if mode == "empty":
        engine.write_bytes(b"")
    if cache is not None:
        cache.write_bytes(b"STAND-IN TIMING CACHE, NOT TENSORRT DATA")
    print("[I] Engine built in 0.1 sec.", flush=True)
    print(f"&&&& PASSED TensorRT.trtexec {banner(v)} # trtexec {' '.join(args)}", flush=True)


main()
