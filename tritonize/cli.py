"""The `tritonize` command: mounts each stage's commands, nothing else."""

from __future__ import annotations

import sys

import typer
from typer._click import exceptions as click_errors  # typer 0.2x carries its own click
from typer.core import TyperGroup

from tritonize.errors import TritonizeError
from tritonize.options import EXIT_CODES


def _error(message: str) -> None:
    """A usage error on one line (click wraps some of its messages)."""
    typer.secho("error: " + " ".join(message.split()), err=True, fg=typer.colors.RED)


class _UserErrorsAsOneLine(TyperGroup):
    """A TritonizeError and a usage error look alike: one line `error: ...` and the kind's exit code (EXIT_CODES).
    Real bugs keep their traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TritonizeError as e:  # its first line says what happened; a server log's tail may follow
            typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:  # typer would exit 130 saying nothing
            _error("interrupted")
            raise typer.Exit(130) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.UsageError as e:
            if not e.format_message():  # no arguments: the help was shown
                sys.exit(e.exit_code)
            command = " ".join(["tritonize", *(e.ctx.command_path.split()[1:] if e.ctx else [])])
            _error(f"{e.format_message()} (see `{command} -h`)")
            sys.exit(e.exit_code)
        except click_errors.ClickException as e:  # a bad file argument and the like
            _error(e.format_message())
            sys.exit(e.exit_code)
        except typer.Abort:  # typer's own (its click has none): an input that ended, or a command that aborted
            _error("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


EXAMPLES = """Examples (build, then serve, then classify):

  tritonize build                # build/ (verified exports) and models/

  tritonize serve models/        # a real Triton on localhost:8000/8001/8002

  tritonize client classify goldfish.jpg --model onnx_model

Exit codes: {codes}
"""

EXAMPLES = EXAMPLES.replace("{codes}", ", ".join(f"{code} {kind}" for code, kind in EXIT_CODES.items()))

# The top-level help groups the commands by what a user is doing.
MAKE, USE, OPERATE, SETUP = "Make a repository", "Serve and use it", "Operate", "Setup"

app = typer.Typer(
    cls=_UserErrorsAsOneLine,
    help="Take a torchvision classifier to a served, verified Triton model repository.",
    epilog=EXAMPLES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"tritonize {version('tritonize')}")
        raise typer.Exit()


@app.callback()
def _top(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print tritonize's version and exit."),
) -> None:
    """Take a torchvision classifier to a served, verified Triton model repository."""


def _mount() -> None:
    from tritonize.client.cli import app as client_app
    from tritonize.control.cli import app as models_app
    from tritonize.convert.cli import app as convert_app
    from tritonize.deploy.cli import app as deploy_app
    from tritonize.export.cli import export_command
    from tritonize.monitor.cli import monitor_command
    from tritonize.pipeline.cli import build_command
    from tritonize.repository_builder.cli import app as repo_app
    from tritonize.serve.cli import serve_command
    from tritonize.tools.cli import app as tools_app
    from tritonize.tune.cli import tune_command

    app.command("build", rich_help_panel=MAKE)(build_command)
    app.command("export", rich_help_panel=MAKE)(export_command)
    app.add_typer(convert_app, name="convert", rich_help_panel=MAKE,
                  help="Convert the ONNX export: `convert trt` builds TensorRT plans, `convert cpu` a gated INT8 variant for the CPU.")
    app.add_typer(repo_app, name="repo", rich_help_panel=MAKE, help="Build and check the Triton model repository.")
    app.command("serve", rich_help_panel=USE)(serve_command)
    app.add_typer(client_app, name="client", rich_help_panel=USE, help="gRPC client: classify, compare backends, perf sweeps.")
    app.add_typer(models_app, name="models", rich_help_panel=OPERATE,
                  help="List, load, unload and reload the models of a running server.")
    app.command("monitor", rich_help_panel=OPERATE)(monitor_command)
    app.command("tune", rich_help_panel=OPERATE)(tune_command)
    app.add_typer(deploy_app, name="deploy", rich_help_panel=OPERATE,
                  help="Push a repository to object storage (S3); Kubernetes / KServe bundles for it.")
    app.add_typer(tools_app, name="tools", rich_help_panel=SETUP,
                  help="Get the external tools tritonize uses when present (perf_analyzer).")


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
