"""What `tritonize serve` needs to start tritonserver again after it died (SIGSEGV, the OOM killer, kill -9) as
the clients left it: the state the model repository API made, recorded while the server serves.

Explicit model control makes that state: the models loaded, unloaded or given up (serve/supervisor.py), and the
config each READY model serves, which `tritonize tune` and `models load --config` change with a load that carries
a config. A `Recorder` reads the repository index and the READY models' configs every RECORD_S. After a crash the
new server starts with no model, and `restore` loads each READY model with the config it served, without its
warmup (heal first, as the supervisor does after a stub crash: at batch 32 the warmup took most of a load), the
ensembles once their steps are loaded, and again each model whose load had failed (its reason comes back); the
supervisor then gives up again on those it had given up. `tritonize serve` says it serves again once a request to a
restored model succeeded (`first_answer`).

A server that dies again meanwhile is started again, after the back-off (serve/process.py `heal`): its process group
is stopped first, because Triton's stubs inherit the server's sockets (a stub started by a load holds the listening
sockets and that load's connection), so a load sent to a server that died waited out LOAD_TIMEOUT_S while its stubs
lived on (299 s without service after two kill -9s 4.5 s apart).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tritonize.access import ControlKey
from tritonize.repository_index import clean_reason, model_states
from tritonize.serve.supervisor import RELOADED, probe_body

RECORD_S = 0.5
TIMEOUT_S = 10.0
LOAD_TIMEOUT_S = 300.0  # a torch model on a busy machine
FIRST_ANSWER_S = 60.0  # how long a restored model may fail requests before serve says so (a stub warming up)
NOT_ASKED = ("unloaded", "not loaded")  # the index's reasons for a model no one asked to be loaded
LOADED = re.compile(r"successfully loaded '([^']+)'")  # Triton's log line of each model it loaded


@dataclass(frozen=True)
class Served:
    """The server as the model repository API left it."""

    configs: dict[str, dict] = field(default_factory=dict)  # READY model -> the config it serves (Triton's JSON)
    failed: tuple[str, ...] = ()  # models whose load failed, or that were loading


def config(http_url: str, name: str) -> dict:
    with urllib.request.urlopen(f"{http_url}/v2/models/{name}/config", timeout=TIMEOUT_S) as response:
        return json.loads(response.read())


def read(http_url: str, key: ControlKey | None, known: dict[str, dict] | None = None,
         loaded: set[str] = frozenset()) -> Served:
    """What the server at `http_url` serves now (OSError, ValueError while it is not answering). The config of a
    READY model is taken from `known` unless the model is new there or in `loaded` (loaded again since)."""
    known = known or {}
    configs, failed = {}, []
    for name, (state, reason) in model_states(http_url, key).items():
        if state == "READY":
            if name in known and name not in loaded:
                configs[name] = known[name]
                continue
            try:
                configs[name] = config(http_url, name)
            except urllib.error.HTTPError:  # unloaded meanwhile
                continue
        elif state == "LOADING" or state == "UNAVAILABLE" and reason not in NOT_ASKED:
            failed.append(name)
    return Served(configs, tuple(failed))


class Recorder:
    """Reads the state of one server every RECORD_S in a daemon thread; `served` is the last one read. A model's
    config is read again only when the server's log says it loaded (`successfully loaded 'NAME'`): a load with
    another config leaves the index as it was."""

    def __init__(self, http_url: str, key: ControlKey | None, served: Served, log_path: Path):
        self.http_url, self.key, self.served, self.log_path = http_url, key, served, log_path
        self._read_to = self._log_size()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tritonize-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(TIMEOUT_S * 2)

    def _run(self) -> None:
        while not self._stop.wait(RECORD_S):
            try:
                loaded = self._loaded_since()
                served = read(self.http_url, self.key, self.served.configs, loaded)
            except (OSError, ValueError):  # the server is stopping or dead: keep what it served last
                continue
            if not self._stop.is_set():
                self.served = served

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _loaded_since(self) -> set[str]:
        """The models the log says loaded since the last call (none while it has no log)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._read_to)
                text = log.read()
        except FileNotFoundError:
            return set()
        self._read_to += len(text)
        return set(LOADED.findall(text.decode(errors="replace")))


def restore(http_url: str, key: ControlKey | None, served: Served, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Load `served` into a new server that started with no model, but for `skip`; the errors of the models
    that were READY (model -> one line)."""
    configs = {n: c for n, c in served.configs.items() if n not in skip}
    plain = {n: c for n, c in configs.items() if c.get("platform") != "ensemble"}
    ensembles = {n: c for n, c in configs.items() if n not in plain}
    failed = {n: None for n in served.failed if n not in skip}

    def load(item: tuple[str, dict | None]) -> str | None:
        name, config = item
        body = {"parameters": {"config": json.dumps(_fresh(config))}} if config else {}
        request = urllib.request.Request(f"{http_url}/v2/repository/models/{name}/load", data=json.dumps(body).encode(),
                                         headers=key.http_headers if key else {})
        try:
            urllib.request.urlopen(request, timeout=LOAD_TIMEOUT_S).close()
        except urllib.error.HTTPError as e:
            return f"{name}: {clean_reason(json.loads(e.read() or b'{}').get('error', str(e)))}"
        except OSError as e:
            return f"{name}: {e}"
        return None

    errors = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for group in ({**plain, **failed}, ensembles):  # an ensemble loads its steps from their files otherwise
            results = zip(group.items(), pool.map(load, group.items()))
            errors.update({name: error for (name, _), error in results if error and name in served.configs})
    return errors


def first_answer(http_url: str, served: Served, restored: set[str], dead: threading.Event) -> str | None:
    """Ask one model of `restored` (not an ensemble: its steps are models of their own) a request of valid input
    (serve/supervisor.py's probe; inference needs no control key), again until one succeeds, FIRST_ANSWER_S passed
    or the server is `dead`: None once one did, or when there is no model to ask; else "MODEL: the last error"."""
    asked = [name for name in sorted(restored) if served.configs[name].get("platform") != "ensemble"]
    if not asked:
        return None
    name, deadline = asked[0], time.monotonic() + FIRST_ANSWER_S
    request = urllib.request.Request(f"{http_url}/v2/models/{name}/infer", data=probe_body(served.configs[name]))
    while True:
        try:
            urllib.request.urlopen(request, timeout=TIMEOUT_S).close()
            return None
        except urllib.error.HTTPError as e:
            problem = clean_reason(json.loads(e.read() or b"{}").get("error", str(e)))
        except OSError as e:
            problem = str(e)
        if time.monotonic() > deadline or dead.wait(0.1):
            return f"{name}: {problem}"


def _fresh(config: dict) -> dict:
    """The config as a new server loads it: without warmup, nor the supervisor's mark of a reload after a stub crash."""
    parameters = {k: v for k, v in config.get("parameters", {}).items() if k != RELOADED}
    return {k: v for k, v in {**config, "parameters": parameters}.items() if k != "model_warmup"}
