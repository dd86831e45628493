"""The gRPC side: reaching the server, describing a model from its config, running batches.

Everything a request needs (tensor names, dtype, max batch, preprocessing, labels) comes from the
server itself, so the client works with any repository `tritonize repo build` produced.

Three preprocessing paths reach a classifier (`--preprocess`): `client` sends the contract's FP32
tensor to the classifier itself; `server` sends the encoded image to the ensemble that runs the
repository's `preprocess` model first; `uint8` sends resized and cropped pixels to the ensemble
that only normalizes on the server. `model_for` finds the served model of a path from the configs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from tritonize.access import KEY_ENV, client_key, is_restricted_error, pem_file
from tritonize.errors import TritonizeError
from tritonize.images import batches
from tritonize.model_repository import model_names, why_absent
from tritonize.options import EXIT_USAGE
from tritonize.preprocessing import Preprocessing
from tritonize.repository_index import index_state

DEFAULT_URL = "localhost:8001"
# --preprocess paths, by what they send per image (images.load_images' forms).
PATH_OF_FORM = {"tensor": "client", "bytes": "server", "uint8": "uint8"}
PATHS = tuple(PATH_OF_FORM.values())


def check_url(url: str) -> str:
    """`url` as given, when it is HOST:PORT with a port gRPC can reach (a name, an IPv4 address or an [IPv6]
    address, then 1..65535); else one line that says what is wrong with it. gRPC itself would log from C
    about an empty one and take port 99999 for 34463 (it keeps the low 16 bits)."""
    def bad(what: str) -> TritonizeError:
        return TritonizeError(f"--url {url!r}: {what}; give the server's gRPC endpoint as HOST:PORT, e.g. {DEFAULT_URL}",
                              EXIT_USAGE)

    if not url.strip():
        raise bad("it is empty")
    host, colon, port = url.rpartition(":")
    if not colon or host.startswith("[") and not host.endswith("]") or not host and not port:
        raise bad("no port")
    if "/" in url:
        raise bad("gRPC takes no scheme or path")
    if not host.strip("[]").strip():
        raise bad("no host")
    if not port.isdigit():
        raise bad(f"port {port!r} is not a number")
    if not 1 <= int(port) <= 65535:
        raise bad(f"port {port} is out of range (1..65535)")
    return url


def short_reason(error: Exception | str) -> str:
    """The useful first line of a tritonclient/gRPC error."""
    text = error.message() if hasattr(error, "message") and callable(error.message) else str(error)
    text = (text or type(error).__name__).strip().splitlines()[0]
    return re.sub(r"^\[StatusCode\.\w+\]\s*", "", text)


def server_gone(url: str, error: Exception | str, during: str = "") -> TritonizeError:
    where = f" during {during}" if during else ""
    return TritonizeError(f"lost the Triton server at {url}{where} ({short_reason(error)}); is it still running? (`tritonize serve`)")


def refused(url: str, error: Exception, what: str, key_given: bool) -> TritonizeError | None:
    """The error for a call the server restricts to its control key (Triton answers UNAVAILABLE, as if it
    were gone), or None when that is not why the call failed."""
    if not is_restricted_error(short_reason(error)):
        return None
    if key_given:
        return TritonizeError(f"the server at {url} refused the control key given for {what}: it is not this server's "
                              "(a key `tritonize serve` generated is valid until that server stops)")
    return TritonizeError(f"the server at {url} restricts {what} to holders of its control key: pass "
                          f"--control-key-file FILE (the file `tritonize serve` printed) or set {KEY_ENV}")


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know about one served model, read from its config."""

    name: str
    max_batch_size: int  # 0: the model takes no batch axis
    input_name: str
    input_dtype: str  # Triton dtype name, e.g. "FP32"
    input_dims: tuple[int, ...]  # without the batch axis
    output_name: str
    output_dims: tuple[int, ...]
    preprocess: Preprocessing
    classifier: str = ""  # the model that computes the logits: itself, or an ensemble's last step
    weights: str = ""  # the weights it was built from (`repo build`'s source.weights): "none" = random init
    steps: tuple[str, ...] = ()  # an ensemble's step models, in order (preprocess, classifier); () for a model
    own_batch_axis: bool = False  # max_batch_size 0, dims with a batch axis of one image (a PT2 model Triton cannot batch)

    @classmethod
    def from_config(cls, config: dict) -> "ModelInfo":
        name = config.get("name", "?")
        inputs, outputs = config.get("input", []), config.get("output", [])
        if len(inputs) != 1 or len(outputs) != 1:
            raise TritonizeError(f"{name} has {len(inputs)} inputs and {len(outputs)} outputs; the client serves image classifiers (one of each)")
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        steps = config.get("ensemble_scheduling", {}).get("step", [])
        dtype = inputs[0].get("data_type", "TYPE_FP32").removeprefix("TYPE_")
        info = cls(
            name=name,
            max_batch_size=int(config.get("max_batch_size", 0)),
            input_name=inputs[0]["name"],
            input_dtype="BYTES" if dtype == "STRING" else dtype,
            input_dims=tuple(int(d) for d in inputs[0].get("dims", [])),
            output_name=outputs[0]["name"],
            output_dims=tuple(int(d) for d in outputs[0].get("dims", [])),
            preprocess=Preprocessing.from_parameters(params, name),
            classifier=steps[-1]["model_name"] if steps else name,
            weights=params.get("source.weights", ""),
            steps=tuple(step["model_name"] for step in steps),
        )
        if info.form != "tensor" and not steps:
            raise TritonizeError(f"{name} takes {info.input_dtype} and is no ensemble: it is a preprocessing model, not a "
                                 "classifier; classify with a classifier or one of its ensembles")
        expected = {"tensor": info.preprocess.input_shape, "uint8": info.preprocess.pixels_shape,
                    "bytes": (1,)}[info.form]
        if not info.max_batch_size and info.input_dims == (1, *expected) and info.output_dims[:1] == (1,):
            info = replace(info, input_dims=expected, output_dims=info.output_dims[1:], own_batch_axis=True)
        if info.input_dims != expected:
            raise TritonizeError(f"{name}: input dims {list(info.input_dims)} do not match its preprocessing contract {list(expected)}; rebuild the repository")
        return info

    @property
    def batch_axis(self) -> bool:
        """Whether requests carry a batch axis: Triton's (max_batch_size > 0), or the model's own of one image."""
        return self.max_batch_size > 0 or self.own_batch_axis

    @property
    def form(self) -> str:
        """What the model takes per image (images.load_images' forms): the contract's tensor, UINT8 pixels, or
        encoded bytes."""
        return {"BYTES": "bytes", "UINT8": "uint8"}.get(self.input_dtype, "tensor")

    @property
    def path(self) -> str:
        """The preprocessing path (--preprocess) that this model serves."""
        return PATH_OF_FORM[self.form]

    @property
    def np_dtype(self):
        from tritonclient.utils import triton_to_np_dtype

        return triton_to_np_dtype(self.input_dtype)

    @property
    def num_classes(self) -> int:
        return int(np.prod(self.output_dims)) if self.output_dims else 0


class Connection:
    """A client connection to one Triton server over gRPC (tritonclient's synchronous client).

    `key_file` (else TRITONIZE_CONTROL_KEY) holds the server's control key, sent only with the calls
    the server restricts (`control_headers`); `tls_ca` makes the connection TLS, verifying the server's
    certificate with that CA. `channel` is the same transport for other tritonclient clients."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 30.0, *, key_file: Path | None = None,
                 tls_ca: Path | None = None):
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        self.url, self.timeout = check_url(url), timeout
        self._grpc = grpcclient
        self._error = InferenceServerException
        self.key = client_key(key_file, url)
        self.control_headers = self.key.grpc_headers if self.key else None
        self.channel = {"ssl": True, "root_certificates": str(pem_file(tls_ca, "--tls-ca", "CERTIFICATE"))} if tls_ca else {}
        self.index_restricted = False  # set when the server refused its repository index for want of the key
        try:
            self.client = grpcclient.InferenceServerClient(url, **self.channel)
            live = self.client.is_server_live(client_timeout=min(timeout, 10.0))
        except Exception as e:  # noqa: BLE001 - connection refused, bad address, deadline exceeded, TLS handshake
            reason = short_reason(e)
            hint = "start one with `tritonize serve models/` or pass --url HOST:PORT"
            if tls_ca:
                hint = ("was its certificate signed by the --tls-ca given, for the host in --url? Without TLS on "
                        "the server, leave --tls-ca out")
            elif "Socket closed" in reason:
                hint += "; a server that serves gRPC over TLS needs --tls-ca CA.pem"
            raise TritonizeError(f"cannot reach a Triton server at {url} ({reason}); {hint}") from None
        if not live:
            raise TritonizeError(f"the Triton server at {url} is not live yet; wait for `tritonize serve` to print its model table")
        self._labels: dict[str, list[str]] = {}

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def is_local(self) -> bool:
        host = self.url.rsplit(":", 1)[0].strip("[]")
        return host in ("localhost", "127.0.0.1", "::1")

    def live(self) -> bool:
        """Whether the server answers its liveness call."""
        try:
            return self.client.is_server_live(client_timeout=min(self.timeout, 5.0))
        except self._error:
            return False

    def failure(self, error: Exception | str, model: str, during: str = "") -> TritonizeError:
        """What a failed call about `model` means: the server is down, or it is up and the model failed."""
        if not self.live():
            return server_gone(self.url, error, during)
        where = f" during {during}" if during else ""
        return TritonizeError(f"model {model!r} failed on the server at {self.url}{where}: {short_reason(error)}")

    def models(self, names: Sequence[str] = ()) -> dict[str, str]:
        """name -> "READY" or "UNAVAILABLE: reason" for every model in the repository.

        A server may keep its repository index to holders of its control key; without the key, the
        states of `names` and of the models `tritonize repo build` names come from the open health API
        instead: "READY" or "not READY" (it tells neither why, nor whether the model exists)."""
        try:
            index = self.client.get_model_repository_index(as_json=True, client_timeout=self.timeout,
                                                           headers=self.control_headers)
        except self._error as e:
            if self.key is None and is_restricted_error(short_reason(e)):
                self.index_restricted = True
                return {name: "READY" if self._ready(name) else "not READY" for name in dict.fromkeys([*names, *model_names()])}
            raise refused(self.url, e, "the repository index", self.key is not None) or server_gone(self.url, e) from None
        states = {}
        for entry in index.get("models", []):
            state, reason = index_state(entry)
            states[entry["name"]] = state if state == "READY" or not reason else f"{state}: {reason}"
        return states

    def _ready(self, name: str) -> bool:
        try:
            return self.client.is_model_ready(name, client_timeout=self.timeout)
        except self._error as e:
            raise server_gone(self.url, e) from None

    def ready_models(self) -> list[str]:
        return sorted(name for name, state in self.models().items() if state == "READY")

    def classifiers(self) -> list[str]:
        """READY models that take the contract's tensor themselves (not ensembles, not preprocessing models)."""
        found = []
        for name in self.ready_models():
            config = self._config(name)
            inputs = config.get("input", [])
            takes = inputs[0].get("data_type") if len(inputs) == 1 else None
            if "ensemble_scheduling" not in config and takes not in ("TYPE_STRING", "TYPE_UINT8"):
                found.append(name)
        return found

    def model(self, name: str) -> ModelInfo:
        """The model's description; an unknown or unready model is an error listing the others."""
        states = self.models((name,))
        if states.get(name) != "READY":
            listing = ", ".join(f"{n} ({s})" for n, s in sorted(states.items()) if n != name) or "none"
            what = "is not in the repository" if name not in states else f"is {states[name]}"
            hint = why_absent(name) if name not in states else None
            if self.index_restricted:
                ready = ", ".join(n for n, s in sorted(states.items()) if s == "READY") or "none of the names repo build gives"
                raise TritonizeError(f"model {name!r} is not READY at {self.url} (READY there: {ready}); which models the "
                                     "server has, and why one is not READY, is in its repository index, which needs its "
                                     f"control key: --control-key-file or {KEY_ENV}")
            raise TritonizeError(f"model {name!r} {what} at {self.url}" + (f": {hint}" if hint else "")
                                 + f"; models there: {listing}")
        return ModelInfo.from_config(self._config(name))

    def model_for(self, name: str, preprocess: str | None = None) -> ModelInfo:
        """The served model that runs classifier `name` along a preprocessing path: `client` is `name`
        itself, `server` and `uint8` the ensemble ending in `name` that takes encoded images or UINT8
        pixels. None: `server` when that ensemble is READY, else `client`. A name that is itself such
        an ensemble is used as it is."""
        if preprocess is not None and preprocess not in PATHS:
            raise TritonizeError(f"--preprocess must be one of {', '.join(PATHS)} (got {preprocess!r})")
        info = self.model(name)
        if info.path != "client" or preprocess == "client":
            if preprocess not in (None, info.path):
                raise TritonizeError(f"{name} takes {info.input_dtype} ({info.path} preprocessing); for --preprocess "
                                     f"{preprocess} name its classifier instead (--model {info.classifier})")
            return info
        variants = {}
        for other in self.ready_models():
            config = self._config(other)
            steps = config.get("ensemble_scheduling", {}).get("step", [])
            if other != name and steps and steps[-1].get("model_name") == name:
                candidate = ModelInfo.from_config(config)
                variants.setdefault(candidate.path, candidate)
        if preprocess is None:
            return variants.get("server", info)
        if preprocess not in variants:
            listing = ", ".join(f"{n} ({s})" for n, s in sorted(self.models().items()))
            raise TritonizeError(f"no READY ensemble at {self.url} runs {name} with {preprocess} preprocessing; models there: "
                                 f"{listing}. `tritonize repo build` builds them (unless --no-ensembles)")
        return variants[preprocess]

    def _config(self, name: str) -> dict:
        try:
            return self.client.get_model_config(name, as_json=True, client_timeout=self.timeout)["config"]
        except self._error as e:
            raise self.failure(e, name) from None

    def labels(self, model: ModelInfo) -> list[str]:
        """The model's class labels, from the server's classification extension.

        The config only names the label file; the classification extension is how gRPC hands out
        its contents. One batch-1 request asks for every class, cached per model, so the regular
        requests can fetch raw logits (exact softmax, and what `compare` needs). An ensemble's labels
        are its classifier's (`repo build` writes the same label file into both).
        """
        if model.classifier != model.name:
            return self.labels(self.model(model.classifier))
        if model.name in self._labels:
            return self._labels[model.name]
        zeros = np.zeros((1, *model.input_dims) if model.batch_axis else model.input_dims, dtype=model.np_dtype)
        inp = self._grpc.InferInput(model.input_name, list(zeros.shape), model.input_dtype)
        inp.set_data_from_numpy(zeros)
        out = self._grpc.InferRequestedOutput(model.output_name, class_count=model.num_classes)
        try:
            result = self.client.infer(model.name, [inp], outputs=[out], client_timeout=self.timeout)
        except self._error as e:
            raise self.failure(e, model.name) from None
        labels = [f"class {i}" for i in range(model.num_classes)]
        for entry in result.as_numpy(model.output_name).reshape(-1):
            parts = (entry.decode() if isinstance(entry, bytes) else str(entry)).split(":", 2)
            if len(parts) == 3:  # "score:index:label"; without a label file there is no third part
                labels[int(parts[1])] = parts[2]
        self._labels[model.name] = labels
        return labels

    def request(self, model: ModelInfo, batch: np.ndarray):
        """The tritonclient InferInput and InferRequestedOutput for one batch."""
        data = batch.astype(model.np_dtype, copy=False) if model.batch_axis else batch[0]
        inp = self._grpc.InferInput(model.input_name, list(data.shape), model.input_dtype)
        inp.set_data_from_numpy(data)
        return [inp], [self._grpc.InferRequestedOutput(model.output_name)]

    def infer(self, model: ModelInfo, batch: np.ndarray) -> np.ndarray:
        """Logits (N, classes) for one batch of at most max_batch_size images in the form the model takes."""
        inputs, outputs = self.request(model, batch)
        try:
            result = self.client.infer(model.name, inputs, outputs=outputs, client_timeout=self.timeout)
        except self._error as e:
            refused = re.search(rf"{re.escape(model.input_name)}\[(\d+)\]: (.+)", short_reason(e))
            if refused and model.form != "tensor":
                raise RejectedImage(int(refused[1]), refused[2]) from None
            raise self.failure(e, model.name) from None
        return result.as_numpy(model.output_name).reshape(len(batch), -1)

    def infer_all(self, model: ModelInfo, arrays: Sequence[np.ndarray], on_batch=None,
                  rejected: dict[int, str] | None = None) -> np.ndarray:
        """Logits for all images, sent in requests of at most the model's max_batch_size.

        on_batch(logits_so_far, seconds) is called after each request; when the server fails
        midway, PartialResult carries the logits obtained before the failure. An image the server's
        preprocessing refuses (its request fails alone) is recorded in `rejected` as {position:
        reason}, and its request is sent again without it: the logits then have no row for it.
        """
        done: list[np.ndarray] = []
        for chunk in batches(len(arrays), model.max_batch_size):
            members = list(range(len(arrays)))[chunk]
            while members:
                start = time.perf_counter()
                try:
                    logits = self.infer(model, np.stack([arrays[i] for i in members]))
                except RejectedImage as e:
                    if rejected is None:
                        raise
                    rejected[members.pop(e.index)] = e.reason
                    continue
                except TritonizeError as e:
                    raise PartialResult(str(e), np.concatenate(done) if done else np.zeros((0, model.num_classes))) from None
                done.append(logits)
                if on_batch:
                    on_batch(logits, time.perf_counter() - start)
                break
        return np.concatenate(done) if done else np.zeros((0, model.num_classes), np.float32)

    def statistics(self, name: str) -> dict:
        """Cumulative server-side counters for a model: {"success": (count, ns), "queue": ..., ...}."""
        try:
            stats = self.client.get_inference_statistics(name, as_json=True, client_timeout=self.timeout,
                                                         headers=self.control_headers)
        except self._error as e:
            raise refused(self.url, e, "its statistics", self.key is not None) or self.failure(e, name) from None
        totals: dict[str, list[int]] = {}
        for entry in stats.get("model_stats", []):
            for key, value in entry.get("inference_stats", {}).items():
                acc = totals.setdefault(key, [0, 0])
                acc[0] += int(value.get("count", 0))
                acc[1] += int(value.get("ns", 0))
            acc = totals.setdefault("executions", [0, 0])  # (execution count, inference count)
            acc[0] += int(entry.get("execution_count", 0))
            acc[1] += int(entry.get("inference_count", 0))
        return {k: tuple(v) for k, v in totals.items()}


class RejectedImage(TritonizeError):
    """The server's preprocessing refused image `index` of a request (only that request failed)."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"the server refused image {index} of the request: {reason}")
        self.index, self.reason = index, reason


class PartialResult(TritonizeError):
    """The server failed midway; `logits` holds what was obtained before."""

    def __init__(self, message: str, logits: np.ndarray):
        super().__init__(message)
        self.logits = logits
