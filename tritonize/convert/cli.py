"""Placeholder until this stage lands."""
import typer

app = typer.Typer(no_args_is_help=True)
