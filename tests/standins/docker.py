"""STAND-IN for the docker CLI, for tests only: no image, no container, no GPU.

It enforces the parts of Docker's documented contract that tritonize relies on (docker/cli
docs/reference/commandline/container_run.md, container_kill.md), and fails where the real engine
would misbehave, not only where it would refuse:
- `docker info --format '{{json .Runtimes}}'`: the runtimes in STANDIN_DOCKER_RUNTIMES.
- `docker run`: a bind-mount source must be an absolute path that exists (docker mounts a relative
  one as an empty named volume, and creates a missing absolute one owned by root); no --entrypoint
  (tritonize keeps the image's own); `--gpus all` (STANDIN_DOCKER_GPU=0: the daemon's error for a
  host without a GPU, exit 125); a trtexec run needs --init (as PID 1 trtexec ignores SIGTERM).
- Images nvcr.io/nvidia/tritonserver:YY.MM-py3: /usr/src/tensorrt/bin/trtexec is the trtexec
  stand-in emulating STANDIN_IMAGE_TRT[YY.MM] (a JSON map; none: the entrypoint's exec fails, exit
  127), with the container's view of the mounts; `tritonserver` accepts the options its release has
  (tests/data/tritonserver_options.json) and serves nothing.
- The container runs outside the client's process group: killing the client leaves it running;
  SIGTERM to the client reaches it only through --init; `docker kill NAME` ends it. Running
  containers are files in STANDIN_DOCKER_STATE (name -> pid).
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
    if command[0] == "tritonserver":
        return tritonserver(release, command[1:])
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


def container(name, argv, cwd, env, init):
    state = Path(os.environ["STANDIN_DOCKER_STATE"])
    name = name or f"anonymous-{os.getpid()}"
    if (state / name).exists():
        die(f'Error response from daemon: Conflict. The container name "/{name}" is already in use.')
    child = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)  # not the client's process group
    (state / name).write_text(str(child.pid))

    def proxy(sig, _frame):  # docker run proxies signals to PID 1; only tini (--init) passes them on
        if init:
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, proxy)
    signal.signal(signal.SIGINT, proxy)
    code = child.wait()
    (state / name).unlink(missing_ok=True)  # --rm
    sys.exit(code if code >= 0 else 128 - code)


def tritonserver(release, args):
    first = json.loads((DATA / "tritonserver_options.json").read_text())["first_release"]
    for arg in args:
        name = arg.partition("=")[0]
        if name not in first or release < first[name]:
            print(f"Unexpected argument: {arg}", file=sys.stderr)  # tritonserver exits on unknown options
            sys.exit(1)
    print(f"stand-in tritonserver {release}: options accepted, nothing served")


def kill(args):
    state = Path(os.environ["STANDIN_DOCKER_STATE"])
    for name in args:
        try:
            os.kill(int((state / name).read_text()), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            die(f"Error response from daemon: No such container: {name}", 1)
        print(name)


def info(args):
    runtimes = os.environ.get("STANDIN_DOCKER_RUNTIMES", '{"nvidia": {}, "runc": {}}')
    print(runtimes if "--format" in " ".join(args) else f"Runtimes: {' '.join(json.loads(runtimes))}")


commands = {"run": run, "kill": kill, "info": info}
if len(sys.argv) < 2 or sys.argv[1] not in commands:
    die(f"stand-in: {' '.join(sys.argv[1:2])} is not emulated")
commands[sys.argv[1]](sys.argv[2:])
