"""Every command-line option that more than one command takes, declared once: one name, one meaning, one type.

tests/test_vocabulary.py walks the whole app and holds every command to these declarations. The words:
- `--artifacts DIR` is the artifacts directory (exports, plans, manifest.json; default build/); the Triton
  model repository is always the positional REPOSITORY (default models/).
- `--max-batch` is the one batch bound (`--min-batch`/`--opt-batch` complete a TensorRT profile; `--latency-profile`
  adds a second one). `--min`/`--opt`/`--max` are the same options as the user's card spells them
  (`tritonize convert trt --min 1 --opt 16 --max 32`): aliases, never retired.
- `--engine` is the server engine (`serve`); `--load-generator` is what sends and measures requests.
- `--models` takes a list of model names, `--model`/`-m` one name.
- `--output-dir` is where a command writes its report or bundle.
- `--timeout` is the seconds each server call may take (`serve --ready-timeout` waits for readiness).
- Every list is one comma-separated value, read by `items()`/`int_items()`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, Optional, TypeVar

import typer

from tritonize.errors import TritonizeError
from tritonize.model_repository import BACKENDS

DEFAULT_ARTIFACTS = Path("build")
DEFAULT_REPOSITORY = Path("models")

# Exit codes, one per kind of outcome (the top-level --help lists them).
EXIT_FAILED = 1  # the command could not do what was asked; the line says what happened and what to do
EXIT_USAGE = 2  # the command line itself is wrong (unknown flag, bad value)
EXIT_WAITING_FOR_GPU = 3  # written what a GPU box needs; TensorRT cannot run here
EXIT_GATE = 4  # measured, and a threshold the user set was not met
EXIT_CODES = {0: "done", EXIT_FAILED: "failed", EXIT_USAGE: "usage error",
              EXIT_WAITING_FOR_GPU: "waiting for a GPU box", EXIT_GATE: "a threshold you set was not met"}

T = TypeVar("T")


def items(text: str | None, flag: str, kind: Callable[[str], T] = str, example: str = "a,b") -> tuple[T, ...]:
    """The one list idiom: "a, b,c" -> ("a", "b", "c"); each item read by `kind`, with an error naming the flag."""
    values = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            values.append(kind(part))
        except ValueError:
            raise TritonizeError(f"{flag} takes a comma-separated list like {example}, got {text!r}",
                                 EXIT_USAGE) from None
    return tuple(values)


def int_items(text: str | None, flag: str) -> tuple[int, ...]:
    return items(text, flag, int, "4,8,16")


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    int8 = "int8"


class LoadGenerator(str, Enum):
    auto = "auto"
    perf_analyzer = "perf_analyzer"
    builtin = "builtin"


# Where things are.
Artifacts = Annotated[Path, typer.Option("--artifacts", help="Artifacts directory: exports, plans and manifest.json.")]
RepositoryArgument = Annotated[Path, typer.Argument(help="Triton model repository directory.")]
OutputDir = Annotated[Path, typer.Option("--output-dir", help="Directory this command writes its report or bundle "
                                                                "into (what goes there: see the command's description).")]

# The model and its artifacts.
Arch = Annotated[str, typer.Option("--arch", help="Where the model comes from: NAME (a torchvision classifier), "
                                                  "timm:NAME, hf:DIR_OR_ID (a Hugging Face image classifier), "
                                                  "FILE.py:FUNC or package.module:FUNC (your code; FUNC returns the "
                                                  "nn.Module).")]
Weights = Annotated[
    Optional[str],
    typer.Option("--weights", help="The source's weights (default: torchvision's DEFAULT pretrained weights, timm's "
                                   "pretrained ones, the hf directory's, the module as FUNC returns it), a torchvision "
                                   "weights name, `none` for random init, or a checkpoint: a state_dict (Lightning's "
                                   "and DDP's too) or .safetensors, whose head sets the number of classes."),
]
Labels = Annotated[Optional[Path], typer.Option(
    "--labels", help="The class names: a file with one label per line, a JSON list, or a JSON object from index to "
                     "name (default: the source's own; `class 0` ... for a head of your own).", show_default=False)]
# The preprocessing contract (preprocessing.py), one flag per field, over what the model's source says (torchvision
# weights' transforms, timm's data config, a Hugging Face image processor). Not `--preprocess`: that is where the
# client preprocesses.
_CONTRACT = "Preprocessing (default: what the model's source says)"
Resize = Annotated[Optional[str], typer.Option(
    "--resize", help="N: resize the shorter side to N, keeping the aspect; H,W: resize to exactly H x W.",
    rich_help_panel=_CONTRACT, show_default=False)]
Crop = Annotated[Optional[str], typer.Option(
    "--crop", help="Then center-crop to N x N or H,W: the model's input size.", rich_help_panel=_CONTRACT,
    show_default=False)]
Mean = Annotated[Optional[str], typer.Option(
    "--mean", help="Per-channel mean subtracted after scaling, comma-separated (one value for --channel-order L).",
    rich_help_panel=_CONTRACT, show_default=False)]
Std = Annotated[Optional[str], typer.Option(
    "--std", help="Per-channel std divided by after the mean, comma-separated.", rich_help_panel=_CONTRACT,
    show_default=False)]
Interpolation = Annotated[Optional[str], typer.Option(
    "--interpolation", help="Resize filter: bilinear, bicubic, nearest, nearest-exact, lanczos, box or hamming "
                            "(torchvision's names).", rich_help_panel=_CONTRACT, show_default=False)]
Antialias = Annotated[Optional[bool], typer.Option(
    "--antialias/--no-antialias", help="Recorded for the model's own tensor-path transforms; Pillow always "
                                       "antialiases.", rich_help_panel=_CONTRACT, show_default=False)]
ChannelOrder = Annotated[Optional[str], typer.Option(
    "--channel-order", help="The input's channels: RGB, BGR, or L (one grayscale channel: the input is 1xHxW).",
    rich_help_panel=_CONTRACT, show_default=False)]
Layout = Annotated[Optional[str], typer.Option(
    "--layout", help="The input's layout: NCHW or NHWC.", rich_help_panel=_CONTRACT, show_default=False)]
CropOffset = Annotated[Optional[str], typer.Option(
    "--crop-offset", help="Where an odd crop margin is split: round (torchvision's CenterCrop, timm) or floor (Hugging "
                          "Face's image processors).", rich_help_panel=_CONTRACT, show_default=False)]
PixelScale = Annotated[Optional[str], typer.Option(
    "--pixel-scale", help="Pixel values are multiplied by this before the mean and std (1/255: to [0, 1]).",
    rich_help_panel=_CONTRACT, show_default=False)]


def contract_changes(resize: str | None = None, crop: str | None = None, mean: str | None = None,
                     std: str | None = None, interpolation: str | None = None, antialias: bool | None = None,
                     channel_order: str | None = None, layout: str | None = None,
                     pixel_scale: str | None = None, crop_offset: str | None = None) -> dict:
    """The preprocessing flags as changes to the contract's fields (`ModelSpec.with_preprocessing`)."""
    return dict(resize=resize, crop=crop, mean=mean, std=std, interpolation=interpolation, antialias=antialias,
                channel_order=channel_order, layout=layout, scale=pixel_scale, crop_offset=crop_offset)


MinBatch = Annotated[int, typer.Option("--min-batch", "--min", min=1, help="TensorRT profile: the smallest batch.")]
OptBatch = Annotated[int, typer.Option("--opt-batch", "--opt", min=1, help="TensorRT profile: the batch kernels are tuned for.")]
MaxBatch = Annotated[Optional[int], typer.Option(
    "--max-batch", "--max", min=1, help="The largest batch: artifacts are verified at it (a TensorRT plan: its profile max) and "
                               "the repository serves at most it.")]
LatencyProfile = Annotated[Optional[str], typer.Option(
    "--latency-profile", help="A second TensorRT profile MIN,OPT,MAX for small batches (e.g. 1,2,4), beside the "
                              "--min-batch/--opt-batch/--max-batch one: the plan is checked in each, and `repo build` "
                              "gives it instances of their own.", show_default=False)]
PrecisionOption = Annotated[Precision, typer.Option(
    "--precision", help="TensorRT precision: fp32; fp16 = mixed (FP32 kept where FP16 overflows); int8 = Q/DQ "
                        "calibrated on --calib-images.")]
CalibImages = Annotated[Optional[Path], typer.Option(
    "--calib-images", help="Folder of real images for INT8: the first --calib-count calibrate, the rest are held out "
                           "for the checks (`synthetic` = noise, accuracy unknown).")]
CalibCount = Annotated[int, typer.Option("--calib-count", min=1, help="How many images calibrate; the rest are held out.")]
TritonRelease = Annotated[Optional[str], typer.Option(
    "--triton-release", help="Triton container release YY.MM that serves the plan (default: the one `repo build` "
                             "recorded for it; for convert trt, the release whose TensorRT is this machine's, else "
                             "the newest; `auto`: only the former).")]
Force = Annotated[bool, typer.Option("--force", help="Redo the work and replace the outputs, even up-to-date ones.")]

# The repository's configs.
Kind = Annotated[str, typer.Option("--kind", help="Instance kind in config.pbtxt: auto (Triton picks the GPU if "
                                                  "present), gpu or cpu.")]
Instances = Annotated[int, typer.Option("--instances", min=1, help="Instances per model (instance_group count).")]
LatencyInstances = Annotated[Optional[int], typer.Option(
    "--latency-instances", min=0, help="trt_model's instances that run small batches in the plan's latency profile "
                                       "(`convert trt --latency-profile`; default 1 when the plan has one, 0 = none).",
    show_default=False)]
Models = Annotated[Optional[str], typer.Option(
    "--models", help="Model names, comma-separated (default: see the command's description).", show_default=False)]
Model = Annotated[str, typer.Option("--model", "-m", help=f"One served model name ({', '.join(list(BACKENDS)[:3])}, ...).")]
ConfigName = Annotated[Optional[str], typer.Option(
    "--config-name", help="The config <model>/configs/NAME.pbtxt (Triton's --model-config-name) to serve or write; "
                          "`config` = config.pbtxt.", show_default=False)]
GpuCC = Annotated[Optional[str], typer.Option(
    "--gpu-cc", help="Compute capability MAJOR.MINOR of the GPU that will serve (default: this machine's GPU, when one "
                     "is visible); trt_model's plans are compared with it.", show_default=False)]

# Talking to a server.
Url = Annotated[str, typer.Option("--url", help="Triton gRPC endpoint HOST:PORT (`tritonize serve` listens on localhost:8001).")]
Timeout = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each server call.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
ControlKeyFile = Annotated[Optional[Path], typer.Option(
    "--control-key-file", help="File holding the control-API key (model repository, statistics, trace, logging, "
                               "shared memory): `serve` restricts those APIs to it, the other commands present it. "
                               "Default: the key in $TRITONIZE_CONTROL_KEY, if set.", show_default=False)]
TlsCa = Annotated[Optional[Path], typer.Option(
    "--tls-ca", help="CA certificate (PEM) that signed the server's gRPC certificate: connect over TLS and verify "
                     "the server with it.", show_default=False)]
MaxPixels = Annotated[int, typer.Option(
    "--max-pixels", min=1, help="Refuse images above this many pixels (decompression bombs); Pillow's default. Where "
                                "the client decodes (client, uint8); the server's preprocess model keeps the default.")]
Preprocess = Annotated[Optional[str], typer.Option(
    "--preprocess", help="Where images are preprocessed: client (send the FP32 tensor), server (send the encoded file "
                         "to <backend>_classifier) or uint8 (send resized, cropped UINT8 pixels to "
                         "<backend>_classifier_uint8). Default: server when the repository has the ensembles, else "
                         "client.", show_default=False)]

# Measuring.
LoadGeneratorOption = Annotated[LoadGenerator, typer.Option(
    "--load-generator", help="What sends and measures the requests: perf_analyzer (Triton's own tool; `tritonize "
                             "tools get-perf-analyzer`), builtin (tritonize's), or auto: perf_analyzer when it is "
                             "found on PATH or where that command put it.")]
Batch = Annotated[int, typer.Option("--batch", min=1, help="Images per request (at most the model's max_batch_size).")]
Duration = Annotated[float, typer.Option("--duration", min=0.1, max=600, help="Measured seconds per level or trial.")]
Concurrency = Annotated[str, typer.Option("--concurrency", help="Concurrency levels (requests in flight), comma-separated.")]
Threads = Annotated[Optional[int], typer.Option(
    "--threads", min=1, help="Intra-op threads of each CPU instance (default: the usable cores).", show_default=False)]

# Object storage.
Endpoint = Annotated[Optional[str], typer.Option(
    "--endpoint", help="URL of an S3-compatible store (MinIO, Ceph, ...): http://HOST:PORT or https://HOST[:PORT]; "
                       "default: AWS S3.")]
Region = Annotated[Optional[str], typer.Option(
    "--region", help="The store's region (default: AWS_REGION or AWS_DEFAULT_REGION, else us-east-1).")]
