"""Serve a model repository with a real Triton server: the embedded engine (the tritonserver binary
bundled in nvidia-pytriton + the project's Python-based backends) or the NGC container."""

from tritonize.serve.embedded import EmbeddedServer, embedded_server
from tritonize.serve.server import ServerInfo

__all__ = ["EmbeddedServer", "ServerInfo", "embedded_server"]
