"""Triton's model repository API over gRPC: which models the server knows and in what state, and
loading / unloading / reloading them (the server runs with --model-control-mode=explicit)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from tritonize.client.connection import Connection, server_gone, short_reason
from tritonize.errors import TritonizeError

UNLOAD_POLL_S = 0.1


@dataclass(frozen=True)
class ModelState:
    """One entry of the repository index."""

    name: str
    version: str  # "" while no version was ever loaded
    state: str  # READY, LOADING, UNLOADING, UNAVAILABLE, ...
    reason: str  # why it is not READY ("unloaded", a load error), one line

    def to_dict(self) -> dict:
        return asdict(self)


def one_line(text: str) -> str:
    """Triton's message without the Python traceback it appends and the `;` it ends load errors with."""
    return " ".join(text.split("\n\nAt:")[0].split()).rstrip(";")


class ModelControl:
    """The repository API of the server behind `connection`. Every gRPC call goes through `_call`."""

    def __init__(self, connection: Connection):
        from tritonclient.utils import InferenceServerException

        self.connection = connection
        self._error = InferenceServerException

    def _call(self, method: str, *args, what: str, **kwargs):
        try:
            return getattr(self.connection.client, method)(*args, client_timeout=self.connection.timeout, **kwargs)
        except self._error as e:
            status = str(e.status() or "")
            if "UNAVAILABLE" in status:
                raise server_gone(self.connection.url, e, what) from None
            if "DEADLINE_EXCEEDED" in status:
                raise TritonizeError(f"{what} did not finish within {self.connection.timeout:g} s; the server goes "
                                     "on with it (`tritonize models list` shows the state), or raise --timeout") from None
            raise TritonizeError(f"{what}: {one_line(e.message() or short_reason(e))}") from None

    def index(self) -> list[ModelState]:
        index = self._call("get_model_repository_index", as_json=True, what="the repository index")
        return sorted((ModelState(m["name"], m.get("version", ""), m.get("state") or "UNKNOWN", one_line(m.get("reason", "")))
                       for m in index.get("models", [])), key=lambda m: m.name)

    def state(self, name: str) -> ModelState:
        """The model's entry; a name the repository does not have is an error listing those it has."""
        index = self.index()
        for model in index:
            if model.name == name:
                return model
        names = ", ".join(m.name for m in index) or "none"
        raise TritonizeError(f"model {name!r} is not in the repository at {self.connection.url}; models there: {names}")

    def load(self, name: str) -> ModelState:
        """Load (or, when the config changed, reload) the model; returns once it is READY. A model that
        fails to load is an error with Triton's reason. Loading an unchanged READY model does nothing."""
        self.state(name)
        self._call("load_model", name, what=f"load {name}")
        return self.state(name)

    def unload(self, name: str) -> ModelState:
        """Unload the model and wait until it is gone: Triton answers at once and unloads in the
        background (in-flight requests finish first)."""
        self.state(name)
        self._call("unload_model", name, what=f"unload {name}")
        deadline = time.monotonic() + self.connection.timeout
        while (model := self.state(name)).state in ("READY", "UNLOADING"):
            if time.monotonic() > deadline:
                raise TritonizeError(f"{name} is still {model.state} after {self.connection.timeout:g} s; "
                                     "requests in flight keep it, or raise --timeout")
            time.sleep(UNLOAD_POLL_S)
        return model

    def reload(self, name: str) -> ModelState:
        """Unload, then load: brings back a model whose instance died (a plain load of an unchanged
        config does nothing). The unload completes first, so two copies never share the device."""
        self.unload(name)
        return self.load(name)
