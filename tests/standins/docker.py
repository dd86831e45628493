"""STAND-IN for the docker CLI, for tests only: no image, no container, no GPU.

It enforces the parts of Docker's documented contract that tritonize relies on (docker/cli
docs/reference/commandline/container_run.md, container_kill.md), and fails where the real engine
would misbehave, not only where it would refuse:
- `docker info --format '{{json .Runtimes}}'`: the runtimes in STANDIN_DOCKER_RUNTIMES.
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
  container (tritonserver reads a missing one as empty), and serves nothing; `sh -c SCRIPT sh ARGS`
  runs in a real shell whose PATH has these `tritonserver` and a `pip` that reads its -r files
  (both call back into this script as `docker image-tool TOOL ...`, which no real docker has).
- The container runs outside the client's process group: killing the client leaves it running;
  SIGTERM to the client reaches it only through --init, or when its PID 1 handles the signal itself
  (tritonserver does); `docker kill NAME` ends it. Running containers are files in STANDIN_DOCKER_STATE
  (name -> pid); `docker inspect --format '{{.State.Pid}}' NAME` gives the pid, as a local engine gives
  the host pid of the container's PID 1.
- STANDIN_DOCKER_SERVE=1: the image's `tritonserver` serves for real. It is the tritonserver 2.51 that
  tritonize's embedded engine runs, with the same Python-based backends standing in for the image's native
  ones, on the mounted repository and the published ports; the options the image's would get from its
  defaults on a GPU machine and cannot have here are added (the backend directory, no GPU metrics, no
  pinned memory). Its processes are host processes with the host's /dev/shm (--ipc=host), as a local
  engine's are.
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
    if os.environ.get("STANDIN_DOCKER_SERVE") == "1" and (command[0] == "tritonserver" or command[:2] == ["sh", "-c"]):
        return serving_container(options, release, command, mounts)
    if command[0] == "tritonserver":
        return tritonserver(release, command[1:], mounts)
    if command[:2] == ["sh", "-c"]:
        return shell(release, command[1:], mounts, container_env(options))
    if command[0] != TRTEXEC:
        die(f"stand-in: {command[0]}: not in the image", 127)
    trt = json.loads(os.environ.get("STANDIN_IMAGE_TRT", "{}")).get(release)
    if trt is None:  # the image's entrypoint ends in `exec "$@"`
        print(f"/opt/nvidia/nvidia_entrypoint.sh: line 67: {TRTEXEC}: No such file or directory", file=sys.stderr)
        sys.exit(127)
    if "--init" not in options:
        die("stand-in: trtexec would run as PID 1, which ignores SIGTERM and SIGINT: pass --init")
    workdir = (options.get("-w") or options.get("--workdir") or ["/"])[-1]
    cwd = next((Path(h) / os.path.relpath(workdir, c) for h, c in mounts
                if workdir == c or workdir.startswith(c.rstrip("/") + "/")), None)
    env = {**os.environ, "STANDIN_TRT_VERSION": trt, "STANDIN_MOUNTS": json.dumps(mounts)}
    argv = [sys.executable, os.environ["STANDIN_TRTEXEC"], *command[1:]]
    if cwd is not None:
        return container(options.get("--name", [None])[-1], argv, cwd, env, init="--init" in options)
    if any(a.startswith("--saveEngine") for a in command):
        die(f"stand-in: -w {workdir} is not a mounted directory: what trtexec writes there is lost with the container")
    with tempfile.TemporaryDirectory() as inside:  # e.g. `trtexec --help`: nothing to keep
        return container(options.get("--name", [None])[-1], argv, inside, env, init="--init" in options)


def container(name, argv, cwd, env, init, handles_signals=False):
    state = Path(os.environ["STANDIN_DOCKER_STATE"])
    name = name or f"anonymous-{os.getpid()}"
    if (state / name).exists():
        die(f'Error response from daemon: Conflict. The container name "/{name}" is already in use.')
    child = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)  # not the client's process group
    (state / name).write_text(str(child.pid))

    def proxy(sig, _frame):  # docker run proxies signals to PID 1, which ignores those it has no handler for
        if init or handles_signals:
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
    check_options(release, args, mounts)
    print(f"stand-in tritonserver {release}: options accepted, nothing served")


def check_options(release, args, mounts):
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


def serving_container(options, release, command, mounts):
    """A container whose `tritonserver` serves (STANDIN_DOCKER_SERVE=1): the command runs as the image would
    run it (through its shell when it is `sh -c`), and the image's tritonserver execs the real one, so the
    container's PID 1 ends up being tritonserver itself, as with the image's `exec "$@"`."""
    from tritonize.serve.embedded import BundledTriton, assemble_backend_dir, stub_environment

    publish = {}
    for spec in options.get("-p", []) + options.get("--publish", []):
        *host, container_port = spec.split(":")
        publish[int(container_port)] = (host[0] if len(host) == 2 else "0.0.0.0", int(host[-1]))
    if sorted(publish) != [8000, 8001, 8002]:
        die(f"stand-in: publish tritonserver's ports 8000, 8001 and 8002 (got {sorted(publish)})")
    triton = BundledTriton.find()
    with tempfile.TemporaryDirectory() as inside:
        backends = assemble_backend_dir(triton, Path(inside) / "backends")
        bin_dir = Path(inside) / "bin"
        bin_dir.mkdir()
        for tool in ("tritonserver", "pip"):
            path = bin_dir / tool
            path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" image-tool {tool} "$@"\n')
            path.chmod(0o755)
        stub = stub_environment(triton)
        env = {**container_env(options), "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
               "LD_LIBRARY_PATH": stub["LD_LIBRARY_PATH"], "STANDIN_RELEASE": release, "STANDIN_MOUNTS": json.dumps(mounts),
               "STANDIN_PUBLISH": json.dumps(publish), "STANDIN_BACKENDS": str(backends),
               "STANDIN_TRITONSERVER": str(triton.binary), "STANDIN_DOCKER_SERVE": "1"}
        return container(options.get("--name", [None])[-1], command, inside, env, init="--init" in options,
                         handles_signals=True)


def serve(release, args, mounts):
    """The image's tritonserver, serving: the options checked as `tritonserver` checks them, then the real
    binary exec'd with the container's paths and ports translated to the host's."""
    check_options(release, args, mounts)
    publish = {int(k): v for k, v in json.loads(os.environ["STANDIN_PUBLISH"]).items()}
    argv = [os.environ["STANDIN_TRITONSERVER"]]
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in ("--model-repository", "--grpc-server-cert", "--grpc-server-key", "--grpc-root-cert"):
            value = in_container(value, mounts) or value  # checked: a certificate is mounted; a repository may be s3://
        argv.append(f"{name}{eq}{value}")
    for port, what in ((8000, "http"), (8001, "grpc"), (8002, "metrics")):
        address, host_port = publish[port]
        argv += [f"--{what}-port={host_port}", f"--{what}-address={address}"]
    argv += [f"--backend-directory={os.environ['STANDIN_BACKENDS']}", "--allow-gpu-metrics=false",
             "--pinned-memory-pool-byte-size=0"]
    os.execv(argv[0], argv)


def shell(release, args, mounts, env):
    """`sh -c SCRIPT sh ARGS` in a real shell; the image's `tritonserver` and `pip` are stand-ins."""
    with tempfile.TemporaryDirectory() as bin_dir:
        for tool in ("tritonserver", "pip"):
            path = Path(bin_dir) / tool
            path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" image-tool {tool} "$@"\n')
            path.chmod(0o755)
        env = {**env, "PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_RELEASE": release, "STANDIN_MOUNTS": json.dumps(mounts)}
        sys.exit(subprocess.run(["sh", *args], env=env).returncode)


def image_tool(args):
    """A tool inside the stand-in image, run by `shell`."""
    release, mounts = os.environ["STANDIN_RELEASE"], json.loads(os.environ["STANDIN_MOUNTS"])
    if args[0] == "tritonserver":
        if os.environ.get("STANDIN_DOCKER_SERVE") == "1":
            return serve(release, args[1:], mounts)
        return tritonserver(release, args[1:], mounts)
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
