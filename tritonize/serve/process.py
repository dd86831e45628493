"""What every engine shares once a tritonserver process runs: ports, readiness, the models' state,
the log's relevant tail, and stopping the whole process group."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tritonize.access import WORKDIR_PREFIX, ControlKey, ServerTLS, write_addresses
from tritonize.errors import TritonizeError
from tritonize.processes import die_with_parent, signal_name, start_time, stop_process_group
from tritonize.progress import Ticker, say
from tritonize.repository_index import model_states
from tritonize.serve import shm
from tritonize.serve.front import Front, Upstream
from tritonize.serve.healing import LOADED, Recorder, Served, read, restore
# A server that keeps dying is started again after the back-off of a model that keeps crashing.
from tritonize.serve.supervisor import CRASH_WINDOW_S, RELOAD_DELAYS_S, WINDOW, Supervisor

DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
OWNER_FILE = "owner"  # in each workdir: "<pid> <start time>" of the process that made it


@dataclass(frozen=True)
class ServerInfo:
    """A running server: where to reach it and what it loaded."""

    grpc_url: str  # "127.0.0.1:8001", as tritonclient.grpc wants it
    http_url: str  # "http://127.0.0.1:8000"
    metrics_url: str  # "http://127.0.0.1:8002/metrics" (Prometheus text)
    pid: int
    log_path: Path
    models: dict[str, tuple[str, str]]  # name -> (state, reason) from the repository index
    model_config_name: str | None = None  # the --model-config-name the server runs with
    control_key: ControlKey | None = None  # what the control APIs are restricted to; None: open
    tls: bool = False  # gRPC over TLS

    @property
    def ready_models(self) -> list[str]:
        return [name for name, (state, _) in self.models.items() if state == "READY"]


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def choose_ports(host: str, http: int | None, grpc: int | None, metrics: int | None,
                 avoid: frozenset[int] = frozenset()) -> Ports:
    """Given ports must be free (clear error otherwise); None picks a free one, never one of `avoid` (ports chosen
    for something else that does not listen yet)."""
    wanted = {"http": http, "grpc": grpc, "metrics": metrics}
    given = [p for p in wanted.values() if p is not None]
    if len(set(given)) != len(given):
        raise TritonizeError(f"the HTTP, gRPC and metrics ports must differ (got {wanted})")
    held = []  # keep picked sockets open so the three picks differ
    try:
        chosen = {}
        for what, port in wanted.items():
            if port is None:
                while True:  # a port of `avoid` is free now: hold it while picking another
                    s = _bind(host, 0)
                    held.append(s)
                    if s.getsockname()[1] not in avoid:
                        break
                chosen[what] = s.getsockname()[1]
            else:
                try:
                    _bind(host, port).close()
                except OSError as e:
                    raise TritonizeError(
                        f"port {port} on {host} is already in use or not available ({e.strerror}); stop what "
                        f"uses it or choose another with --{what}-port"
                    ) from None
                chosen[what] = port
        return Ports(**chosen)
    finally:
        for s in held:
            s.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is not "in use"
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        raise
    return s


def connect_host(host: str) -> str:
    """Where a local client reaches a server bound to `host`."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def endpoints(host: str, ports: Ports) -> tuple[str, str, str]:
    h = connect_host(host)
    h = f"[{h}]" if ":" in h else h
    return f"{h}:{ports.grpc}", f"http://{h}:{ports.http}", f"http://{h}:{ports.metrics}/metrics"


class RunningServer:
    """A tritonserver process (bundled binary or `docker run`) in its own process group: `start()`
    launches it and returns its ServerInfo once ready; `stop()` ends the whole group. `urls`: where it listens
    (gRPC HOST:PORT, HTTP and metrics URLs), as endpoints() gives them."""

    def __init__(self, command: list[str], *, urls: tuple[str, str, str], log_path: Path, ready_timeout: float,
                 env: dict[str, str] | None = None, cwd: Path | None = None, model_config_name: str | None = None,
                 control_key: ControlKey | None = None, tls: bool = False, not_built: dict[str, str] | None = None):
        self.command, self.urls, self.log_path = command, urls, Path(log_path)
        self.ready_timeout, self.env, self.cwd, self.model_config_name = ready_timeout, env, cwd, model_config_name
        self.control_key, self.tls = control_key, tls
        self.not_built = not_built or {}  # model -> the note `repo build` left: served UNAVAILABLE with it, by design
        self.process: subprocess.Popen | None = None
        self.python_envs: set[Path] = set()  # those there before this server started (at started_at)
        self.started_at = 0.0

    def start(self, append: bool = False) -> ServerInfo:
        """`append`: to the log (a start after a crash keeps the log of the crash)."""
        self.python_envs, self.started_at = python_envs(), time.time()
        with open(self.log_path, "ab" if append else "wb") as log:
            self.process = subprocess.Popen(
                self.command, env=self.env, cwd=self.cwd,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopping it reaches every stub
                preexec_fn=die_with_parent,
            )
        grpc_url, http_url, metrics_url = self.urls
        try:
            wait_until_ready(self.process, http_url, grpc_url, self.ready_timeout, self.log_path, not_built=self.not_built)
            models = model_states(http_url, self.control_key)
        except BaseException:
            self.stop()
            raise
        return ServerInfo(grpc_url=grpc_url, http_url=http_url, metrics_url=metrics_url, pid=self.process.pid,
                          log_path=self.log_path, models=models, model_config_name=self.model_config_name,
                          control_key=self.control_key, tls=self.tls)

    def exit_code(self) -> int | None:
        """None while the server runs."""
        return self.process.poll() if self.process is not None else None

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
            self.process = None
            remove_python_envs(python_envs() - self.python_envs, self.started_at, time.time())


# Triton's Python backend makes /tmp/python_env_XXXXXX when it starts (whatever TMPDIR says) and removes it when it is
# finalized: a server killed or crashed leaves it behind. Those made while this server ran that are still empty
# (tritonize's models use no EXECUTION_ENV_PATH, which is what would fill one) are taken as its own.
PYTHON_ENVS = Path("/tmp")


def python_envs() -> set[Path]:
    return set(PYTHON_ENVS.glob("python_env_??????"))


def remove_python_envs(folders: set[Path], started: float, stopped: float) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty (not ours), or already gone
            made = folder.stat()
            if made.st_uid == os.geteuid() and started <= made.st_ctime <= stopped:
                folder.rmdir()


def wait_until_ready(process: subprocess.Popen, http_url: str, grpc_url: str, timeout: float, log_path: Path,
                     every: float = 2.0, not_built: dict[str, str] | None = None) -> None:
    """Poll the server's readiness until `timeout`, saying every `every` seconds which models have loaded (from
    its log: the repository index may need the control key; `not_built` as in loading_progress); a server that
    exits or never gets ready is an error carrying the log's relevant tail."""
    start = time.monotonic()
    deadline, next_note = start + timeout, start + every
    ticker = Ticker()
    try:
        while True:
            if time.monotonic() >= next_note:
                next_note += every
                ticker.say(f"  loading: {loading_progress(log_path, not_built)}", time.monotonic() - start)
            code = process.poll()
            if code is not None:
                raise TritonizeError(f"tritonserver exited with code {code} before it was ready\n{log_tail(log_path)}")
            if _http_ok(f"{http_url}/v2/health/ready") and _tcp_open(grpc_url):
                return
            if time.monotonic() > deadline:
                raise TritonizeError(
                    f"tritonserver was not ready within {timeout:.0f} s (raise --ready-timeout if loading is slow)\n"
                    f"{log_tail(log_path)}"
                )
            time.sleep(0.1)
    finally:
        ticker.done()


_FAILED = re.compile(r"failed to load '([^']+)'")


def loading_progress(log_path: Path, not_built: dict[str, str] | None = None) -> str:
    """What the server's log says so far: the models loaded (the last few named) and those that failed. A model of
    `not_built` (name -> the note `repo build` left) fails to load by design: its note's first sentence says why."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return "starting"
    not_built = not_built or {}
    loaded, failed = list(dict.fromkeys(LOADED.findall(text))), list(dict.fromkeys(_FAILED.findall(text)))
    if not loaded and not failed:
        return "starting, no model loaded yet"
    line = f"{len(loaded)} model(s) loaded" + (f", latest {', '.join(loaded[-3:])}" if loaded else "")
    line += "".join(f"; {not_built[name].split('. ')[0]}" for name in failed if name in not_built)
    failed = [name for name in failed if name not in not_built]
    return line + (f"; failed: {', '.join(failed)}" if failed else "")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tcp_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def log_tail(log_path: Path, lines: int = 15, errors: int = 10) -> str:
    """The server log's error lines (glog `E...`) and its last lines, in log order, without repeats."""
    try:
        text = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return f"(no server log at {log_path})"
    keep = set(range(max(0, len(text) - lines), len(text)))
    keep |= set([i for i, line in enumerate(text) if line.startswith("E")][-errors:])
    body = "\n".join(f"  | {text[i]}" for i in sorted(keep))
    return f"server log {log_path} (errors and last lines):\n{body}"


def make_workdir() -> Path:
    """A new temporary directory for one server, owned by this process.

    First removes the directories whose owner is gone: a killed `tritonize serve` cannot clean up
    after itself. Several people may run servers on one machine, so a directory whose owner lives,
    or that names no owner, is left alone.
    """
    for stale in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid, started = (stale / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue
        if start_time(int(pid)) != started:
            shutil.rmtree(stale, ignore_errors=True)
            if not stale.exists():
                say(f"removed {stale}: left by a server whose process ({pid}) is gone")
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (workdir / OWNER_FILE).write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    return workdir


class ServerHandle:
    """The life cycle both engines share: `start()` (the engine's own) calls `prepare()`, sets `server`, calls
    `serving()` and returns a ServerInfo; `stop()` ends the server and removes its temporary `workdir` and its
    shared-memory regions; as a context manager, `with Engine(...) as info:`. `heal()` starts the server again
    after it died (`tritonize serve` calls it), with the models as the clients left them (serve/healing.py)."""

    server: RunningServer | None = None
    workdir: Path | None = None
    region_prefix: str | None = None  # names the server's shared-memory regions (serve/shm.py)
    control_key: ControlKey | None = None  # restricts the control APIs; None: open
    supervise: bool = True  # reload a model whose backend stub died, record the state heal() restores
    supervisor: Supervisor | None = None  # watching the server's models, if any
    recorder: Recorder | None = None
    front: Front | None = None  # on the user's ports; tritonserver listens only behind it, on `upstream`
    upstream: Upstream | None = None
    tls: ServerTLS | None = None  # served by the front on the gRPC port
    host: str = "127.0.0.1"
    ports: Ports | None = None  # where clients reach it
    restarts: int = 0  # by heal()

    def prepare(self) -> None:
        """Before a start: remove what servers that are gone left behind, then make this one's workdir and
        the prefix of its regions."""
        self.workdir = make_workdir()
        self.upstream = Upstream(self.workdir / "sockets")
        self.upstream.directory.mkdir(mode=0o700)
        shm.remove_stale()
        self.region_prefix = shm.region_prefix()
        self.crashes: list[float] = []  # monotonic times heal() was called within CRASH_WINDOW_S

    def start_front(self) -> None:
        """The front on the user's ports, passing requests on to `upstream` (an OSError when a port is taken)."""
        self.front = Front(self.host, (self.ports.http, self.ports.grpc, self.ports.metrics), self.upstream,
                           key=self.control_key, tls=self.tls, samples=self.samples)
        self.front.start()

    def key_with_file(self) -> ControlKey | None:
        """The control key with a file to point clients to: the user's, else one in the workdir (only
        the user can read it; it goes with the workdir when the server stops)."""
        key = self.control_key
        return key.written_to(self.workdir) if key and key.file is None else key

    def start(self) -> ServerInfo:
        raise NotImplementedError

    def command(self, load: tuple[str, ...] | None = None) -> list[str]:
        """The engine's command line, loading `load` at start (None: the models it was asked for)."""
        raise NotImplementedError

    def server_pid(self, info: ServerInfo) -> int | None:
        """tritonserver's process on this machine, None where it cannot be seen."""
        return info.pid

    def serving(self, info: ServerInfo, served: Served | None = None, given_up: dict[str, str] | None = None) -> None:
        """Once the server of `info` (the URLs tritonize reaches it at) is ready: tell this user's clients where it
        listens (access.py), then watch it (serve/supervisor.py, serve/healing.py): `served` and `given_up` as
        they were before a crash."""
        write_addresses(self.workdir, self.host, vars(self.ports), self.control_key)
        if not self.supervise:
            return
        self.supervisor = Supervisor(self.server_pid(info), info.http_url, info.metrics_url, self.control_key)
        for name, reason in (given_up or {}).items():  # the supervisor's word is newer than the recorder's
            self.supervisor.mark_unavailable(name, reason)
        self.supervisor.start()
        self.recorder = Recorder(info.http_url, self.control_key, served or read(info.http_url, self.control_key),
                                 self.server.log_path)
        self.recorder.start()

    def heal(self, code: int) -> None:
        """Start tritonserver again after it ended by itself with exit status `code`; raise once it died more
        often within CRASH_WINDOW_S than RELOAD_DELAYS_S allows."""
        seen, how = time.monotonic(), exit_words(code)
        self.crashes = [t for t in self.crashes if seen - t < CRASH_WINDOW_S] + [seen]
        tail = log_tail(self.server.log_path)
        if len(self.crashes) > len(RELOAD_DELAYS_S):
            raise TritonizeError(f"tritonserver {how} while serving, {len(self.crashes)} times within {WINDOW}, so "
                                 "tritonize serve stopped starting it again: find the cause (memory? see `dmesg`)\n" + tail)
        say(f"tritonserver {how} while serving; starting it again (crash {len(self.crashes)} within {WINDOW}; crash "
            f"{len(RELOAD_DELAYS_S) + 1} ends tritonize serve)\n{tail}")
        served = self.recorder.served if self.recorder else None  # None: not supervised, so as asked at start
        given_up = dict(self.supervisor.given_up) if self.supervisor else {}
        self._unwatch()
        self.server.stop()  # what is left of its group: the stubs
        shm.remove_owned(self.region_prefix)
        time.sleep(RELOAD_DELAYS_S[len(self.crashes) - 1])
        self.server.command = self.command(load=None if served is None else ())
        info = self.server.start(append=True)
        errors = restore(info.http_url, self.control_key, served, skip=tuple(given_up)) if served else []
        self.restarts += 1
        self.serving(info, served, given_up)
        say(f"tritonserver serves again, {time.monotonic() - seen:.1f} s after it was seen dead"
            + "".join(f"\n  could not load as before: {error}" for error in errors))

    def samples(self) -> str:
        """tritonize's own metrics, in Prometheus' text format (served after Triton's by the front)."""
        return ("# HELP tritonize_server_restarts_total Times tritonize serve started tritonserver again after it died.\n"
                "# TYPE tritonize_server_restarts_total counter\n"
                f"tritonize_server_restarts_total {self.restarts}\n")

    def _unwatch(self) -> None:
        for watcher in (self.recorder, self.supervisor):
            if watcher is not None:
                watcher.stop()
        self.recorder = self.supervisor = None

    def stop(self) -> None:
        self._unwatch()
        if self.server is not None:
            self.server.stop()  # returns once no process of the server is left
            self.server = None
        if self.front is not None:
            self.front.stop()
            self.front = None
        if self.region_prefix is not None:
            shm.remove_owned(self.region_prefix)
            self.region_prefix = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> ServerInfo:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def exit_words(code: int) -> str:
    """A Popen return code in words: `was killed by SIGSEGV`, `exited with code 1`."""
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
