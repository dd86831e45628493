"""What every engine shares once a tritonserver process runs: ports, its work dir, its front, the models' state,
starting it again after it died, and stopping the whole process group."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from tritonize.access import WORKDIR_PREFIX, ControlKey, ServerTLS, write_addresses
from tritonize.errors import TritonizeError
from tritonize.processes import die_with_parent, start_time, stop_process_group
from tritonize.progress import say
from tritonize.repository_index import model_states
from tritonize.serve import leftovers, shm
from tritonize.serve.front import Front
from tritonize.serve.front_common import Upstream
from tritonize.serve.healing import Recorder, Served, first_answer, read, restore
from tritonize.serve.readiness import ServerDied, exit_words, log_tail, wait_until_ready

# A server that keeps dying is started again after the back-off of a model that keeps crashing.
from tritonize.serve.supervisor import CRASH_WINDOW_S, RELOAD_DELAYS_S, WINDOW, Supervisor

DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
WATCH_S = 0.1  # how often a restart looks whether the new server still runs
STOP_WAIT_S = 10.0  # how long it then waits for the requests under way to end
T = TypeVar("T")
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
                 control_key: ControlKey | None = None, tls: bool = False, not_built: dict[str, str] | None = None,
                 repositories: tuple[Path, ...] = ()):
        self.command, self.urls, self.log_path = command, urls, Path(log_path)
        self.ready_timeout, self.env, self.cwd, self.model_config_name = ready_timeout, env, cwd, model_config_name
        self.control_key, self.tls = control_key, tls
        self.not_built = not_built or {}  # model -> the note `repo build` left: served UNAVAILABLE with it, by design
        self.backend_of = leftovers.backends_in(repositories)  # its repositories on this machine: tells its /tmp folders
        self.process: subprocess.Popen | None = None
        self.log = leftovers.ServerLog(self.log_path)  # the server's part of its log

    def start(self, append: bool = False) -> ServerInfo:
        """`append`: to the log (a start after a crash keeps the log of the crash)."""
        self.log = leftovers.ServerLog(self.log_path, self.log_path.stat().st_size if append and self.log_path.exists() else 0)
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
            self.mark_own()
        except BaseException:
            self.stop()
            raise
        return ServerInfo(grpc_url=grpc_url, http_url=http_url, metrics_url=metrics_url, pid=self.process.pid,
                          log_path=self.log_path, models=models, model_config_name=self.model_config_name,
                          control_key=self.control_key, tls=self.tls)

    def exit_code(self) -> int | None:
        """None while the server runs."""
        return self.process.poll() if self.process is not None else None

    def mark_own(self) -> None:
        """Mark the /tmp folders the running server made so far as its own (serve/leftovers.py)."""
        if self.process is not None and self.process.poll() is None:
            leftovers.mark(self.log, leftovers.own(self.log, self.backend_of), self.process.pid)

    def stop(self) -> None:
        """Stop the server's process group, then remove the /tmp folders it left: those marked while it ran, and
        where a signal ended it (its backends never finalized: every folder it made is still there) those its log
        tells."""
        if self.process is not None:
            stop_process_group(self.process)
            killed = self.process.returncode < 0
            self.process = None
            leftovers.remove(leftovers.marked(self.log) | (leftovers.own(self.log, self.backend_of) if killed else set()))


def make_workdir() -> Path:
    """A new temporary directory for one server, owned by this process.

    First removes the directories whose owner is gone, and the python_envs their servers marked: a killed
    `tritonize serve` cannot clean up after itself. Several people may run servers on one machine, so a
    directory whose owner lives, or that names no owner, is left alone.
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
    leftovers.remove(leftovers.orphaned())  # the python_envs such a server left in /tmp
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
    clock = staticmethod(time.monotonic)  # seconds: the crash window is read on it
    sleep = staticmethod(time.sleep)  # the back-off

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
        """Start tritonserver again after it ended by itself with exit status `code`, with the models as the clients
        left them, and say it serves again once a request to a restored model succeeded. A server that dies again
        meanwhile (while it starts, loads the models back or answers that request) is started again after the
        back-off; raise once it died more often within CRASH_WINDOW_S than RELOAD_DELAYS_S allows."""
        seen, during = self.clock(), "while serving"
        served = self.recorder.served if self.recorder else None  # None: not supervised, so as asked at start
        given_up = dict(self.supervisor.given_up) if self.supervisor else {}
        self.server.stop()  # first: its stubs hold its sockets, where the watchers' requests would wait out their timeout
        self._unwatch()
        while True:
            delay = self._crashed(code, during)
            self._clear()
            self.sleep(delay)
            try:
                info, errors, unanswered = self._restart(served, given_up)
                break
            except ServerDied as died:
                code, during = died.code, died.during
        self.serving(info, served, given_up)
        after = f"{self.clock() - seen:.1f} s after it was seen dead"
        say((f"tritonserver serves again, {after}" if unanswered is None else
             f"tritonserver runs again, {after}, but a request to {unanswered}")
            + "".join(f"\n  could not load as before: {error}" for error in errors.values()))

    def _crashed(self, code: int, during: str) -> float:
        """Count a death of the server (exit status `code`) in the window: the back-off before its next start;
        TritonizeError when it died too often."""
        now = self.clock()
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S] + [now]
        how, tail = exit_words(code), log_tail(self.server.log_path)
        if len(self.crashes) > len(RELOAD_DELAYS_S):
            raise TritonizeError(f"tritonserver {how} {during}, {len(self.crashes)} times within {WINDOW}, so "
                                 "tritonize serve stopped starting it again: find the cause (memory? see `dmesg`)\n" + tail)
        say(f"tritonserver {how} {during}; starting it again (crash {len(self.crashes)} within {WINDOW}; crash "
            f"{len(RELOAD_DELAYS_S) + 1} ends tritonize serve)\n{tail}")
        return RELOAD_DELAYS_S[len(self.crashes) - 1]

    def _clear(self) -> None:
        """What the dead server left: its process group (the stubs, which hold its sockets: Triton's stubs inherit
        them, so a request to the dead server waited out its timeout) and its shared-memory regions. Its sockets are
        Unix sockets behind the front, whose files the next start removes (Upstream.clear); the TCP ports are the
        front's, which stays up."""
        self.server.stop()
        shm.remove_owned(self.region_prefix)

    def _restart(self, served: Served | None, given_up: dict[str, str]) -> tuple[ServerInfo, dict[str, str], str | None]:
        """Start the server again and load `served` back: its ServerInfo, the models that could not load as before
        (model -> why), and the error of the request to a restored model if none succeeded. ServerDied when it dies
        meanwhile (its group is stopped then)."""
        self.server.command = self.command(load=None if served is None else ())
        info = self.server.start(append=True)
        self.restarts += 1
        if served is None:
            return info, {}, None
        errors = self._while_alive(lambda _: restore(info.http_url, self.control_key, served, skip=tuple(given_up)),
                                   "while it loaded the models back")
        self.server.mark_own()  # the backends the restore loaded
        restored = set(served.configs) - set(errors) - set(given_up)
        unanswered = self._while_alive(lambda dead: first_answer(info.http_url, served, restored, dead),
                                       "before its first answer")
        return info, errors, unanswered

    def _while_alive(self, work: Callable[[threading.Event], T], during: str) -> T:
        """`work(dead)` (requests to the server) in a thread while the server lives; ServerDied as soon as it dies,
        once its group is stopped (which ends the requests under way: no process holds the server's sockets any
        more) and `dead` set."""
        done: dict = {}
        dead = threading.Event()

        def run() -> None:
            try:
                done["result"] = work(dead)
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                done["error"] = e

        thread = threading.Thread(target=run, name="tritonize-heal", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(WATCH_S)
            code = self.server.exit_code()
            if code is not None and thread.is_alive():
                dead.set()
                self.server.stop()
                thread.join(STOP_WAIT_S)
                raise ServerDied(code, during)
        if "error" in done:
            raise done["error"]
        return done["result"]

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
