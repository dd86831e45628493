"""The docker engine: the NGC Triton container on a GPU machine, serving the same repository with
Triton's native backends. The release is the one whose TensorRT runs the plan (a plan only loads in
the TensorRT it was built with, or a later one when it is version-compatible), or the user's
--triton-release."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tritonize.access import HTTP_RESTRICTION_FROM, KEY_ENV, ControlKey, ServerTLS, restriction_flags
from tritonize.errors import TritonizeError
from tritonize.machine import docker_gpu_problem
from tritonize.model_repository import AOTI_MODEL, release_problem
from tritonize.progress import say
from tritonize.releases import latest_release, release_info, releases_for_tensorrt, tensorrt_loads
from tritonize.serve import shm
from tritonize.serve.process import WORKDIR_PREFIX, RunningServer, ServerHandle, choose_ports, endpoints
from tritonize.serve.repository import (
    model_control_flags,
    package_models,
    python_requirements,
    tensorrt_models,
    validate_repository,
)

# tritonserver options newer than the oldest release in the table (triton-inference-server/server
# src/command_line_parser.cc on the release branches): --model-config-name from r24.05 (#7185),
# --allow-client-shm from r26.04 (#8721; client shared memory is refused without it).
MODEL_CONFIG_NAME_FROM = "24.05"
CLIENT_SHM_FLAG_FROM = "26.04"
TLS_CERT, TLS_KEY = "/tls/cert.pem", "/tls/key.pem"  # where the container sees --tls-cert and --tls-key
SOCKETS = "/run/tritonize"  # where the container sees the directory of tritonserver's sockets (serve's front)


@dataclass(frozen=True)
class ReleaseChoice:
    release: str
    why: str  # one line for the user


def choose_release(triton_release: str | None, repository: Path) -> ReleaseChoice:
    """--triton-release when given (refused when a plan in the repository cannot load there); else the
    release whose TensorRT runs the repository's plan (the release it was built for when that is one
    of them); else the release a plan was built for, with a warning when the table does not know its
    TensorRT (most releases: the `container` builder built the plan there); else the release a PyTorch 2
    package was made for; else the newest release. A release that cannot serve a PyTorch 2 package is refused.
    Everything comes from the repository: `repo build` stamps each plan's provenance into its config."""
    packages = package_models(repository)
    chosen = _choose_release(triton_release, repository)
    for model, made_for in packages.items():  # a PyTorch 2 package: a release that serves its platform
        problem = release_problem(AOTI_MODEL, chosen.release)
        if problem:
            fix = "drop --triton-release" if triton_release else f"give --triton-release {made_for or AOTI_MODEL.first_release}"
            raise TritonizeError(f"{model} in {repository}: {problem}; {fix}")
    return chosen


def _choose_release(triton_release: str | None, repository: Path) -> ReleaseChoice:
    plans = tensorrt_models(repository)
    plan = next((p for p in plans if p.tensorrt_version), plans[0] if plans else None)
    built_with = plan.tensorrt_version if plan else None
    compatible = bool(plan and plan.version_compatible)
    if triton_release:
        chosen = release_info(triton_release)
        if built_with and chosen.tensorrt and not tensorrt_loads(built_with, chosen.tensorrt, compatible):
            raise TritonizeError(
                f"Triton {chosen.release} runs TensorRT {chosen.tensorrt}, but {plan.model} in {repository} was built "
                f"with TensorRT {built_with} and will not load there; drop --triton-release or rebuild the plan for it"
            )
        return ReleaseChoice(chosen.release, f"--triton-release {chosen.release}")
    target = plan.triton_release if plan else None
    if built_with:
        matching = releases_for_tensorrt(built_with, compatible)
        if matching:
            chosen = next((r for r in matching if r.release == target), matching[-1])
            return ReleaseChoice(chosen.release, f"runs TensorRT {chosen.tensorrt}, the plan's TensorRT {built_with}"
                                                 + (" (version-compatible)" if compatible else ""))
        if not target or release_info(target).tensorrt:
            raise TritonizeError(
                f"no known Triton release runs TensorRT {built_with} ({plan.model} in {repository}); give one with "
                "--triton-release or rebuild the plan with `tritonize convert trt --triton-release YY.MM`"
            )
        return ReleaseChoice(target, f"the release {plan.model}'s plan was built for (warning: tritonize's release "
                                     f"table does not know its TensorRT; the plan's is {built_with})")
    if target:
        return ReleaseChoice(release_info(target).release, f"the release {plan.model}'s plan was built for")
    made_for = {model: release for model, release in package_models(repository).items() if release}
    if made_for:
        model, release = next(iter(made_for.items()))
        return ReleaseChoice(release_info(release).release, f"the release {model}'s package was made for")
    return ReleaseChoice(latest_release().release, f"newest known release; no TensorRT plan in {repository}")


def docker_command(
    repository: Path,
    release: str,
    *,
    host: str = "127.0.0.1",
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    model_config_name: str | None = None,
    models: tuple[str, ...] = (),
    load_all: bool = True,
    restricted: bool = False,
    tls: ServerTLS | None = None,
    sockets: Path | None = None,
) -> list[str]:
    """The exact `docker run` that serves `repository` with the NGC container of `release`.

    `--ipc=host`: client shared-memory regions live in the host's /dev/shm (a container's own
    /dev/shm, whatever its --shm-size, is another one). `restricted`: the control key goes into the
    container as TRITONIZE_CONTROL_KEY from docker's own environment (the container's tritonserver then
    has it in its arguments). `sockets` (what `tritonize serve` runs): tritonserver publishes no port and
    listens on Unix sockets in that directory, behind serve's front, which holds the key and the TLS.
    """
    image = release_info(release).image
    publish, mounts, listen = [], ["-v", f"{Path(repository).resolve()}:/models"], None
    if sockets is None:
        for host_port, container_port in ((http_port, 8000), (grpc_port, 8001), (metrics_port, 8002)):
            bind = f"{host}:" if host not in ("", "0.0.0.0") else ""
            publish += ["-p", f"{bind}{host_port}:{container_port}"]
    else:
        from tritonize.serve.front_common import Upstream

        mounts += ["-v", f"{sockets}:{SOCKETS}"]
        listen = Upstream(Path(sockets)).flags(inside=SOCKETS)
    if tls:
        mounts += ["-v", f"{tls.cert}:{TLS_CERT}:ro", "-v", f"{tls.key}:{TLS_KEY}:ro"]
    return [
        "docker", "run", "--gpus", "all", "--rm", "--ipc=host", *publish, *mounts,
        *(["-e", KEY_ENV] if restricted else []),
        image,
        *container_command(repository, release, host=host, model_config_name=model_config_name, models=models,
                           load_all=load_all, restricted=restricted, tls=tls is not None, listen=listen),
    ]


def container_command(repository: Path, release: str, *, host: str = "0.0.0.0", model_config_name: str | None = None,
                      models: tuple[str, ...] = (), load_all: bool = True, model_repository: str = "/models",
                      requirements_dir: str = "/models", restricted: bool = False, tls: bool = False,
                      listen: list[str] | None = None) -> list[str]:
    """What the NGC container of `release` runs: tritonserver on `model_repository` (docker: the
    repository mounted at /models; Kubernetes: its s3:// release), in explicit model control, loading
    `models` (all when empty).

    When models need pip packages the container lacks (the preprocess model needs Pillow), the command
    installs their requirements.txt (found under `requirements_dir`, by model) first, then starts
    tritonserver with the same arguments. `restricted`: the container's shell adds the options that
    restrict the control APIs to the key in $TRITONIZE_CONTROL_KEY, and refuses to start without it.
    `tls`: gRPC over TLS with the certificate and key mounted at TLS_CERT and TLS_KEY. `listen`: tritonserver's
    address options for Unix sockets (Upstream.flags), made under umask 0: the container runs as root, and the
    host's user connects to them (their directory, the user's and mode 700, keeps everyone else out).
    """
    command = ["tritonserver", f"--model-repository={model_repository}",
               *tritonserver_flags(repository, release, host=host, model_config_name=model_config_name, models=models,
                                  load_all=load_all), *(listen or [])]
    if tls:
        command += ServerTLS(Path(TLS_CERT), Path(TLS_KEY)).flags()
    steps, start = ["umask 0"] if listen else [], 'exec "$@"'
    if restricted:
        if release < HTTP_RESTRICTION_FROM:
            raise TritonizeError(f"Triton {release} cannot restrict its HTTP API (--http-restricted-api from "
                                 f"{HTTP_RESTRICTION_FROM} on): use release {HTTP_RESTRICTION_FROM} or newer, or "
                                 "--open-control-apis on a machine where you trust everyone who reaches the server")
        steps.append(f': "${{{KEY_ENV}:?must hold the control key}}"')
        start += "".join(f' "{flag}"' for flag in restriction_flags(f"${KEY_ENV}"))
    requirements = python_requirements(repository)
    if requirements:
        steps.append("pip install --no-cache-dir --quiet " + " ".join(f"-r {requirements_dir}/{r}" for r in requirements))
    if steps:
        command = ["sh", "-c", " && ".join([*steps, start]), "sh", *command]
    return command


def tritonserver_flags(repository: Path, release: str, *, host: str = "0.0.0.0", model_config_name: str | None = None,
                       models: tuple[str, ...] = (), load_all: bool = True) -> list[str]:
    """tritonserver's options for `repository` in `release`, after --model-repository.

    tritonserver exits on options it does not know, so release-dependent ones go only to releases
    that have them (command_line_parser.cc).
    """
    flags = model_control_flags(models, load_all)
    if any(p.version_compatible for p in tensorrt_models(repository)):
        # Version-compatible plans embed host code that the tensorrt backend runs only when trusted.
        flags.append("--backend-config=tensorrt,version-compatible=true")
    if model_config_name:
        if release < MODEL_CONFIG_NAME_FROM:
            raise TritonizeError(f"Triton {release} has no --model-config-name (from {MODEL_CONFIG_NAME_FROM} on): "
                                 f"serve config.pbtxt there, or use release {MODEL_CONFIG_NAME_FROM} or newer")
        flags.append(f"--model-config-name={model_config_name}")
    if release >= CLIENT_SHM_FLAG_FROM and host in ("127.0.0.1", "localhost", "::1"):
        # Off by default from 26.04; `client perf --shared-memory` needs it. Shared memory serves only
        # clients on this host, so it is allowed only for a server that listens on loopback.
        flags.append("--allow-client-shm=true")
    return flags


def container_pid(name: str) -> int | None:
    """The pid on this machine of the tritonserver in container `name` (its PID 1, which the `exec` of
    container_command makes tritonserver), or None where it cannot be seen: a Docker engine on another
    machine (DOCKER_HOST), or a process that is not tritonserver."""
    try:
        result = subprocess.run(["docker", "inspect", "--format", "{{.State.Pid}}", name],
                                capture_output=True, text=True, timeout=20)
        pid = int(result.stdout.strip() or 0) if result.returncode == 0 else 0
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] if pid else b""
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return pid if Path(argv0.decode(errors="replace")).name == "tritonserver" else None


class DockerServer(ServerHandle):
    """The NGC container serving `repository` on the given host ports, through the front (serve/front.py) as the
    embedded server does: the container publishes no port, and its tritonserver has neither key nor TLS. Same life
    cycle as
    EmbeddedServer (start() -> ServerInfo once ready, stop() ends it: `docker run` forwards the
    SIGTERM to the container, and --rm removes it), and the same supervision: the container's processes
    are this machine's where the Docker engine runs here, and its /dev/shm is the host's (--ipc=host).
    A container that dies is replaced by `heal()` as the embedded server is, not by docker's restart policy:
    docker would start the original command (the models loaded at start, not as the clients left them), and
    its policy cannot go with --rm."""

    def __init__(self, repository: Path, release: str, *, host: str = "127.0.0.1", http_port: int = 8000,
                 grpc_port: int = 8001, metrics_port: int = 8002, model_config_name: str | None = None,
                 ready_timeout: float = 600.0, log_path: Path | None = None, models: tuple[str, ...] = (),
                 control_key: ControlKey | None = None, tls: ServerTLS | None = None, supervise: bool = True):
        self.repository, self.release, self.host = Path(repository).resolve(), release, host
        self.control_key, self.tls = control_key, tls
        self.requested_ports = (http_port, grpc_port, metrics_port)
        self.model_config_name, self.ready_timeout = model_config_name, ready_timeout
        self.log_path = Path(log_path).resolve() if log_path else None
        self.models = models  # loaded at start; empty: all
        self.supervise = supervise  # reload a model whose backend stub died (off: to do it by hand)
        self.runs = 0  # containers started

    def command(self, load: tuple[str, ...] | None = None) -> list[str]:
        """`docker run` of a container of a new name (a container that died may still be being removed), loading
        `load` at start (None: `models`)."""
        self.runs += 1
        self.name = f"tritonize-serve-{self.workdir.name.removeprefix(WORKDIR_PREFIX)}"
        self.name += f"-{self.runs}" * (self.runs > 1)
        self.upstream.clear()
        command = docker_command(self.repository, self.release, host=self.host,
                                 model_config_name=self.model_config_name, models=self.models if load is None else load,
                                 load_all=load is None, sockets=self.upstream.directory)
        command[2:2] = ["--name", self.name]  # docker run --name NAME ...
        return command + [shm.prefix_flag(self.region_prefix)]  # tritonserver's last option

    def server_pid(self, info) -> int | None:
        pid = container_pid(self.name)
        if pid is None:
            say(f"container {self.name}: its processes are not visible here (a Docker engine on another machine?): "
                "a crashed backend stub is found only by the requests that fail on it")
        return pid

    def start(self):
        validate_repository(self.repository, self.models)
        problem = docker_gpu_problem(release_info(self.release).image)
        if problem:
            raise TritonizeError(f"the docker engine cannot run here: {problem}; use --engine embedded, "
                                 "or --print-command to get the command for a GPU machine")
        self.ports = choose_ports(self.host, *self.requested_ports)
        self.prepare()
        try:
            self.control_key = self.key_with_file()
            self.start_front()
            self.server = RunningServer(self.command(), urls=endpoints(self.host, self.ports),
                                        ready_timeout=self.ready_timeout,
                                        log_path=self.log_path or self.workdir / "tritonserver.log",
                                        model_config_name=self.model_config_name,
                                        control_key=self.control_key, tls=self.tls is not None,
                                        repositories=(self.repository,))
            info = self.server.start()
            self.serving(info)
            return info
        except BaseException:
            self.stop()
            raise
