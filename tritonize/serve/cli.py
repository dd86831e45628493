"""`tritonize serve`: options in, library call out."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import (
    DEFAULT_REPOSITORY,
    ConfigName,
    ControlKeyFile,
    GpuCC,
    Models,
    RepositoryArgument,
    TritonRelease,
    items,
)


class Engine(str, Enum):
    auto = "auto"
    embedded = "embedded"
    docker = "docker"


def serve_command(
    repository: RepositoryArgument = DEFAULT_REPOSITORY,
    engine: Annotated[Engine, typer.Option(
        help="embedded: the tritonserver bundled in nvidia-pytriton with Python-based backends (no GPU or "
             "Docker needed); docker: the NGC container on a GPU machine; auto: docker when a Docker engine "
             "with the NVIDIA runtime answers, else embedded.")] = Engine.auto,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for all interfaces).")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="HTTP/REST port.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port.")] = 8002,
    config_name: ConfigName = None,
    triton_release: TritonRelease = None,
    print_command: Annotated[bool, typer.Option(
        "--print-command", help="Print the NGC container's `docker run` command for this repository and exit.")] = False,
    ready_timeout: Annotated[Optional[float], typer.Option(
        "--ready-timeout", min=1, help="Seconds to wait for the server to be ready (default: 120 embedded, 900 docker).",
        show_default=False)] = None,
    log_file: Annotated[Optional[Path], typer.Option(
        help="Keep the server log here (default: a temporary file removed on stop).")] = None,
    models: Models = None,
    control_key_file: ControlKeyFile = None,
    open_control_apis: Annotated[bool, typer.Option(
        "--open-control-apis", help="Leave the control APIs open to anyone who reaches the ports, on loopback: anyone "
                                    "on this machine (a model load can carry code the server runs). For a private "
                                    "machine.")] = False,
    tls_cert: Annotated[Optional[Path], typer.Option(
        "--tls-cert", help="Serve gRPC over TLS with this certificate (PEM; clients verify it with --tls-ca). "
                           "HTTP stays plain: Triton has no TLS for it.", show_default=False)] = None,
    tls_key: Annotated[Optional[Path], typer.Option(
        "--tls-key", help="The private key (PEM) of --tls-cert.", show_default=False)] = None,
    gpu_cc: GpuCC = None,
) -> None:
    """Serve a model repository with a real Triton server until Ctrl-C or SIGTERM.

    --models: load only these at start (default: all); load the others later with `tritonize models load NAME`.
    --config-name: default `cpu` when no GPU is visible and the repository has cpu variants (embedded engine),
    else config.pbtxt. --control-key-file (readable only by you): without it and $TRITONIZE_CONTROL_KEY, each start
    makes a new key, on loopback too, written to a file only you can read (the table says where); tritonize's own
    commands on this machine find it themselves.
    --triton-release: the NGC container for the docker engine."""
    from tritonize.serve.serving import ServeOptions, docker_command_line, serve

    options = ServeOptions(
        engine=engine.value, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        config_name=config_name, triton_release=triton_release, timeout=ready_timeout,
        log_file=log_file, models=items(models, "--models"),
        control_key_file=control_key_file, open_control_apis=open_control_apis, tls_cert=tls_cert, tls_key=tls_key,
        gpu_cc=gpu_cc,
    )
    if print_command:
        typer.echo(docker_command_line(repository, options))
        return
    serve(repository, options)
