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
@dataclass(frozen=True)
class Backend:
    """One model of the repository: which artifact it serves and how Triton loads it."""

    name: str  # model directory and config name
    artifact: str  # its manifest entry's key
    platform: str  # Triton platform string
    filename: str  # file Triton's backend looks for in <model>/<version>/
    default_input: str
    default_output: str
    ensemble: str  # its ensemble taking encoded images; `<ensemble>_uint8` takes UINT8 pixels
    needs_gpu: bool = False  # TensorRT plans only run on a GPU
    cpu_variant: bool = False  # a precision variant for the CPU: built when `convert cpu`'s gates passed, CPU only


BACKENDS = {
    b.name: b
    for b in (
        Backend("onnx_model", "onnx", "onnxruntime_onnx", "model.onnx", "input", "output", "onnx_classifier"),
        Backend("torch_model", "torchscript", "pytorch_libtorch", "model.pt", "input__0", "output__0", "torch_classifier"),
        Backend("trt_model", "tensorrt", "tensorrt_plan", "model.plan", "input", "output", "trt_classifier",
                needs_gpu=True),
        Backend("onnx_int8_model", "onnx_int8_cpu", "onnxruntime_onnx", "model.onnx", "input", "output",
                "onnx_int8_classifier", cpu_variant=True),
    )
}


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
            if backend.needs_gpu:
                return ("its TensorRT plan is built on a GPU box: run `tritonize convert trt` there, then "
                        "`tritonize repo build`")
            if backend.cpu_variant:
                return ("it is built only once `tritonize convert cpu --calib-images DIR` made the INT8 variant and its "
                        "gates passed, then `tritonize repo build`")
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
