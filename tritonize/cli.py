"""The `tritonize` command: mounts each stage's commands, nothing else."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from tritonize.errors import TritonizeError


class _UserErrorsAsOneLine(TyperGroup):
    """Print a TritonizeError as one line and exit with its code; real bugs keep their traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TritonizeError as e:
            typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
            raise typer.Exit(e.exit_code) from None


app = typer.Typer(
    cls=_UserErrorsAsOneLine,
    help="Take a torchvision classifier to a served, verified Triton model repository.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _mount() -> None:
    from tritonize.pipeline.cli import build_command
    from tritonize.client.cli import app as client_app
    from tritonize.control.cli import app as models_app
    from tritonize.deploy.cli import app as deploy_app
    from tritonize.convert.cli import app as convert_app
    from tritonize.export.cli import export_command
    from tritonize.monitor.cli import monitor_command
    from tritonize.repository_builder.cli import app as repo_app
    from tritonize.serve.cli import serve_command
    from tritonize.tools.cli import app as tools_app
    from tritonize.tune.cli import tune_command

    app.command("export")(export_command)
    app.add_typer(convert_app, name="convert", help="Convert the ONNX export: `convert trt` builds TensorRT plans, `convert cpu` a gated INT8 variant for the CPU.")
    app.add_typer(repo_app, name="repo", help="Build and check the Triton model repository.")
    app.command("serve")(serve_command)
    app.add_typer(client_app, name="client", help="gRPC client: classify, compare backends, perf sweeps.")
    app.command("build")(build_command)
    app.command("monitor")(monitor_command)
    app.add_typer(models_app, name="models", help="List, load, unload and reload the models of a running server.")
    app.command("tune")(tune_command)
    app.add_typer(tools_app, name="tools", help="Get the external tools tritonize uses when present (perf_analyzer).")
    app.add_typer(deploy_app, name="deploy", help="Kubernetes / KServe bundle for a repository pushed with `repo push`.")


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
