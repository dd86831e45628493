"""The model repository as the stages share it: the models tritonize names, the files of a repository, and which
GPU kinds a TensorRT model's plans serve.

`repo build` writes a repository (repository_builder/); `serve`, the client and the operating commands read it.
What they all need to agree on lives here, at the ground floor, as the manifest's schema lives in manifest.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.errors import TritonizeError

# --- the files -----------------------------------------------------------------------------------------------
CONFIG_NAME = "config.pbtxt"
LABELS_NAME = "labels.txt"
REQUIREMENTS_NAME = "requirements.txt"  # pip packages a Python model needs in the server's Python
# `<repository>/<model>.not-built.txt`: why `repo build` left a model out that a GPU box can still build,
# and what to run. Triton ignores files at the top of a repository; `serve` shows the note.
NOT_BUILT_SUFFIX = ".not-built.txt"


def not_built_notes(repository: Path) -> dict[str, str]:
    """model name -> the note `repo build` left about why it is not in `repository`."""
    return {p.name.removesuffix(NOT_BUILT_SUFFIX): p.read_text().strip()
            for p in sorted(Path(repository).glob(f"*{NOT_BUILT_SUFFIX}")) if p.is_file()}


def parse_config(path: Path):
    """Parse a config.pbtxt against Triton's schema; TritonizeError with the parser's message."""
    try:
        return text_format.Parse(Path(path).read_text(), pb.ModelConfig())
    except text_format.ParseError as e:
        raise TritonizeError(f"{path}: {e}") from None


# --- the models ----------------------------------------------------------------------------------------------
# Where a backend's instances run (Backend.runs): anywhere (KIND_AUTO: the GPU when the server has one), on a GPU or
# the CPU only, or on the device its artifact was compiled for (an AOTInductor package's).
ANY, GPU, CPU, COMPILED = "any", "gpu", "cpu", "compiled"
# What must hold, beyond its artifact being there, before `repo build` serves a backend (Backend.gate).
PLAN_BUILT = "plan built"  # a TensorRT plan built by the TensorRT of its target release (on a GPU box)
CPU_GATES = "cpu gates"  # `convert cpu`'s gates passed: agreement with FP32 and speed through the server
RELEASE = "release"  # its target release's backend serves the platform (first_release; batching from batching_release)


@dataclass(frozen=True)
class Backend:
    """One classifier of the repository, the one place that knows it: every table the stages need (platform ->
    Triton backend, default files, artifact keys, the embedded engine's Python-based backends, ...) is derived
    from these records."""

    name: str  # model directory and config name
    artifact: str  # its manifest entry's key
    backend: str  # Triton's backend; the embedded engine runs serve/backends/<backend>/model.py for it
    platform: str  # Triton platform string
    filename: str  # the file Triton's backend loads from <model>/<version>/ without a default_model_filename
    default_input: str
    default_output: str
    ensemble: str  # its ensemble taking encoded images; `<ensemble>_uint8` takes UINT8 pixels
    made_by: str  # the command that writes its artifact
    runs: str = ANY  # where its instances run: ANY, GPU, CPU or COMPILED
    gate: str | None = None  # what must hold besides (PLAN_BUILT, CPU_GATES, RELEASE); None: nothing
    first_release: str | None = None  # the first Triton release whose backend serves it (None: every one)
    batching_release: str | None = None  # the first release whose backend batches it (None: every one)
    why_release: str = ""  # why releases before first_release cannot serve it, and from where batching comes
    why_unbatched: str = ""  # the evidence that releases before batching_release do not batch it

    @property
    def needs_gpu(self) -> bool:
        return self.runs == GPU

    @property
    def cpu_only(self) -> bool:
        return self.runs == CPU


ONNX_MODEL = Backend("onnx_model", "onnx", "onnxruntime", "onnxruntime_onnx", "model.onnx", "input", "output",
                     "onnx_classifier", "`tritonize export`")
TORCH_MODEL = Backend("torch_model", "torchscript", "pytorch", "pytorch_libtorch", "model.pt", "input__0", "output__0",
                      "torch_classifier", "`tritonize export`")
TRT_MODEL = Backend("trt_model", "tensorrt", "tensorrt", "tensorrt_plan", "model.plan", "input", "output",
                    "trt_classifier", "`tritonize convert trt`", runs=GPU, gate=PLAN_BUILT)
ONNX_INT8_MODEL = Backend("onnx_int8_model", "onnx_int8_cpu", "onnxruntime", "onnxruntime_onnx", "model.onnx", "input",
                          "output", "onnx_int8_classifier", "`tritonize convert cpu --calib-images DIR`", runs=CPU,
                          gate=CPU_GATES)
# PyTorch 2 (AOTInductor) in Triton's pytorch backend, read in triton-inference-server/pytorch_backend's source:
# platform torch_aoti from r26.03 (#179), but r26.03/r26.04 take the package's call spec, two strings (its inputs'
# and outputs' pytree specs), for its input list (src/pt2/model_instance_state.cc ValidateInputs): a one-input
# classifier does not load ("configuration expects 1 inputs, but model expects 2 inputs"). r26.05 (#188) names
# the tensors from the call spec, ARGS[i] and RESULT (tritonize/aoti.py); its README: "Support for batch sizes
# greater than 1 and for sequence batching ... has not been completed". Release 2.71.0 (26.07): "PyTorch backend:
# Enabled PyTorch 2 batching" (#196/#198).
AOTI_MODEL = Backend("aoti_model", "aoti", "pytorch", "torch_aoti", "model.pt2", "ARGS[0]", "RESULT", "aoti_classifier",
                     "`tritonize convert aoti`", runs=COMPILED, gate=RELEASE, first_release="26.05",
                     batching_release="26.07",
                     why_release="its pytorch backend serves a PT2 package (platform torch_aoti) of a one-input classifier "
                                 "from 26.05 (26.03 and 26.04 bind the inputs to the package's two call-spec strings, "
                                 "so one input does not load), and batches it from 26.07 (release 2.71.0: \"Enabled "
                                 "PyTorch 2 batching\")",
                     why_unbatched="pytorch_backend's README up to r26.06: \"Support for batch sizes greater than 1 ... has "
                                   "not been completed\"; release 2.71.0 (26.07): \"PyTorch backend: Enabled PyTorch 2 batching\" "
                                   "(pytorch_backend#196/#198)")
BACKENDS = {b.name: b for b in (ONNX_MODEL, TORCH_MODEL, TRT_MODEL, ONNX_INT8_MODEL, AOTI_MODEL)}
DEFAULT_MODEL = ONNX_MODEL.name  # what a client talks to unless told: it serves on any machine


# --- Triton's backends, as its core reads a config (core model_config_utils.cc AutoCompleteBackendFields,
# ValidateModelConfig): ours from the records above, and those no tritonize model uses --------------------------
@dataclass(frozen=True)
class TritonBackend:
    name: str
    platforms: tuple[str, ...] = ()
    filename: str = ""  # the file it loads by default
    typed: bool = False  # Triton's core knows it by type: it takes its own platforms only


PYTHON = "python"  # Triton's Python backend: the preprocessing models (and every model of the embedded engine)
OTHER_BACKENDS = (
    TritonBackend("tensorflow", ("tensorflow_graphdef", "tensorflow_savedmodel"), "model.savedmodel", typed=True),
    TritonBackend("openvino", filename="model.xml"),
    TritonBackend(PYTHON, filename="model.py"),
    *(TritonBackend(name) for name in ("fil", "dali", "vllm", "tensorrtllm", "identity", "repeat", "square")),
)
ENSEMBLE = "ensemble"  # the ensemble platform, which has no backend
# The order in which Triton's core tries the backends it recognizes by the file in a version directory, and the
# one whose file may be a directory (an ONNX model with external data).
CORE_ORDER = ("tensorflow", "tensorrt", "onnxruntime", "openvino", "pytorch", PYTHON)
DIRECTORY_MODEL = ONNX_MODEL.backend
_IN_CORE_ORDER = sorted(BACKENDS.values(), key=lambda b: CORE_ORDER.index(b.backend))
PLATFORMS = {**{b.platform: b.backend for b in _IN_CORE_ORDER},
             **{p: o.name for o in OTHER_BACKENDS for p in o.platforms}, ENSEMBLE: ENSEMBLE}  # platform -> backend
TRITON_BACKENDS = {*(b.backend for b in BACKENDS.values()), *(o.name for o in OTHER_BACKENDS)}
TYPED_BACKENDS = {*(b.backend for b in BACKENDS.values()), *(o.name for o in OTHER_BACKENDS if o.typed)}


def _release(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


def release_problem(backend: Backend, release: str) -> str | None:
    """Why Triton `release` cannot serve `backend` (None: it can)."""
    if backend.first_release and _release(release) < _release(backend.first_release):
        return f"Triton {release} cannot serve {backend.name}: {backend.why_release}"
    return None


def batches(backend: Backend, release: str | None) -> bool:
    """Whether Triton `release` batches `backend` (None: a release tritonize does not know; it is not assumed)."""
    return not backend.batching_release or (release is not None and _release(release) >= _release(backend.batching_release))


def served_as(backend: str | None, platform: str | None) -> Backend | None:
    """The first record of Triton's `backend` with this platform, else its first record (None: none is ours)."""
    records = [b for b in BACKENDS.values() if b.backend == backend]
    return next((b for b in records if b.platform == platform), records[0] if records else None)


def default_file(backend: str | None, platform: str | None) -> str:
    """The file Triton's `backend` loads without a default_model_filename ("" when it has none)."""
    record = served_as(backend, platform)
    return record.filename if record else next((o.filename for o in OTHER_BACKENDS if o.name == backend), "")


def artifact_key(backend: str | None, platform: str | None) -> str | None:
    """The manifest entry a model serves unless its config names one (`source.artifact`, as a precision variant
    does): the first record's of its backend and platform."""
    record = served_as(backend, platform)
    return record.artifact if record else None


def backend_of(cfg) -> str | None:
    """The Triton backend of a config: its own, else its platform's."""
    return cfg.backend or PLATFORMS.get(cfg.platform)


def autocompleted(cfg, model_dir: Path):
    """`cfg` with the backend and platform Triton fills in before it validates a config (core model_config_utils.cc
    AutoCompleteBackendFields, which runs with --disable-auto-complete-config too): from the platform, the
    default_model_filename, or the files of the first version directory."""
    subdirs = sorted(p for p in model_dir.iterdir() if p.is_dir()) if model_dir.is_dir() else []
    content = {p.name: p for p in subdirs[0].iterdir()} if subdirs else {}
    named = cfg.default_model_filename
    recognized = [*dict.fromkeys((b.backend, b.platform, b.filename) for b in _IN_CORE_ORDER),
                  (PYTHON, "", default_file(PYTHON, None))]
    for backend, platform, filename in recognized:
        if not cfg.backend:
            found = filename in content and (backend in (DIRECTORY_MODEL, PYTHON) or content[filename].is_file())
            if (platform and cfg.platform == platform) or named == filename or (not cfg.platform and not named and found):
                cfg.backend = backend
        if cfg.backend == backend:
            cfg.platform = cfg.platform or platform
            return cfg
    return cfg


@dataclass(frozen=True)
class Preprocessor:
    """A Python-backend model that turns what a client sends into the classifiers' FP32 input."""

    name: str  # model directory
    input_name: str
    form: str  # what it takes per image (images.load_images' forms): "bytes" (encoded image) or "uint8" (pixels)
    suffix: str  # of the ensembles that start with it: onnx_classifier, onnx_classifier_uint8

    def ensemble(self, backend: Backend) -> str:
        return backend.ensemble + self.suffix


PREPROCESSORS = (Preprocessor("preprocess", "IMAGE", "bytes", ""), Preprocessor("preprocess_uint8", "PIXELS", "uint8", "_uint8"))


PREPROCESSED = "PREPROCESSED"  # the preprocessing models' output: a classifier's input
LOGITS = "LOGITS"  # every ensemble's output


def model_names() -> list[str]:
    """Every model name `repo build` gives: classifiers, preprocessing models, ensembles."""
    return [*BACKENDS, *(p.name for p in PREPROCESSORS), *(p.ensemble(b) for b in BACKENDS.values() for p in PREPROCESSORS)]


def why_absent(name: str) -> str | None:
    """Why a model that `repo build` names may be missing from a repository, and what builds it (None: a name
    `repo build` does not give)."""
    for backend in BACKENDS.values():
        if name in (backend.name, *(p.ensemble(backend) for p in PREPROCESSORS)):
            if backend.gate == PLAN_BUILT:
                return f"its TensorRT plan is built on a GPU box: run {backend.made_by} there, then `tritonize repo build`"
            if backend.gate == CPU_GATES:
                return (f"it is built only once {backend.made_by} made the INT8 variant and its gates passed, then "
                        "`tritonize repo build`")
            if backend.gate == RELEASE:
                return (f"it is built once {backend.made_by} compiled its package (a GPU's on a GPU box), for Triton "
                        f"{backend.first_release} or later, then `tritonize repo build`")
            if name != backend.name:
                return "`tritonize repo build` builds the ensembles unless --no-ensembles (or --models left it out)"
            return "`tritonize repo build` builds it unless --models left it out"
    if name in (p.name for p in PREPROCESSORS):
        return "`tritonize repo build` builds it unless --no-ensembles"
    return None


# --- the plans per GPU kind (repository_builder/gpus.py gathers them) ----------------------------------------
CC_PARAMETER = "source.compute_capability"  # a config's one plan: the GPU kind it was built for
HARDWARE_PARAMETER = "source.hardware_compatibility"  # set when the plan runs beyond its own GPU kind
AMPERE_PLUS_MIN = (8, 0)  # TensorRT's HardwareCompatibilityLevel.AMPERE_PLUS: Ampere (8.0) and newer
CC_PATTERN = re.compile(r"\d+\.\d+")


def check_cc(cc: str, option: str = "--gpu-cc") -> str:
    if not CC_PATTERN.fullmatch(cc or ""):
        raise TritonizeError(f"{option} takes a compute capability MAJOR.MINOR, e.g. 8.6 (got {cc!r})")
    return cc


def served_plans(cfg) -> dict[str, str]:
    """compute capability -> plan file of a tensorrt_plan config: its `cc_model_filenames`, else its one plan's
    GPU kind (from the provenance parameter; {} when the config does not say)."""
    if cfg.cc_model_filenames:
        return dict(cfg.cc_model_filenames)
    cc = cfg.parameters[CC_PARAMETER].string_value if CC_PARAMETER in cfg.parameters else ""
    return {cc: cfg.default_model_filename or "model.plan"} if cc else {}


def missing_plan(cfg, cc: str) -> str | None:
    """Why a tensorrt_plan model has no plan for a GPU of compute capability `cc`, in one line (None: it has one,
    or the config does not say which GPU its plan was built for)."""
    plans = served_plans(cfg)
    if not plans or cc in plans:
        return None
    hardware = cfg.parameters[HARDWARE_PARAMETER].string_value if HARDWARE_PARAMETER in cfg.parameters else ""
    if hardware == "ampere+" and _parts(cc) >= AMPERE_PLUS_MIN:
        return None
    have = ", ".join(sorted(plans, key=_parts))
    return (f"no plan for this GPU's compute capability {cc} (plans for {have}): Triton will not load {cfg.name}; "
            f"build one on a {cc} GPU with `tritonize convert trt` and add its artifacts with `repo build --plans DIR`")


def profile_index(name: str) -> int | None:
    """An instance group's profile name as Triton reads it (core and tensorrt_backend GetProfileIndex: `std::stoi`):
    leading blanks, a sign, then the leading digits; None where stoi throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", name)
    return int(m.group(1)) if m else None


def _parts(cc: str) -> tuple[int, ...]:
    return tuple(int(x) for x in cc.split("."))


def serving_cc(given: str | None) -> tuple[str | None, str]:
    """The compute capability plans are compared with, and where it came from: --gpu-cc, else the CUDA runtime's
    first GPU, else (None, why not)."""
    if given:
        return check_cc(given), "--gpu-cc"
    from tritonize.machine import cuda_gpu

    gpu = cuda_gpu()
    if "error" in gpu:
        return None, gpu["error"]
    return gpu["compute_capability"], f"GPU 0 ({gpu['name']})"
