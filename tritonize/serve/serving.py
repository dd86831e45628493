"""`tritonize serve` as one library call: pick the engine, start it, show what is served, and keep
serving until Ctrl-C or SIGTERM (starting tritonserver again when it dies), then stop cleanly."""

from __future__ import annotations

import shlex
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from tritonize.access import KEY_ENV, RESTRICTED_APIS, ControlKey, ServerTLS, is_loopback, server_key, server_tls
from tritonize.errors import TritonizeError
from tritonize.machine import docker_gpu_problem
from tritonize.model_repository import check_cc
from tritonize.progress import say
from tritonize.serve.docker import DockerServer, choose_release, docker_command
from tritonize.serve.embedded import EmbeddedServer
from tritonize.serve.process import ServerHandle, ServerInfo
from tritonize.serve.repository import DEFAULT_CONFIG_NAME, plans_missing_for_gpu, validate_repository

SERVER_ENGINES = ("auto", "embedded", "docker")
READY_TIMEOUT_S = {"embedded": 120.0, "docker": 900.0}  # docker: the first run pulls a ~15 GB image
WATCH_S = 0.1  # how often serve looks whether tritonserver still runs


@dataclass(frozen=True)
class ServeOptions:
    engine: str = "auto"
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    config_name: str | None = None  # --model-config-name; None: automatic, "config": config.pbtxt
    triton_release: str | None = None  # docker engine; None: from the plan's provenance in the repository
    timeout: float | None = None  # seconds to wait for readiness; None: the engine's default
    log_file: Path | None = None
    models: tuple[str, ...] = ()  # loaded at start (the others can be loaded later); empty: all
    control_key_file: Path | None = None  # the control key; None: $TRITONIZE_CONTROL_KEY, else one per start off loopback
    open_control_apis: bool = False  # no key, whatever the host
    tls_cert: Path | None = None  # gRPC over TLS with this certificate (PEM) ...
    tls_key: Path | None = None  # ... and its private key
    gpu_cc: str | None = None  # the serving GPU's compute capability for the plan check; None: this machine's GPU

    def __post_init__(self):
        if self.engine not in SERVER_ENGINES:
            raise TritonizeError(f"--engine must be one of {', '.join(SERVER_ENGINES)} (got {self.engine!r})")
        for option, port in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port),
                             ("--metrics-port", self.metrics_port)):
            if not 1 <= port <= 65535:
                raise TritonizeError(f"{option} must be a port between 1 and 65535 (got {port})")
        if self.timeout is not None and self.timeout <= 0:
            raise TritonizeError(f"--timeout must be positive seconds (got {self.timeout})")
        if self.gpu_cc is not None:
            check_cc(self.gpu_cc)


def docker_command_line(repository: Path, options: ServeOptions) -> str:
    """The `docker run` command line serving `repository` with the matching NGC container."""
    _warn_missing_plans(Path(repository), options)
    choice = choose_release(options.triton_release, repository)
    say(f"Triton {choice.release}: {choice.why}")
    key = _restricted(options)
    if key:
        example = f'export {KEY_ENV}="$(cat {key.file})"' if key.file else f"export {KEY_ENV}=<16+ characters>"
        say(f"the container restricts {', '.join(RESTRICTED_APIS)} to the key in ${KEY_ENV}: set it before running "
            f"the command ({example}; the container refuses to start without it), and give clients the same key")
    return shlex.join(docker_command(
        repository, choice.release, host=options.host, http_port=options.http_port, grpc_port=options.grpc_port,
        metrics_port=options.metrics_port, model_config_name=_docker_config_name(options.config_name),
        models=options.models, restricted=key is not None, tls=_tls(options),
    ))


def _warn_missing_plans(repository: Path, options: ServeOptions) -> None:
    """One line per TensorRT model without a plan for the serving GPU: Triton would leave it UNAVAILABLE."""
    for line in plans_missing_for_gpu(repository, options.gpu_cc):
        say(f"warning: {line}")


def _restricted(options: ServeOptions) -> ControlKey | None:
    """The control key for the server (None: the control APIs stay open, with a warning off loopback)."""
    key = server_key(options.control_key_file, options.open_control_apis)
    if key is None:
        who = "anyone on this machine" if is_loopback(options.host) else f"anyone who reaches {options.host}"
        say(f"warning: --open-control-apis: {who} can unload and load models (with files that the server runs as "
            "you), read statistics, change trace and log settings and register shared memory")
    return key


def _tls(options: ServeOptions) -> ServerTLS | None:
    return server_tls(options.tls_cert, options.tls_key)


def serve(repository: Path, options: ServeOptions) -> None:
    """Serve until Ctrl-C / SIGTERM. Raises TritonizeError when no model is READY or the server keeps dying."""
    validate_repository(Path(repository), options.models)  # before probing for docker: a typo should fail fast
    _warn_missing_plans(Path(repository), options)
    server = _server(Path(repository), options)
    with server as info:
        print(models_table(info), flush=True)
        if not info.ready_models:
            raise TritonizeError("no model is READY (reasons above); the server was stopped")
        say("serving; Ctrl-C or SIGTERM stops")
        wait_for_stop(server)
        say("stopping")
    say("stopped")


def _server(repository: Path, options: ServeOptions):
    engine = options.engine
    if engine == "auto":
        problem = docker_gpu_problem()
        engine = "embedded" if problem else "docker"
        say(f"engine: {engine}" + (f" (docker: {problem})" if problem else ""))
    timeout = options.timeout or READY_TIMEOUT_S[engine]
    ports = dict(http_port=options.http_port, grpc_port=options.grpc_port, metrics_port=options.metrics_port)
    access = dict(control_key=_restricted(options), tls=_tls(options))
    if engine == "docker":
        choice = choose_release(options.triton_release, repository)
        say(f"Triton {choice.release}: {choice.why}")
        return DockerServer(repository, choice.release, host=options.host, **ports,
                            model_config_name=_docker_config_name(options.config_name),
                            ready_timeout=timeout, log_path=options.log_file, models=options.models, **access)
    return EmbeddedServer(repository, host=options.host, **ports, model_config_name=options.config_name,
                          ready_timeout=timeout, log_path=options.log_file, models=options.models, **access)


def _docker_config_name(config_name: str | None) -> str | None:
    return None if config_name in (None, DEFAULT_CONFIG_NAME) else config_name


def models_table(info: ServerInfo) -> str:
    rows = [("MODEL", "STATE", "REASON")] + [(name, state, reason) for name, (state, reason) in info.models.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{name:<{widths[0]}}  {state:<{widths[1]}}  {reason}".rstrip() for name, state, reason in rows]
    config = f"configs/{info.model_config_name}.pbtxt" if info.model_config_name else "config.pbtxt"
    if info.control_key:
        control = (f"{', '.join(RESTRICTED_APIS)} need the key in {info.control_key.file}: "
                   f"--control-key-file {info.control_key.file}, or ${KEY_ENV}")
    else:
        control = "open"
    lines += [
        "",
        f"gRPC     {info.grpc_url}" + ("  (TLS)" if info.tls else ""),
        f"HTTP     {info.http_url}",
        f"metrics  {info.metrics_url}",
        f"control  {control}",
        f"configs  {config}",
        f"log      {info.log_path}",
    ]
    return "\n".join(lines)


def wait_for_stop(server: ServerHandle) -> None:
    """Block until SIGINT/SIGTERM; a tritonserver that dies meanwhile is started again (`heal`), which raises
    once it keeps dying."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(WATCH_S):
            code = server.server.exit_code()
            if code is not None:
                server.heal(code)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
