"""config.pbtxt through Triton's own schema: a ModelConfig message, written with protobuf's text format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonize.errors import TritonizeError
from tritonize.repository_builder.options import Backend, RepoOptions
from tritonize.spec import ModelSpec

CONFIG_NAME = "config.pbtxt"
LABELS_NAME = "labels.txt"

# Keys the client reads back from the served model config (string values).
PREPROCESS_KEYS = (
    "preprocess.resize", "preprocess.crop", "preprocess.mean", "preprocess.std", "preprocess.interpolation",
    "preprocess.antialias", "preprocess.channel_order", "preprocess.layout", "preprocess.scale",
)
SOURCE_KEYS = ("source.arch", "source.weights", "source.manifest_sha256")


def _pb():
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


def tensor_names(backend: Backend, entry: dict[str, Any]) -> tuple[str, str]:
    """Input and output names the artifact really has, as its manifest entry records them."""
    return entry.get("input_name") or backend.default_input, entry.get("output_name") or backend.default_output


def plan_max_batch(entry: dict[str, Any]) -> int | None:
    profile = entry.get("profile") or {}
    return int(profile["max"]) if "max" in profile else None


def contract_parameters(spec: ModelSpec, manifest_sha256: str) -> dict[str, str]:
    """The preprocessing contract and provenance, as the string parameters a client can fetch."""
    p = spec.preprocessing
    return {
        "preprocess.resize": str(p.resize),
        "preprocess.crop": str(p.crop),
        "preprocess.mean": ",".join(f"{v:g}" for v in p.mean),
        "preprocess.std": ",".join(f"{v:g}" for v in p.std),
        "preprocess.interpolation": p.interpolation,
        "preprocess.antialias": str(p.antialias).lower(),
        "preprocess.channel_order": p.channel_order,
        "preprocess.layout": p.layout,
        "preprocess.scale": repr(p.scale),
        "source.arch": spec.arch,
        "source.weights": spec.weights,
        "source.manifest_sha256": manifest_sha256,
    }


def model_config(backend: Backend, spec: ModelSpec, entry: dict[str, Any], options: RepoOptions,
                 kind: str, manifest_sha256: str):
    """The ModelConfig for one backend. kind: "auto" | "gpu" | "cpu" (instance placement)."""
    pb = _pb()
    max_batch = options.max_batch
    if backend.needs_gpu and plan_max_batch(entry) is not None:
        max_batch = min(max_batch, plan_max_batch(entry))  # the engine rejects larger batches
    input_name, output_name = tensor_names(backend, entry)

    cfg = pb.ModelConfig(name=backend.name, platform=backend.platform, max_batch_size=max_batch)
    cfg.version_policy.latest.num_versions = 1
    inp = cfg.input.add(name=input_name, data_type=pb.TYPE_FP32)
    inp.dims.extend(spec.input_shape)
    out = cfg.output.add(name=output_name, data_type=pb.TYPE_FP32, label_filename=LABELS_NAME)
    out.dims.append(spec.num_classes)

    cfg.dynamic_batching.preferred_batch_size.extend(options.preferred_for(max_batch))
    cfg.dynamic_batching.max_queue_delay_microseconds = options.queue_delay_us

    kinds = {"auto": pb.ModelInstanceGroup.KIND_AUTO, "gpu": pb.ModelInstanceGroup.KIND_GPU,
             "cpu": pb.ModelInstanceGroup.KIND_CPU}
    cfg.instance_group.add(count=options.instances, kind=kinds[kind])

    if options.warmup:
        for batch in sorted({1, max_batch}):
            w = cfg.model_warmup.add(name=f"batch_{batch}", batch_size=batch)
            w.inputs[input_name].data_type = pb.TYPE_FP32
            w.inputs[input_name].dims.extend(spec.input_shape)
            w.inputs[input_name].zero_data = True

    for key, value in contract_parameters(spec, manifest_sha256).items():
        cfg.parameters[key].string_value = value
    return cfg


def config_text(cfg, header: str = "") -> str:
    """Text format of a ModelConfig, with an optional comment header (Triton's parser skips # lines)."""
    from google.protobuf import text_format

    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + text_format.MessageToString(cfg)


def parse_config(path: Path):
    """Parse a config.pbtxt against Triton's schema; TritonizeError with the parser's message."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(Path(path).read_text(), _pb().ModelConfig())
    except text_format.ParseError as e:
        raise TritonizeError(f"{path}: {e}") from None


def kind_name(kind: int) -> str:
    return _pb().ModelInstanceGroup.Kind.Name(kind)
