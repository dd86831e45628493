"""`tritonize convert aoti`: the verified ExportedProgram -> an AOTInductor package (model_aoti.pt2) that Triton's
pytorch backend serves as `platform: "torch_aoti"` (aoti_model), verified against PyTorch eager at batch 1, an odd
batch and the max.

A package is compiled for one device (pytorch/pytorch#145730), as a TensorRT plan is built for one GPU: a CPU package
here, a GPU package on the GPU box (the manifest entry waits for it there with the one command to run, exit 3). It
is made for one Triton release, whose pytorch backend must serve it (model_repository's AOTI_MODEL record).
Compiling takes minutes (resnet18: 135 s on 2 cores): the entry records the ExportedProgram's sha256 and the
compiler (torch) version, and a package of the same pair, device, release and batch is up to date.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from tritonize import aoti
from tritonize.errors import TritonizeError
from tritonize.facts import file_facts, now_iso
from tritonize.files import ensure_writable_dir, staged_path
from tritonize.manifest import FileRef, Manifest, Package, Status, Target
from tritonize.model_repository import AOTI_MODEL, release_problem
from tritonize.progress import Ticker, say, step
from tritonize.releases import Release, latest_release, release_info
from tritonize.sources import build_model
from tritonize.stage import StageResult, StageStatus
from tritonize.verify import FP32, verification_inputs, verify_runner

PACKAGE_NAME = "model_aoti.pt2"  # in the artifacts directory (model.pt2 is the ExportedProgram); model.pt2 once served
DEVICES = ("auto", "cpu", "gpu")
TORCH_DEVICES = {"cpu": "cpu", "gpu": "cuda"}  # our word -> torch's and the package's (AOTI_DEVICE_KEY)
TICK_S = 5.0  # how often the compile's progress line is said again


@dataclass(frozen=True)
class AotiOptions:
    device: str = "auto"  # auto: this machine's GPU when torch sees one, else the CPU
    triton_release: str | None = None  # None: the newest release tritonize knows
    max_batch: int | None = None  # verified up to (the package itself, against eager); None: the program's max
    force: bool = False

    def __post_init__(self):
        if self.device not in DEVICES:
            raise TritonizeError(f"--device must be one of {', '.join(DEVICES)} (got {self.device!r})")
        if self.max_batch is not None and self.max_batch < 1:
            raise TritonizeError(f"--max-batch must be >= 1 (got {self.max_batch})")


def target_release(choice: str | None) -> Release:
    """--triton-release, else the newest release; refused (saying why) where Triton cannot serve the package."""
    release = release_info(choice) if choice else latest_release()
    problem = release_problem(AOTI_MODEL, release.release)
    if problem:
        raise TritonizeError(f"--triton-release {release.release}: {problem}; give --triton-release "
                             f"{AOTI_MODEL.first_release} or later")
    return release


def convert_aoti(artifacts: Path, options: AotiOptions = AotiOptions(), model=None) -> StageResult:
    """Compile, verify and publish the package, recording the manifest's `aoti` entry; `waiting_for_gpu` for a GPU
    package where torch sees no GPU, `up_to_date` when the recorded package is for the same ExportedProgram,
    compiler, device, release and batch (unless `options.force`). `model`: the eager module to verify against (the
    Python API's), else the spec's source builds it."""
    import torch

    out = ensure_writable_dir(Path(artifacts), "--artifacts")
    manifest = Manifest.load(out)
    spec = manifest.spec
    program = manifest.exported_program
    if program is None or program.status is not Status.verified:
        raise TritonizeError(f"{out}/manifest.json has no verified ExportedProgram to compile: run `tritonize export "
                             f"--format exported_program --artifacts {out}` first")
    problem = manifest.file_problem(program)
    if problem:
        raise TritonizeError(f"{problem}: re-run `tritonize export --format exported_program --artifacts {out}`")
    release = target_release(options.triton_release)
    device = options.device if options.device != "auto" else ("gpu" if torch.cuda.is_available() else "cpu")
    max_batch = options.max_batch or max(int(b) for b in program.verification.batches)  # verified here, at it
    command = ["tritonize", "convert", "aoti", "--device", "gpu", "--triton-release", release.release,
               *(["--max-batch", str(options.max_batch)] if options.max_batch else []), "--artifacts", str(out)]
    wanted = Package(
        status=Status.waiting_for_gpu, device=device, source=FileRef(program.file, program.sha256),
        compiler=torch.__version__, target=Target(release.release, release.image), max_batch=max_batch,
        input_name=AOTI_MODEL.default_input, output_name=AOTI_MODEL.default_output, gpu_command=shlex.join(command),
        created=now_iso())
    say(f"AOTInductor package of {program.file} for the {device.upper()} and Triton {release.release}, torch "
        f"{wanted.compiler}, verified up to batch {max_batch}")
    recorded = manifest.aoti
    waiting = f"on the GPU box run: {wanted.gpu_command}"
    if not options.force and recorded is not None and recorded.same_job(wanted):
        if recorded.status is Status.verified and manifest.file_problem(recorded) is None:
            say(f"  = {PACKAGE_NAME} is up to date (same ExportedProgram sha256 {program.sha256[:12]}, torch "
                f"{wanted.compiler}, device, release and batch); --force compiles it again")
            return StageResult("convert aoti", StageStatus.up_to_date, _detail(recorded))
    if device == "gpu" and not torch.cuda.is_available():
        manifest.record(AOTI_MODEL.artifact, wanted)
        say(f"  ! torch sees no GPU here: the GPU package is compiled on the GPU box; manifest entry "
            f"'{AOTI_MODEL.artifact}' is waiting_for_gpu")
        return StageResult("convert aoti", StageStatus.waiting_for_gpu, waiting)
    entry = _compile(manifest, program, spec, wanted, max_batch, model)
    return StageResult("convert aoti", StageStatus.done, _detail(entry))


def _compile(manifest: Manifest, program, spec, wanted: Package, max_batch: int, model=None) -> Package:
    import torch

    final = manifest.directory / PACKAGE_NAME
    with step(f"build {spec.arch} for the reference outputs (PyTorch eager, batch {max_batch})") as built:
        model = build_model(spec) if model is None else model
        pre = spec.preprocessing
        inputs = verification_inputs(spec.input_shape, max_batch, pre.mean, pre.std)
        with torch.inference_mode():
            reference = model(torch.from_numpy(inputs)).numpy()
        del model
    with staged_path(final) as staged, aoti.inductor_files(manifest.directory):
        with step(f"compile {program.file} with AOTInductor for the {wanted.device.upper()}") as compiled:
            with open(manifest.path(program), "rb") as f:
                exported = torch.export.load(f)
            with _one_thread(), _ticking(f"  … compiling {PACKAGE_NAME}"), open(staged, "wb") as f:
                # a file object: a path must end in .pt2, and the staged one does not
                torch._inductor.aoti_compile_and_package(exported, package_path=f)
            del exported
        with step(f"verify {PACKAGE_NAME} (batches 1, odd, max)") as checked, open(staged, "rb") as f:
            package = torch._inductor.aoti_load_package(f)  # a file object, as at compile: the path lacks .pt2
            call_spec = package.loader.get_call_spec()
            device = torch.device(TORCH_DEVICES[wanted.device])

            def run(x: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return package(torch.from_numpy(x).to(device)).cpu().numpy()

            report = verify_runner(run, inputs, reference, FP32)
            package = None  # the loaded package freed (run's cell too) before the file is published
        if not report.passed:
            raise TritonizeError(f"the AOTInductor package failed verification against PyTorch eager ({report.summary()}; "
                                 f"tolerance {report.tolerance.max_rel_to_scale:.0e} of scale); it was not published")
        inputs_named, outputs_named = aoti.tensor_names(call_spec)
        entry = replace(
            wanted, status=Status.verified, **{**file_facts(staged), "file": PACKAGE_NAME}, input_name=inputs_named[0],
            output_name=outputs_named[0], verification=report,
            details={"call_spec": {"inputs": inputs_named, "outputs": outputs_named}, "metadata": aoti.metadata(staged),
                     "timings": {"reference": asdict(built), "compile": asdict(compiled), "verify": asdict(checked)}})
        manifest.publish(AOTI_MODEL.artifact, entry, staged)
    say(f"  ✓ published {final} ({entry.size_bytes / 1e6:.0f} MB) — {report.summary()}")
    return entry


@contextlib.contextmanager
def _one_thread():
    """Compile on one thread (no pool of worker processes stays behind in this process), without precompiled headers
    (kept in a directory fixed when torch._inductor is first imported, which aoti.inductor_files removes)."""
    import torch._inductor.config as inductor

    with inductor.patch({"compile_threads": 1, "aot_inductor.precompile_headers": False}):
        yield


@contextlib.contextmanager
def _ticking(status: str):
    """Say `status` with the time spent while the block runs (the compiler says nothing for minutes): redrawn every
    TICK_S on a terminal, a line a minute into a log."""
    ticker, stop, start = Ticker(), threading.Event(), time.monotonic()

    def tick() -> None:
        while not stop.wait(TICK_S):
            elapsed = time.monotonic() - start
            ticker.say(f"{status}, {elapsed // 60:.0f} min so far" if elapsed >= 60 else status, elapsed)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        ticker.done()


def _detail(entry: Package) -> str:
    return f"{entry.device.upper()} package for Triton {entry.target.triton_release}, torch {entry.compiler}"
