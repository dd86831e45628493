"""The embedded engine: the real tritonserver binary shipped in nvidia-pytriton, serving an unchanged
repository through Triton's Python backend and the project's Python-based backends.

While it serves, a Supervisor (serve/supervisor.py) reloads a model whose backend stub died. A model
`repo build` left out with a note (`<model>.not-built.txt`) is listed UNAVAILABLE with the note as its
reason, from a second, generated repository.

Its Triton is 2.51 (release 24.10): a platform added to Triton since (`torch_aoti`, from 26.03) is refused by its
core beside its backend, so such a model is served from a view of the repository in which its configs name the
Python-based backend that runs the platform here, all else as written (`bundled_view`).

Three traps are handled before they bite (../shared/docs/platform-facts.md):
1. the stub links libpython: the interpreter's LIBDIR goes first on LD_LIBRARY_PATH, else the
   distro's libpython of another patch level loads and fails in odd ways;
2. with numpy>=2 the stub loads models but passes zeros: refused with a clear message;
3. a stub that cannot start makes tritonserver hang for minutes: it is started once beforehand.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import tritonize
from tritonize.access import ControlKey, ServerTLS
from tritonize.errors import TritonizeError
from tritonize.machine import gpu_visible
from tritonize.model_repository import BACKENDS, CONFIG_NAME, Backend, not_built_notes, parse_config, release_problem
from tritonize.progress import say
from tritonize.serve import shm, unavailable
from tritonize.serve.process import RunningServer, ServerHandle, ServerInfo, choose_ports, endpoints
from tritonize.serve.repository import (
    CPU_CONFIG_NAME,
    DEFAULT_CONFIG_NAME,
    has_config_variant,
    model_control_flags,
    validate_repository,
)

PACKAGE_ROOT = Path(tritonize.__file__).resolve().parent.parent
# At SIGTERM (a stop, or the death of the process that started it) tritonserver waits up to this long
# for models to unload, by default 30 s: an instance whose stub died under traffic never finishes, so
# every stop took the whole 30 s.
EXIT_TIMEOUT_S = 5
BUNDLED_RELEASE = "24.10"  # the release of nvidia-pytriton 0.7.0's tritonserver (2.51.0)


@dataclass(frozen=True)
class BundledTriton:
    """The parts of nvidia-pytriton's wheel the embedded engine runs."""

    binary: Path
    python_backend: Path  # libtriton_python.so + triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub for the running Python
    libs: Path  # nvidia_pytriton.libs: what the binaries link, lost RPATH for copies

    @classmethod
    def find(cls) -> "BundledTriton":
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise TritonizeError("nvidia-pytriton is not installed; the embedded engine runs its tritonserver: "
                                 "pip install nvidia-pytriton (or use --engine docker)")
        root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        found = cls(
            binary=root / "bin" / "tritonserver",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / python / "triton_python_backend_stub",
            libs=root.parent.parent / "nvidia_pytriton.libs",
        )
        if not found.stub.is_file():
            raise TritonizeError(f"nvidia-pytriton ships no Python backend stub for Python {python}; "
                                 f"use a Python it supports ({', '.join(sorted(p.name for p in found.stub.parent.parent.iterdir()))})")
        for path in (found.binary, found.python_backend / "libtriton_python.so", found.libs):
            if not path.exists():
                raise TritonizeError(f"nvidia-pytriton is incomplete: {path} is missing; reinstall it")
        return found


def stub_environment(triton: BundledTriton) -> dict[str, str]:
    """The environment of tritonserver and its stubs: this interpreter's python3 first on PATH (the
    stub finds its packages through it), this interpreter's libpython and the bundled libs first on
    LD_LIBRARY_PATH."""
    bindir = Path(sys.executable).parent
    if not (bindir / "python3").exists():
        raise TritonizeError(f"{bindir} has no `python3`; the Triton Python stub finds its packages through it: "
                             "run tritonize from a virtual environment")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, str(triton.libs), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def check_stub_environment(triton: BundledTriton, stub: Path, env: dict[str, str]) -> None:
    """Refuse numpy>=2 and a stub that cannot start, before tritonserver waits on it for minutes."""
    numpy_version = importlib.metadata.version("numpy")
    if int(numpy_version.split(".")[0]) >= 2:
        raise TritonizeError(f"numpy {numpy_version} is installed, but Triton's Python backend stub needs numpy<2 "
                             "(with numpy 2 requests silently arrive as zeros): pip install 'numpy<2'")
    # Without arguments a healthy stub prints its usage and exits 1; 127 means it cannot even load.
    result = subprocess.run([str(stub)], env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 1:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TritonizeError(
            f"Triton's Python backend stub cannot start (exit {result.returncode}: {detail[0]}); it needs "
            f"libpython{sysconfig.get_config_var('LDVERSION')} from {sysconfig.get_config_var('LIBDIR')} and "
            f"the libraries in {triton.libs}"
        )


def assemble_backend_dir(triton: BundledTriton, dest: Path) -> Path:
    """A Triton backend directory: `python/` (the bundled Python backend and stub) and one
    directory per Python-based backend holding its model.py."""
    python = dest / "python"
    python.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(triton.python_backend / name, python / name)
    shutil.copy2(triton.stub, python / triton.stub.name)
    # The stub resolves packages through the venv's site-packages and ignores PYTHONPATH: each
    # model.py is a shim that puts PYTHONPATH back in front (a TensorRT installed outside the venv, say)
    # and loads the backend from the tritonize that starts this server.
    for backend in dict.fromkeys(python_backend_of(b) for b in BACKENDS.values()):
        (dest / backend).mkdir()
        (dest / backend / "model.py").write_text(
            "import os\n"
            "import sys\n"
            "sys.path[:0] = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p and p not in sys.path]\n"
            f"sys.path.insert(0, {str(PACKAGE_ROOT)!r})  # the tritonize that started this server\n"
            f"from tritonize.serve.backends.{backend}.model import TritonPythonModel  # noqa: E402,F401\n"
        )
    return dest


def python_backend_of(record: Backend) -> str:
    """The Python-based backend (serve/backends/<name>/) that runs a record's models here: its Triton backend, or for a
    platform younger than the bundled Triton, one named after the platform (its core refuses the pair)."""
    return record.platform if release_problem(record, BUNDLED_RELEASE) else record.backend


def for_bundled_core(cfg):
    """A ModelConfig as the bundled Triton loads it: a platform younger than its core with the Python-based backend
    that serves the platform here, else unchanged (the same message)."""
    younger = {b.platform: python_backend_of(b) for b in BACKENDS.values() if python_backend_of(b) != b.backend}
    if cfg.platform in younger:
        cfg.backend = younger[cfg.platform]
    return cfg


def bundled_view(repository: Path, dest: Path) -> Path:
    """`repository` as the bundled Triton can load it: itself, unless some model's config names a platform younger than
    its core; then `dest`, a directory of links to the repository's entries, in which each such model is a directory
    of links to its files but for its configs, written as `for_bundled_core` has them. Taken when the server starts:
    a model added to the repository later is served after a restart."""
    from google.protobuf import text_format

    def configs(model: Path) -> list[Path]:
        return [c for c in (model / CONFIG_NAME, *sorted((model / "configs").glob("*.pbtxt"))) if c.is_file()]

    def translated(model: Path) -> dict[Path, str]:
        """config file -> its text for the bundled core, for the configs that change."""
        found = {}
        for config in configs(model):
            cfg = parse_config(config)
            before = cfg.backend
            if for_bundled_core(cfg).backend != before:
                found[config] = text_format.MessageToString(cfg)
        return found

    changes = {m: t for m in sorted(repository.iterdir()) if m.is_dir() and (t := translated(m))}
    if not changes:
        return repository
    dest.mkdir()
    for entry in sorted(repository.iterdir()):
        if entry not in changes:
            (dest / entry.name).symlink_to(entry.resolve())
            continue
        for part in [*entry.iterdir(), *(entry / "configs").glob("*")]:
            placed = dest / part.relative_to(repository)
            placed.parent.mkdir(parents=True, exist_ok=True)
            if part in changes[entry]:
                placed.write_text(changes[entry][part])
            elif part.name != "configs" or part.parent != entry:
                placed.symlink_to(part.resolve())
    return dest


def resolve_config_name(repository: Path, requested: str | None) -> str | None:
    """The --model-config-name to run with: the user's choice (`config` means config.pbtxt), else
    `cpu` when no GPU is visible and the repository has configs/cpu.pbtxt variants."""
    if requested is not None:
        if requested == DEFAULT_CONFIG_NAME:
            return None
        if not has_config_variant(repository, requested):
            raise TritonizeError(f"no model in {repository} has configs/{requested}.pbtxt; "
                                 f"use `--config-name {DEFAULT_CONFIG_NAME}` for config.pbtxt")
        return requested
    if not gpu_visible() and has_config_variant(repository, CPU_CONFIG_NAME):
        say(f"no GPU visible: serving the configs/{CPU_CONFIG_NAME}.pbtxt variants "
            f"(--config-name {DEFAULT_CONFIG_NAME} serves config.pbtxt instead)")
        return CPU_CONFIG_NAME
    return None


class EmbeddedServer(ServerHandle):
    """The bundled tritonserver on one repository. `start()` returns a ServerInfo once the server is
    ready; `stop()` ends the process group (stubs included) and removes the temporary files.
    Also a context manager; `embedded_server()` is the usual way in. Clients reach it through the front
    (serve/front.py); tritonserver listens only on Unix sockets in the workdir."""

    def __init__(
        self,
        repository: Path,
        *,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_config_name: str | None = None,
        ready_timeout: float = 120.0,
        log_path: Path | None = None,
        models: tuple[str, ...] = (),
        supervise: bool = True,
        control_key: ControlKey | None = None,
        tls: ServerTLS | None = None,
    ):
        self.repository = Path(repository).resolve()
        self.host = host
        self.requested_ports = (http_port, grpc_port, metrics_port)
        self.requested_config_name = model_config_name
        self.ready_timeout = ready_timeout
        self.log_path = Path(log_path).resolve() if log_path else None
        self.models = models  # loaded at start; empty: all
        self.supervise = supervise  # reload a model whose backend stub died (off: to do it by hand)
        self.control_key = control_key  # restrict the control APIs to it (access.py); None: open
        self.tls = tls  # serve gRPC over TLS with this certificate
        self.not_built: Path | None = None  # the repository of the models `repo build` left out with a note
        self.served = self.repository  # what tritonserver reads: the repository, or the view of it (bundled_view)

    def command(self, load: tuple[str, ...] | None = None) -> list[str]:
        """tritonserver's command line, loading `load` at start (None: `models`): on the Unix sockets behind the
        front (whose old files it removes), without the control key (the front checks it) and without TLS (the
        front serves it)."""
        self.upstream.clear()
        command = [
            str(self.triton.binary),
            f"--model-repository={self.served}",
            *([f"--model-repository={self.not_built}"] if self.not_built else []),
            f"--backend-directory={self.backend_dir}",
            *self.upstream.flags(),
            "--disable-auto-complete-config",  # the repository's configs are complete; serve them as written
            *model_control_flags(self.models if load is None else load, all_when_empty=load is None),
            "--exit-on-error=false",  # a model that cannot load here is UNAVAILABLE; the others serve
            "--strict-readiness=false",
            "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0",
            f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
        ]
        if self.region_prefix:
            command.append(shm.prefix_flag(self.region_prefix))
        if self.config_name:
            command.append(f"--model-config-name={self.config_name}")
        return command

    def start(self) -> ServerInfo:
        validate_repository(self.repository, self.models)
        self.config_name = resolve_config_name(self.repository, self.requested_config_name)
        self.triton = BundledTriton.find()
        env = stub_environment(self.triton)
        self.ports = choose_ports(self.host, *self.requested_ports)
        self.prepare()
        atexit.register(self.stop)
        try:
            self.control_key = self.key_with_file()
            self.backend_dir = assemble_backend_dir(self.triton, self.workdir / "backends")
            self.served = bundled_view(self.repository, self.workdir / "repository")
            env["TRITONIZE_SCRATCH"] = str(self.workdir)  # where a backend unpacks what it loads (gone at stop)
            check_stub_environment(self.triton, self.backend_dir / "python" / self.triton.stub.name, env)
            notes = self._not_built_notes()
            self.not_built = self._not_built_repository(notes)
            self.start_front()
            self.server = RunningServer(
                self.command(), urls=endpoints(self.host, self.ports),
                log_path=self.log_path or self.workdir / "tritonserver.log", ready_timeout=self.ready_timeout, env=env,
                cwd=self.workdir, model_config_name=self.config_name, control_key=self.control_key,
                tls=self.tls is not None, not_built=notes,
                repositories=(self.served, *([self.not_built] if self.not_built else [])),  # as tritonserver reads them
            )
            info = self.server.start()
            self.serving(info)
            return info
        except BaseException:
            self.stop()
            raise

    def _not_built_notes(self) -> dict[str, str]:
        """The models `repo build` left out with a note (name -> note) that this server lists UNAVAILABLE."""
        return {name: note for name, note in not_built_notes(self.repository).items()
                if not (self.repository / name).exists() and (not self.models or name in self.models)}

    def _not_built_repository(self, notes: dict[str, str]) -> Path | None:
        """A repository of the models `repo build` left out with a note, each refusing to load with it."""
        if not notes:
            return None
        repository = self.workdir / "not-built"
        for name, note in notes.items():
            unavailable.write_model(repository, name, note)
        return repository

    def stop(self) -> None:
        super().stop()
        atexit.unregister(self.stop)


@contextlib.contextmanager
def embedded_server(
    repository: Path,
    *,
    host: str = "127.0.0.1",
    http_port: int | None = None,
    grpc_port: int | None = None,
    metrics_port: int | None = None,
    model_config_name: str | None = None,
    ready_timeout: float = 120.0,
    log_path: Path | None = None,
    control_key: ControlKey | None = None,
) -> Iterator[ServerInfo]:
    """Serve `repository` with the bundled tritonserver for the duration of the block.

    Ports left as None are picked free. `model_config_name` None chooses automatically (the
    configs/cpu.pbtxt variants when no GPU is visible); "config" forces config.pbtxt. Yields the
    ServerInfo of a ready server; on exit the whole process group is stopped and temporary files
    are removed. Failures raise TritonizeError (with the log's relevant tail when the server failed).
    `control_key`: restrict the control APIs to it (tritonize's own clients on this machine find it).
    """
    with EmbeddedServer(
        repository, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        model_config_name=model_config_name, ready_timeout=ready_timeout, log_path=log_path, control_key=control_key,
    ) as info:
        yield info
