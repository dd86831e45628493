"""Placeholder until this stage lands."""


def serve_command() -> None:
    """Serve a model repository with a real Triton server."""
