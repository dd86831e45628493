"""STAND-IN for the docker CLI, for tests only: no image, no container, no GPU.

It enforces the parts of Docker's documented contract that tritonize relies on (docker/cli
docs/reference/commandline/container_run.md, container_kill.md), and fails where the real engine
would misbehave, not only where it would refuse:
- `docker info --format '{{json .Runtimes}}'`: the runtimes in STANDIN_DOCKER_RUNTIMES.
- `docker run IMAGE true` succeeds (the GPU probe when no runtime is named nvidia).
- `docker run`: a bind-mount source must be an absolute path that exists (docker mounts a relative
  one as an empty named volume, and creates a missing absolute one owned by root); no --entrypoint
  (tritonize keeps the image's own); `--gpus all` (STANDIN_DOCKER_GPU=0: the daemon's error for a
  host without a GPU, exit 125); a trtexec run needs --init (as PID 1 trtexec ignores SIGTERM).
- `-e NAME` passes the client's NAME into the container when it is set (`-e NAME=VALUE`: that value);
  the container sees no other variable of the client's.
- Images nvcr.io/nvidia/tritonserver:YY.MM-py3: /usr/src/tensorrt/bin/trtexec is the trtexec
  stand-in emulating STANDIN_IMAGE_TRT[YY.MM] (a JSON map; none: the entrypoint's exec fails, exit
  127), with the container's view of the mounts; `tritonserver` accepts the options its release has
  (tests/data/tritonserver_options.json), in the forms tritonserver parses (restricted APIs:
  `<apis>:<header>=<value>`, known API names), needs the TLS files it is given to exist in the
  container (tritonserver reads a missing one as empty), and serves nothing, unless STANDIN_DOCKER_SERVE=1:
  then it serves the mounted repository on the published ports (`serve`: the bundled Triton server with
  tritonize's Python-based backends, the tensorrt one on the emulated TensorRT of the release); `sh -c SCRIPT sh ARGS`
  runs in a real shell whose PATH has these `tritonserver`, a `pip` that reads its -r files and, in
  images with one, `trtexec` (all call back into this script as `docker image-tool TOOL ...`, which no
  real docker has), in the container's working directory, with the image's environment: the emulated
  TensorRT and CUDA runtime of the tests when they run it (EMULATION_VARIABLES).
- The container runs outside the client's process group: killing the client leaves it running;
  SIGTERM to the client reaches PID 1, which trtexec ignores (only --init passes it on) and tritonserver
  handles itself; `docker kill NAME` ends it. Running containers are files in STANDIN_DOCKER_STATE
  (name -> pid); `docker inspect --format '{{.State.Pid}}' NAME` gives the pid, as a local engine gives
  the host pid of the container's PID 1.
- STANDIN_DOCKER_SERVE=1: the image's `tritonserver` (run directly or exec'd by a `sh -c` script) serves
  for real. It is the tritonserver 2.51 that tritonize's embedded engine runs, with the same Python-based
  backends standing in for the image's native ones, on the mounted repository and the published ports;
  the options the image's would get from its defaults on a GPU machine and cannot have here are added
  (the backend directory, no GPU metrics, no pinned memory). Given `--*-address=unix:PATH` (all three, no port
  published), it listens on those sockets, PATH a container path in a mounted directory. It execs the real binary, so the container's
  PID 1 is tritonserver itself, as with the image's `exec "$@"`. Its processes are host processes with the
  host's /dev/shm (--ipc=host), as a local engine's are.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
TRTEXEC = "/usr/src/tensorrt/bin/trtexec"
VALUED = {"--name", "--gpus", "--user", "-u", "-v", "--volume", "-w", "--workdir", "-p", "--publish", "--ipc",
          "--entrypoint", "-e", "--env", "--shm-size", "--runtime"}
FLAGS = {"--rm", "--init", "-i", "-t", "-d"}


def die(message, code=125):
    print(f"docker: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def parse_run(args):
    options, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        if name in FLAGS and not eq:
            options[name] = True
        elif name in VALUED:
            if not eq:
                i += 1
                value = args[i]
            options.setdefault(name, []).append(value)
        else:
            die(f"unknown flag: {name}")
        i += 1
    if i == len(args):
        die('"docker run" requires at least 1 argument.')
    return options, args[i], args[i + 1:]


def mounts_of(options):
    mounts = []
    for spec in options.get("-v", []) + options.get("--volume", []):
        source, _, target = spec.partition(":")
        target = target.split(":")[0]
        if not source.startswith("/"):
            die(f"stand-in: -v {spec}: {source!r} is not an absolute path, so Docker would mount an empty named "
                f"volume {source!r} at {target} instead of the host directory")
        if not Path(source).exists():
            die(f"stand-in: -v {spec}: {source} does not exist; Docker would create it, owned by root")
        mounts.append([source, target])
    return mounts


def container_env(options):
    env = {}
    for spec in options.get("-e", []) + options.get("--env", []):
        name, eq, value = spec.partition("=")
        if eq:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
    return env


def in_container(path, mounts):
    """The host path behind a container path, or None when no mount holds it."""
    for source, target in mounts:
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return source + path[len(target):]
    return None


def run(args):
    options, image, command = parse_run(args)
    if "--entrypoint" in options:
        die("stand-in: --entrypoint bypasses the image's entrypoint (tritonize keeps it)")
    if options.get("--gpus") != ["all"] and options.get("--runtime") != ["nvidia"]:
        die(f"stand-in: {image} needs a GPU: pass --gpus all")
    if os.environ.get("STANDIN_DOCKER_GPU", "1") == "0":
        die('Error response from daemon: could not select device driver "" with capabilities: [[gpu]].')
    mounts = mounts_of(options)
    prefix, _, tag = image.rpartition(":")
    if prefix != "nvcr.io/nvidia/tritonserver" or not tag.endswith("-py3"):
        die(f"stand-in: no image {image}")
    release = tag.removesuffix("-py3")
    if not command:
        die("stand-in: no command (the image's default would start a shell)")
    if command == ["true"]:  # every image has it: `docker run --gpus all IMAGE true` probes for the GPU
        return
    serving = os.environ.get("STANDIN_DOCKER_SERVE") == "1"
    if command[0] == "tritonserver" and not serving:
        tritonserver(release, command[1:], mounts)
        return print(f"stand-in tritonserver {release}: options accepted, nothing served")
    trt = json.loads(os.environ.get("STANDIN_IMAGE_TRT", "{}")).get(release)
    runs_trtexec = command[0] == TRTEXEC or (command[:2] == ["sh", "-c"] and "trtexec" in command[2])
    if runs_trtexec and "--init" not in options:
        die("stand-in: trtexec would run as PID 1, which ignores SIGTERM and SIGINT: pass --init")
    workdir = (options.get("-w") or options.get("--workdir") or ["/"])[-1]
    cwd = next((Path(h) / os.path.relpath(workdir, c) for h, c in mounts
                if workdir == c or workdir.startswith(c.rstrip("/") + "/")), None)
    if cwd is None and any(a.startswith("--saveEngine") for a in command):
        die(f"stand-in: -w {workdir} is not a mounted directory: what trtexec writes there is lost with the container")
    name = options.get("--name", [None])[-1]
    if command[0] == "tritonserver" or command[:2] == ["sh", "-c"]:
        env = {**image_environment(), **container_env(options), "STANDIN_RELEASE": release,
               "STANDIN_MOUNTS": json.dumps(mounts), "STANDIN_PUBLISH": json.dumps(published(options))}
        with tempfile.TemporaryDirectory() as tools, tempfile.TemporaryDirectory(prefix="standin-container-") as inside:
            env["PATH"] = f"{image_tools(tools, trt is not None)}:/usr/bin:/bin"
            env["STANDIN_CONTAINER_ROOT"] = inside  # where the image's tritonserver keeps its own files
            return container(name, command, cwd or inside, env, init="--init" in options, forward=not runs_trtexec)
    if command[0] != TRTEXEC:
        die(f"stand-in: {command[0]}: not in the image", 127)
    if trt is None:  # the image's entrypoint ends in `exec "$@"`
        print(f"/opt/nvidia/nvidia_entrypoint.sh: line 67: {TRTEXEC}: No such file or directory", file=sys.stderr)
        sys.exit(127)
    env = {**os.environ, "STANDIN_TRT_VERSION": trt, "STANDIN_MOUNTS": json.dumps(mounts)}
    argv = [sys.executable, os.environ["STANDIN_TRTEXEC"], *command[1:]]
    with tempfile.TemporaryDirectory() as inside:  # without a mounted -w (`trtexec --help`): nothing to keep
        return container(name, argv, cwd or inside, env, init="--init" in options)


# What the emulated image carries besides its tools: the emulated TensorRT and CUDA runtime of the tests
# (tests/emulation), which the image's trtexec and tritonserver backends run on.
EMULATION_VARIABLES = ("TRITONIZE_EMULATED_TENSORRT", "TRITONIZE_EMULATED_CUDART", "TRITONIZE_EMULATED_CUDA_REPORT",
                       "TRITONIZE_EMULATED_GPU_CC", "PYTHONPATH", "LD_LIBRARY_PATH")


def image_environment():
    """The image's own environment (the container sees no other variable of the client's)."""
    keep = EMULATION_VARIABLES + ("STANDIN_TRTEXEC", "STANDIN_IMAGE_TRT", "STANDIN_DOCKER_STATE", "STANDIN_MODE",
                                  "STANDIN_DOCKER_SERVE")
    return {k: os.environ[k] for k in keep if k in os.environ}


def image_tools(directory, has_trtexec):
    """The image's `tritonserver` and `pip` (and `trtexec`, when the release's image has one), as commands
    that call back into this stand-in as `docker image-tool TOOL ...` (no real docker has that)."""
    for tool in ("tritonserver", "pip") + (("trtexec",) if has_trtexec else ()):
        path = Path(directory) / tool
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" image-tool {tool} "$@"\n')
        path.chmod(0o755)
    return directory


def container(name, argv, cwd, env, init, forward=False):
    state = Path(os.environ["STANDIN_DOCKER_STATE"])
    name = name or f"anonymous-{os.getpid()}"
    if (state / name).exists():
        die(f'Error response from daemon: Conflict. The container name "/{name}" is already in use.')
    child = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)  # not the client's process group
    (state / name).write_text(str(child.pid))

    def proxy(sig, _frame):  # docker run proxies signals to PID 1: trtexec ignores them there, tini (--init) passes them on
        if init or forward:
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, proxy)
    signal.signal(signal.SIGINT, proxy)
    code = child.wait()
    (state / name).unlink(missing_ok=True)  # --rm
    sys.exit(code if code >= 0 else 128 - code)


def tritonserver(release, args, mounts):
    known = json.loads((DATA / "tritonserver_options.json").read_text())
    first, apis = known["first_release"], set(known["source"]["restrictable_apis"])
    for arg in args:
        name, _, value = arg.partition("=")
        if name not in first or release < first[name]:
            print(f"Unexpected argument: {arg}", file=sys.stderr)  # tritonserver exits on unknown options
            sys.exit(1)
        if name in ("--grpc-restricted-protocol", "--http-restricted-api"):
            listed, colon, setting = value.partition(":")
            if not colon or "=" not in setting or not setting.partition("=")[0]:
                print(f"{name} option format is '<config name>:<setting>=<value>'. Got {value}", file=sys.stderr)
                sys.exit(1)
            unknown = set(listed.split(",")) - apis
            if unknown:
                print(f"unknown restricted {name[2:6]} '{sorted(unknown)[0]}'", file=sys.stderr)
                sys.exit(1)
        if name in ("--grpc-server-cert", "--grpc-server-key", "--grpc-root-cert"):
            host = in_container(value, mounts)
            if host is None or not Path(host).is_file():
                print(f"stand-in: {name} {value} is not in the container: tritonserver would read it as empty", file=sys.stderr)
                sys.exit(1)


# The bundled tritonserver (2.51) lacks some options of newer releases; what they change (client shared
# memory allowed from 26.04) is what 2.51 does without them.
NEWER_THAN_BUNDLED = ("--allow-client-shm",)


def published(options):
    """-p/--publish: container port -> (host address, host port)."""
    ports = {}
    for spec in options.get("-p", []) + options.get("--publish", []):
        *host, inside = spec.split(":")
        ports[int(inside)] = (host[0] if len(host) == 2 else "0.0.0.0", int(host[-1]))
    return ports


def serve(release, args, mounts):
    """STANDIN_DOCKER_SERVE=1: the image's tritonserver serves the mounted repository on the published ports,
    as the real bundled Triton server of tritonize's embedded engine with its Python-based backends, the
    tensorrt one on the emulated TensorRT of the image's release (STANDIN_IMAGE_TRT). Like Triton's native
    tensorrt backend, it loads a version-compatible plan only with --backend-config=tensorrt,version-compatible=true,
    and a plan its TensorRT cannot deserialize fails the start (tritonserver exits on a model that does not
    load at startup). Instances run as KIND_CPU in a private copy of the repository: Triton core refuses
    KIND_GPU where its own driver sees no GPU, before any backend runs. Execs the real binary."""
    from tritonize.serve.embedded import EXIT_TIMEOUT_S, BundledTriton, assemble_backend_dir, stub_environment

    publish = {int(k): v for k, v in json.loads(os.environ["STANDIN_PUBLISH"]).items()}
    sockets = {name: value.removeprefix("unix:") for name, _, value in (a.partition("=") for a in args)
               if name.endswith("-address") and value.startswith("unix:")}
    if sockets:  # on Unix sockets in a mounted directory: no port to publish
        if publish or len(sockets) != 3:
            die(f"stand-in: tritonserver on Unix sockets publishes no port and puts all three there (got {args})")
        for name, path in sockets.items():
            if in_container(path, mounts) is None:
                die(f"stand-in: {name} {path} is not in a mounted directory: the host cannot reach the socket")
    elif sorted(publish) != [8000, 8001, 8002]:
        die(f"stand-in: publish tritonserver's ports 8000, 8001 and 8002 (got {sorted(publish)})")
    trt = json.loads(os.environ.get("STANDIN_IMAGE_TRT", "{}")).get(release)
    root = Path(os.environ["STANDIN_CONTAINER_ROOT"])
    repository = dict(a.partition("=")[::2] for a in args)["--model-repository"]
    if in_container(repository, mounts) is not None:
        plans = copy_repository(Path(in_container(repository, mounts)), root / "models")
        repository = str(root / "models")
        if trt is not None and plans:
            check_plans(trt, plans, "--backend-config=tensorrt,version-compatible=true" in args)
    triton = BundledTriton.find()
    argv = [str(triton.binary), f"--model-repository={repository}",
            f"--backend-directory={assemble_backend_dir(triton, root / 'backends')}",
            "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0", f"--exit-timeout-secs={EXIT_TIMEOUT_S}"]
    for port, kind in ((8000, "http"), (8001, "grpc"), (8002, "metrics")) if not sockets else ():
        address, host_port = publish[port]
        argv += [f"--{kind}-port={host_port}", f"--{kind}-address={address}"]
    for arg in args:
        name, eq, value = arg.partition("=")
        if name == "--model-repository" or name in NEWER_THAN_BUNDLED:
            continue
        if name in sockets:
            value = "unix:" + in_container(sockets[name], mounts)
        if name in ("--grpc-server-cert", "--grpc-server-key", "--grpc-root-cert"):
            value = in_container(value, mounts)  # checked by `tritonserver`: mounted
        argv.append(f"{name}{eq}{value}")
    env = stub_environment(triton)
    if trt is not None:
        env["TRITONIZE_EMULATED_TENSORRT"] = trt
    os.execve(argv[0], argv, env)


def copy_repository(source, dest):
    """The repository with every instance group on KIND_CPU (files hard-linked); returns its plan files."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    from tritonize.model_repository import parse_config

    plans = []
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.suffix == ".pbtxt":
            config = parse_config(path)
            for group in config.instance_group:
                if group.kind == pb.ModelInstanceGroup.KIND_GPU:
                    group.kind = pb.ModelInstanceGroup.KIND_CPU
            target.write_text(text_format.MessageToString(config))
        else:
            os.link(path, target)
            if path.suffix == ".plan":
                plans.append(target)
    return plans


def check_plans(trt_version, plans, host_code):
    """What Triton's native tensorrt backend does first with each plan, with the image's TensorRT."""
    os.environ["TRITONIZE_EMULATED_TENSORRT"] = trt_version
    import tensorrt

    errors = []

    class Logger(tensorrt.ILogger):
        def log(self, severity, msg):
            errors.append(msg)

    for plan in plans:
        runtime = tensorrt.Runtime(Logger())
        runtime.engine_host_code_allowed = host_code
        if runtime.deserialize_cuda_engine(plan.read_bytes()) is None:
            model = plan.parent.parent.name
            print(f"E0000 model_lifecycle.cc] failed to load '{model}' version 1: Internal: unable to load plan file: "
                  f"{errors[-1] if errors else 'deserialization failed'}", file=sys.stderr, flush=True)
            print("error: creating server: Internal - failed to load all models", file=sys.stderr, flush=True)
            sys.exit(1)


def image_tool(args):
    """A tool inside the stand-in image, run by a `sh -c` container."""
    release, mounts = os.environ["STANDIN_RELEASE"], json.loads(os.environ["STANDIN_MOUNTS"])
    if args[0] == "tritonserver":
        tritonserver(release, args[1:], mounts)
        if os.environ.get("STANDIN_DOCKER_SERVE") == "1":
            return serve(release, args[1:], mounts)
        return print(f"stand-in tritonserver {release}: options accepted, nothing served")
    if args[0] == "trtexec":
        trt = json.loads(os.environ["STANDIN_IMAGE_TRT"])[release]
        os.execve(sys.executable, [sys.executable, os.environ["STANDIN_TRTEXEC"], *args[1:]],
                  {**os.environ, "STANDIN_TRT_VERSION": trt})
    files = [args[i + 1] for i, a in enumerate(args) if a == "-r"]  # pip install ... -r FILE ...
    for file in files:
        if in_container(file, mounts) is None or not Path(in_container(file, mounts)).is_file():
            print(f"ERROR: Could not open requirements file: [Errno 2] No such file or directory: '{file}'", file=sys.stderr)
            sys.exit(1)
    print(f"stand-in pip: would install from {', '.join(files)}")


def kill(args):
    state = Path(os.environ["STANDIN_DOCKER_STATE"])
    for name in args:
        try:
            os.kill(int((state / name).read_text()), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            die(f"Error response from daemon: No such container: {name}", 1)
        print(name)


def inspect(args):
    formats = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--format", "-f")]
    names = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in ("--format", "-f"))]
    if formats != ["{{.State.Pid}}"]:
        die(f"stand-in: inspect --format {formats}: only {{{{.State.Pid}}}} is emulated")
    for name in names:
        try:
            print((Path(os.environ["STANDIN_DOCKER_STATE"]) / name).read_text())
        except FileNotFoundError:
            die(f"Error: No such object: {name}", 1)


def info(args):
    runtimes = os.environ.get("STANDIN_DOCKER_RUNTIMES", '{"nvidia": {}, "runc": {}}')
    print(runtimes if "--format" in " ".join(args) else f"Runtimes: {' '.join(json.loads(runtimes))}")


commands = {"run": run, "kill": kill, "inspect": inspect, "info": info, "image-tool": image_tool}
if len(sys.argv) < 2 or sys.argv[1] not in commands:
    die(f"stand-in: {' '.join(sys.argv[1:2])} is not emulated")
commands[sys.argv[1]](sys.argv[2:])
