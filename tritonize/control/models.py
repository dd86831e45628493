"""Triton's model repository API over gRPC: which models the server knows and in what state, and
loading / unloading / reloading them (the server runs with --model-control-mode=explicit)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from tritonize.client.connection import Connection, refused, server_gone, short_reason
from tritonize.errors import TritonizeError
from tritonize.repository_index import clean_reason, index_state

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


class ModelControl:
    """The repository API of the server behind `connection`. Every gRPC call goes through `_call`
    (the one place for per-call metadata such as a control-API key)."""

    def __init__(self, connection: Connection):
        from tritonclient.utils import InferenceServerException

        self.connection = connection
        self._error = InferenceServerException

    def _call(self, method: str, *args, what: str, **kwargs):
        try:
            return getattr(self.connection.client, method)(*args, client_timeout=self.connection.timeout,
                                                           headers=self.connection.control_headers, **kwargs)
        except self._error as e:
            problem = refused(self.connection.url, e, what, self.connection.key is not None)
            if problem:
                raise problem from None
            status = str(e.status() or "")
            if "UNAVAILABLE" in status:
                raise server_gone(self.connection.url, e, what) from None
            if "DEADLINE_EXCEEDED" in status:
                raise TritonizeError(f"{what} did not finish within {self.connection.timeout:g} s; the server goes "
                                     "on with it (`tritonize models list` shows the state), or raise --timeout") from None
            raise TritonizeError(f"{what}: {clean_reason(e.message() or short_reason(e))}") from None

    def index(self) -> list[ModelState]:
        """The repository index, and the models loaded that it lacks: a key holder may load a model with files of its
        own (`file:1/model.py` in the load request), which Triton serves but leaves out of the index; its
        statistics list it."""
        index = self._call("get_model_repository_index", as_json=True, what="the repository index")
        models = {m["name"]: ModelState(m["name"], m.get("version", ""), *index_state(m)) for m in index.get("models", [])}
        statistics = self._call("get_inference_statistics", as_json=True, what="the statistics")
        for m in statistics.get("model_stats", []):
            if m["name"] not in models:
                models[m["name"]] = ModelState(m["name"], m.get("version", ""), "READY",
                                               "loaded with files of its own, not in the repository")
        return sorted(models.values(), key=lambda m: m.name)

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

    def load_config(self, name: str, config_json: str) -> ModelState:
        """Load the model with this config (Triton's model JSON) in place of its files' config; the files are not
        touched, and a later plain `load` reads them again. Returns once it is READY."""
        self.state(name)
        self._call("load_model", name, config=config_json, what=f"load {name} with a trial config")
        return self.state(name)

    def unload(self, name: str, wait: bool = True) -> ModelState:
        """Unload the model; Triton answers at once and unloads in the background once the requests
        in flight are done: with `wait`, return when it is gone."""
        self.state(name)
        self._call("unload_model", name, what=f"unload {name}")
        deadline = time.monotonic() + self.connection.timeout
        while wait and (model := self._find(name)).state in ("READY", "UNLOADING"):
            if time.monotonic() > deadline:
                raise TritonizeError(
                    f"{name} is still {model.state} after {self.connection.timeout:g} s: requests hold it (after a "
                    f"request failed on a dead instance it never finishes); `tritonize models load {name}` "
                    "serves it again meanwhile")
            time.sleep(UNLOAD_POLL_S)
        return self._find(name)

    def _find(self, name: str) -> ModelState:
        """The model's entry; one loaded with files of its own (no entry once unloaded) is UNAVAILABLE, unloaded."""
        return next((m for m in self.index() if m.name == name), ModelState(name, "", "UNAVAILABLE", "unloaded"))

    def reload(self, name: str) -> ModelState:
        """Unload, then load at once: brings back a model whose instance died (a plain load of an
        unchanged config does nothing). Not waiting for the unload is deliberate: an instance whose
        stub died and then failed a request stays UNLOADING for good (measured, Triton 2.51), while
        the load starts a new one at once; meanwhile both may hold memory."""
        self.unload(name, wait=False)
        return self.load(name)
