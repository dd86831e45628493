"""STAND-IN for trtexec, for tests only: it is not TensorRT and builds nothing.

It enforces the command-line contract of the real trtexec of the TensorRT version it emulates, as
read in NVIDIA/TensorRT's sources (tests/data/trtexec_options.json names tag, commit and file):
- the banner first, also for --help: `[TensorRT v<N>]`, with ` [b<build>]` from 10.4 on;
- every option is one argv element, `--name=value` or a bare `--flag`; anything that version's
  parser does not take (a removed option, or the value of a `--name value` pair) is
  "Unknown option" and exit 1;
- --memPoolSize (or 8.x's --workspace) is read with that version's unit rule and the result is
  printed as "stand-in workspace limit: <MiB> MiB";
- the ONNX is read from --onnx, the timing cache from/to --timingCacheFile (locked with the file
  `<cache>.lock`, which trtexec creates and never removes: samples/utils/fileLock.cpp in 10.x, FileLock in
  8.6's samples/common/common.h), and the output is
  written only at --saveEngine, the engine inspector's JSON at --exportLayerInfo, all through the container's view of the file system when the docker
  stand-in runs it (STANDIN_MOUNTS).

Without the emulated TensorRT (tests/emulation) the engine file holds bytes labelled as NOT an engine.
With it (TRITONIZE_EMULATED_TENSORRT set), this stand-in does what trtexec does through TensorRT's
library (samples/common/sampleEngines.cpp), on the emulated TensorRT of its own version: it parses the
ONNX, configures the builder from its options (--stronglyTyped drops --fp16/--int8 with trtexec's
warning, sampleOptions.cpp v10.5.0:1231-1245), builds and saves the plan and the timing cache; and with
--loadEngine it deserializes a plan (host code allowed only with --versionCompatible, sampleEngines.cpp
v10.5.0:103-107), runs it once at --shapes on the raw --loadInputs file through the CUDA stand-in, and
writes --exportOutput as trtexec's JSON (sampleReporting.cpp exportJSONOutput; values printed as
std::ostream does, 6 significant digits).

Environment: STANDIN_TRT_VERSION (default 10.5.0.18); STANDIN_MODE ok | fail | crash | hang | stubborn (hangs
and ignores SIGTERM) | empty (exits 0 with an empty engine file) | hang-run (hangs in --loadEngine runs).
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


def emulated_tensorrt(version):
    """The emulated `tensorrt` of this trtexec's version, when the tests run the emulation (else None)."""
    if not os.environ.get("TRITONIZE_EMULATED_TENSORRT"):
        return None
    os.environ["TRITONIZE_EMULATED_TENSORRT"] = version
    import tensorrt

    return tensorrt


class Logger:
    """trtexec's logger: errors and warnings to stderr."""

    def __init__(self, trt):
        class TrtLogger(trt.ILogger):
            def log(self, severity, msg):
                if int(severity) <= int(trt.Logger.WARNING):
                    print(f"[{'E' if int(severity) <= int(trt.Logger.ERROR) else 'W'}] [TRT] {msg}", file=sys.stderr, flush=True)

        self.trt_logger = TrtLogger()


def shapes(value):
    """`name:1x3x224x224` -> (name, (1, 3, 224, 224))"""
    name, _, dims = value.rpartition(":")
    return name, tuple(int(d) for d in dims.split("x"))


SHAPE_OPTIONS = ("--minShapes", "--optShapes", "--maxShapes")


def build_profiles(args):
    """The build's optimization profiles, as sampleOptions.cpp reads them (10.0+ getOptimizationProfiles): each
    `--profile=N` takes the shape options right behind it; shapes without --profile make profile 0, once."""
    profiles, loose, current = {}, [], None
    for arg in args:
        name, _, value = arg.partition("=")
        if name == "--profile":
            current = int(value)
            if current in profiles:
                fail("[E] Optimization profile index cannot be the same.")
            profiles[current] = {}
        elif name in SHAPE_OPTIONS and current is not None and name not in profiles[current]:
            profiles[current][name] = shapes(value)
        else:
            current = None
            if name in SHAPE_OPTIONS:
                loose.append((name, shapes(value)))
    if profiles and loose or len(loose) != len({n for n, _ in loose}):
        fail("[E] Multiple --minShapes/--optShapes/--maxShapes without --profile are not allowed.")
    if not profiles:
        return [dict(loose)] if loose else []
    for index in range(max(profiles) + 1):
        if set(profiles.get(index, {})) != set(SHAPE_OPTIONS):  # (the real one fills missing opt/max from min)
            fail(f"[E] Found invalid or missing shape spec at profile index {index}. ")
    return [profiles[i] for i in range(len(profiles))]


def build_plan(trt, options, onnx, cache):
    """What trtexec does to build (sampleEngines.cpp), through the emulated TensorRT."""
    logger = Logger(trt).trt_logger
    major = int(trt.__version__.split(".")[0])
    builder = trt.Builder(logger)
    flags = 0
    if major < 10:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if "--stronglyTyped" in options and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx)):
        fail("\n".join(f"[E] [TRT] {parser.get_error(i)}" for i in range(parser.num_errors)) + "\n[E] Failed to parse onnx file")
    config = builder.create_builder_config()
    if "--memPoolSize" in options:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mib(options["--memPoolSize"], version_of(trt)) * 2**20))
    if "--noTF32" in options:
        config.clear_flag(trt.BuilderFlag.TF32)
    for flag, name in (("--fp16", "FP16"), ("--int8", "INT8")):
        if flag in options:
            if "--stronglyTyped" in options:  # trtexec 10.x drops it, saying why
                print(f"[W] Invalid usage, setting {flag[2:]} mode is not allowed if graph is strongly typed. "
                      f"Disabling BuilderFlag::k{name}.", file=sys.stderr)
            else:
                config.set_flag(getattr(trt.BuilderFlag, name))
    if options.get("--precisionConstraints") == "obey":
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    if "--layerPrecisions" in options:
        wanted = dict(spec.rsplit(":", 1) for spec in options["--layerPrecisions"].split(","))
        for layer in network:
            if layer.name in wanted:
                layer.precision = {"fp32": trt.float32, "fp16": trt.float16}[wanted.pop(layer.name)]
        for name in wanted:
            print(f"[W] Layer {name} in --layerPrecisions was not found in the network", file=sys.stderr)
    for found in options["profiles"]:
        profile = builder.create_optimization_profile()
        name = found["--minShapes"][0]
        profile.set_shape(name, found["--minShapes"][1], found["--optShapes"][1], found["--maxShapes"][1])
        config.add_optimization_profile(profile)
    verbosity = {"layer_names_only": "LAYER_NAMES_ONLY", "detailed": "DETAILED", "none": "NONE"}
    if "--profilingVerbosity" in options:  # sampleOptions.cpp: layer_names_only | detailed | none
        if options["--profilingVerbosity"] not in verbosity:
            fail(f"[E] Invalid profilingVerbosity: {options['--profilingVerbosity']}")
        config.profiling_verbosity = getattr(trt.ProfilingVerbosity, verbosity[options["--profilingVerbosity"]])
    if "--builderOptimizationLevel" in options:
        config.builder_optimization_level = int(options["--builderOptimizationLevel"])
    if "--versionCompatible" in options:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    if options.get("--hardwareCompatibilityLevel") == "ampere+":
        config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
    timing = config.create_timing_cache(cache.read_bytes() if cache is not None and cache.is_file() else b"")
    if timing is None or not config.set_timing_cache(timing, False):
        print("[W] the timing cache file could not be used; building with an empty one", file=sys.stderr)
        config.set_timing_cache(config.create_timing_cache(b""), False)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        fail("[E] Engine could not be created from network\n[E] Building engine failed")
    if cache is not None:
        cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    if "--exportLayerInfo" in options:  # also with --skipInference (trtexec.cpp v8.6.1:444-450): the built engine's
        export_layer_info(trt, bytes(plan), options["--exportLayerInfo"])
    return bytes(plan)


def export_layer_info(trt, plan, name):
    """sampleReporting.cpp printLayerInfo: IEngineInspector::getEngineInformation(kJSON) of the engine, to the file."""
    path = host_path(name)
    if path is None or not path.parent.is_dir():
        fail(f"[E] stand-in: --exportLayerInfo={name} cannot be written (not mounted)")
    runtime = trt.Runtime(Logger(trt).trt_logger)
    runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(plan)
    path.write_text(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))


def version_of(trt):
    return tuple(int(x) for x in trt.__version__.split("."))


def run_plan(trt, options):
    """trtexec --loadEngine: deserialize, run once at --shapes on --loadInputs, write --exportOutput."""
    import numpy as np

    if trt is None:
        fail("[E] stand-in: --loadEngine needs the emulated TensorRT (tests/emulation)")
    if os.environ.get("STANDIN_MODE") == "hang-run":
        time.sleep(600)
    from tensorrt import _cuda

    plan = host_path(options["--loadEngine"])
    if plan is None or not plan.is_file():
        fail(f"[E] Error opening engine file: {options['--loadEngine']}")
    runtime = trt.Runtime(Logger(trt).trt_logger)
    runtime.engine_host_code_allowed = "--versionCompatible" in options or "--vc" in options
    engine = runtime.deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        fail("[E] Engine deserialization failed")
    context = engine.create_execution_context()
    if "--useProfile" in options and not context.set_optimization_profile_async(int(options["--useProfile"]), 0):
        fail(f"[E] Failed to set optimization profile {options['--useProfile']}")  # sampleInference.cpp
    name, shape = shapes(options["--shapes"])
    if not context.set_input_shape(name, shape):
        fail(f"[E] Could not set the input shape of {name} to {shape}")
    in_name, _, in_file = options["--loadInputs"].rpartition(":")
    data = host_path(in_file).read_bytes()
    expected = int(np.prod(shape)) * 4
    if in_name != name or len(data) != expected:
        fail(f"[E] Dimensions mismatch: {in_file} has {len(data)} bytes, input {name} of shape {shape} needs {expected}")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    buffers = {name: _cuda.DeviceBuffer(len(data))}
    buffers[name].upload(data)
    shapes_out = {n: tuple(context.get_tensor_shape(n)) for n in outputs}
    for n in outputs:
        buffers[n] = _cuda.DeviceBuffer(int(np.prod(shapes_out[n])) * 4)
    try:
        for n, buffer in buffers.items():
            context.set_tensor_address(n, buffer.ptr)
        if not context.execute_async_v3(0):
            fail("[E] Error occurred during inference")
        with open(host_path(options["--exportOutput"]), "w") as f:
            f.write("[\n")
            for i, n in enumerate(outputs):
                values = np.frombuffer(buffers[n].download(buffers[n].nbytes), dtype=np.float32)
                text = ", ".join(format(float(v), ".6g") for v in values)
                f.write(f"{'  ' if i == 0 else ', '}{{ \"name\" : \"{n}\"\n  , \"dimensions\" : \"{'x'.join(map(str, shapes_out[n]))}\"\n"
                        f"  , \"values\" : [ {text} ]\n  }}\n")
            f.write("]\n")
    finally:
        for buffer in buffers.values():
            buffer.free()
    print(f"&&&& PASSED TensorRT.trtexec {banner(version_of(trt))} # trtexec", flush=True)


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
    options["profiles"] = build_profiles(args)
    if "--help" in options or "-h" in options:
        sys.exit(0)
    if "--loadEngine" in options:
        return run_plan(emulated_tensorrt(version), options)
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
    if cache is not None:  # FileLock: fopen(<cache>.lock, "wb+"), lockf; unlocked and closed, never removed
        open(f"{cache}.lock", "wb+").close()
    mode = os.environ.get("STANDIN_MODE", "ok")
    if mode == "fail":
        fail("[E] Error[4]: stand-in parse failure")
    emulated = emulated_tensorrt(version)
    with open(engine, "wb") as f:
        f.write(build_plan(emulated, options, onnx, cache) if emulated else b"STAND-IN BYTES, NOT AN ENGINE")
        f.flush()
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if mode in ("hang", "stubborn"):
            time.sleep(600)
    if mode == "empty":
        engine.write_bytes(b"")
    if cache is not None and not emulated:
        cache.write_bytes(b"STAND-IN TIMING CACHE, NOT TENSORRT DATA")
    print("[I] Engine built in 0.1 sec.", flush=True)
    print(f"&&&& PASSED TensorRT.trtexec {banner(v)} # trtexec {' '.join(args)}", flush=True)


main()
