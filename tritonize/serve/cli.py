"""`tritonize serve`: options in, library call out."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonize.options import DEFAULT_REPOSITORY, GpuCC, RepositoryArgument


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
    config_name: Annotated[Optional[str], typer.Option(
        help="Serve <model>/configs/NAME.pbtxt instead of config.pbtxt (Triton's --model-config-name); "
             "`config` forces config.pbtxt. Default: `cpu` when no GPU is visible and the repository has "
             "cpu variants (embedded engine), else config.pbtxt.")] = None,
    triton_release: Annotated[Optional[str], typer.Option(
        help="NGC container release YY.MM for the docker engine (default: the release whose TensorRT "
             "runs the repository's plan, as `repo build` recorded it in trt_model's config).")] = None,
    print_command: Annotated[bool, typer.Option(
        "--print-command", help="Print the NGC container's `docker run` command for this repository and exit.")] = False,
    timeout: Annotated[Optional[float], typer.Option(
        help="Seconds to wait for the server to be ready (default: 120 embedded, 900 docker).")] = None,
    log_file: Annotated[Optional[Path], typer.Option(
        help="Keep the server log here (default: a temporary file removed on stop).")] = None,
    models: Annotated[Optional[str], typer.Option(
        help="Load only these models at start, comma-separated (default: all); load the others later "
             "with `tritonize models load NAME`.")] = None,
    control_key_file: Annotated[Optional[Path], typer.Option(
        "--control-key-file", help="Restrict the control APIs (model repository, statistics, trace, logging, shared "
                                   "memory) to the key in this file (readable only by you). Default: the key in "
                                   "$TRITONIZE_CONTROL_KEY; else, when --host is not loopback, a new key per start, "
                                   "written to a file only you can read (the table says where).",
        show_default=False)] = None,
    open_control_apis: Annotated[bool, typer.Option(
        "--open-control-apis", help="Leave the control APIs open to anyone who reaches the ports (a warning off "
                                    "loopback).")] = False,
    tls_cert: Annotated[Optional[Path], typer.Option(
        "--tls-cert", help="Serve gRPC over TLS with this certificate (PEM; clients verify it with --tls-ca). "
                           "HTTP stays plain: Triton has no TLS for it.", show_default=False)] = None,
    tls_key: Annotated[Optional[Path], typer.Option(
        "--tls-key", help="The private key (PEM) of --tls-cert.", show_default=False)] = None,
    gpu_cc: GpuCC = None,
) -> None:
    """Serve a model repository with a real Triton server until Ctrl-C or SIGTERM."""
    from tritonize.serve.serving import ServeOptions, docker_command_line, serve

    options = ServeOptions(
        engine=engine.value, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        config_name=config_name, triton_release=triton_release, timeout=timeout,
        log_file=log_file, models=tuple(m.strip() for m in (models or "").split(",") if m.strip()),
        control_key_file=control_key_file, open_control_apis=open_control_apis, tls_cert=tls_cert, tls_key=tls_key,
        gpu_cc=gpu_cc,
    )
    if print_command:
        typer.echo(docker_command_line(repository, options))
        return
    serve(repository, options)
