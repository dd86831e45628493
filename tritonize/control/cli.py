"""`tritonize models list|load|unload|reload`: options in, library calls out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List

import typer

from tritonize.client.connection import DEFAULT_URL
from tritonize.options import AsJson, ControlKeyFile, Timeout, TlsCa, Url

app = typer.Typer(no_args_is_help=True, help="List, load, unload and reload the models of a running server.")

Names = Annotated[List[str], typer.Argument(help="Model names, as in the repository.", show_default=False)]
CONTROL_TIMEOUT_S = 120.0  # a load returns when the model is READY: large models take a while


def _each(url: str, timeout: float, key_file: Path | None, tls_ca: Path | None, names: list[str], action: str,
          done: str) -> None:
    from tritonize.client.connection import Connection
    from tritonize.control.models import ModelControl

    with Connection(url, timeout, key_file=key_file, tls_ca=tls_ca) as connection:
        control = ModelControl(connection)
        for name in names:
            model = getattr(control, action)(name)
            typer.echo(f"{done} {name}: {model.state}" + (f" ({model.reason})" if model.reason else ""))


@app.command("list")
def list_command(url: Url = DEFAULT_URL, timeout: Timeout = CONTROL_TIMEOUT_S, as_json: AsJson = False,
                 control_key_file: ControlKeyFile = None, tls_ca: TlsCa = None) -> None:
    """Every model in the server's repository: version, state and, when not READY, why."""
    from tritonize.client.connection import Connection
    from tritonize.console import table
    from tritonize.control.models import ModelControl

    with Connection(url, timeout, key_file=control_key_file, tls_ca=tls_ca) as connection:
        models = ModelControl(connection).index()
    if as_json:
        typer.echo(json.dumps([m.to_dict() for m in models], indent=2))
    else:
        typer.echo(table(("MODEL", "VERSION", "STATE", "REASON"),
                         [(m.name, m.version or "-", m.state, m.reason) for m in models], indent=""))


@app.command("load")
def load_command(names: Names, url: Url = DEFAULT_URL, timeout: Timeout = CONTROL_TIMEOUT_S,
                 control_key_file: ControlKeyFile = None, tls_ca: TlsCa = None) -> None:
    """Load models; returns once each is READY, or with Triton's reason why it is not."""
    _each(url, timeout, control_key_file, tls_ca, names, "load", "loaded")


@app.command("unload")
def unload_command(names: Names, url: Url = DEFAULT_URL, timeout: Timeout = CONTROL_TIMEOUT_S,
                   control_key_file: ControlKeyFile = None, tls_ca: TlsCa = None) -> None:
    """Unload models (requests in flight finish first); they stay in the repository to load again."""
    _each(url, timeout, control_key_file, tls_ca, names, "unload", "unloaded")


@app.command("reload")
def reload_command(names: Names, url: Url = DEFAULT_URL, timeout: Timeout = CONTROL_TIMEOUT_S,
                   control_key_file: ControlKeyFile = None, tls_ca: TlsCa = None) -> None:
    """Unload, then load: picks up changed files and brings back a model whose instance died
    (Triton ignores a plain load of an unchanged model)."""
    _each(url, timeout, control_key_file, tls_ca, names, "reload", "reloaded")
