"""tritonize from Python: each stage under its command's name, with the command's options as keyword arguments.

    import tritonize

    tritonize.export(model, labels=["cat", "dog"], preprocessing={"resize": 32, "crop": 28}, artifacts="build")
    tritonize.convert_trt(artifacts="build", min_batch=1, opt_batch=16, max_batch=32)    # tritonize convert trt
    tritonize.repo_build(artifacts="build", repository="models", kind="cpu")            # tritonize repo build
    tritonize.repo_check(repository="models", artifacts="build")                        # tritonize repo check
    with tritonize.serve("models") as server:                                           # tritonize serve (embedded)
        tritonize.client_classify(["cat.jpg"], model="onnx_model", url=server.grpc_url) # tritonize client classify
        tritonize.client_compare(["cat.jpg"], url=server.grpc_url)                      # tritonize client compare

`model` is a module you hold (a notebook's freshly trained one) or what `--arch` takes (a torchvision name,
timm:NAME, hf:DIR_OR_ID, FILE.py:FUNC, package.module:FUNC). A list option takes a list or the command line's
comma-separated text. The commands are a layer over these functions (they parse, call, print), and both write the
same manifest, so what starts here continues from the shell (`tritonize convert trt`, `tritonize repo build`).
Failures raise tritonize.TritonizeError, whose message is the command's one `error:` line.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Sequence

from tritonize.model_repository import DEFAULT_MODEL
from tritonize.options import DEFAULT_ARTIFACTS, DEFAULT_REPOSITORY, int_items, items
from tritonize.sources.shared import evaluating
from tritonize.spec import DEFAULT_ARCH
from tritonize.stage import StageResult


def _list(value, flag: str, kind=str) -> tuple:
    """A list option: the command line's comma-separated text, or a list."""
    if value is None:
        return ()
    if isinstance(value, str):
        return int_items(value, flag) if kind is int else items(value, flag, kind)
    return tuple(kind(v) for v in value)


def model_spec(model=DEFAULT_ARCH, weights: str | None = None, labels=None, preprocessing=None):
    """(the ModelSpec, the module itself or None): a module handed over is described as it is; an `--arch` value is
    resolved by its source, which builds it when the export needs it."""
    from tritonize.sources import resolve_spec
    from tritonize.sources.user_code import module_spec

    if isinstance(model, (str, Path)):
        return resolve_spec(str(model), weights, labels, preprocessing), None
    if weights is not None:
        from tritonize.errors import TritonizeError

        raise TritonizeError("weights= names the weights of an --arch model; a module handed over has its own (load a "
                             "checkpoint into it first)")
    return module_spec(model, labels, preprocessing), model


def export(model=DEFAULT_ARCH, *, weights: str | None = None, labels=None, preprocessing=None,
           artifacts: Path | str = DEFAULT_ARTIFACTS, format: str | Sequence[str] = "torchscript,onnx", opset: int = 18,
           simplify: bool = True, max_batch: int = 32, force: bool = False) -> StageResult:
    """`tritonize export`: TorchScript and ONNX (and torch.export's .pt2 when asked), verified against eager, recorded
    in <artifacts>/manifest.json. `labels`: a file or a list; `preprocessing`: a tritonize.Preprocessing or a
    mapping of its fields over what the source says (a module's source says ImageNet's)."""
    from tritonize.export import ExportOptions, export_artifacts
    from tritonize.export.exporter import FORMATS

    formats = FORMATS if format == "all" else _list(format, "--format")
    spec, module = model_spec(model, weights, labels, preprocessing)
    options = ExportOptions(formats=formats, opset=opset, simplify=simplify, max_batch=max_batch, force=force)
    with evaluating(module):
        return export_artifacts(spec, Path(artifacts), options, model=module)


def build(model=DEFAULT_ARCH, *, weights: str | None = None, labels=None, preprocessing=None,
          artifacts: Path | str = DEFAULT_ARTIFACTS, repository: Path | str = DEFAULT_REPOSITORY, min_batch: int = 1,
          opt_batch: int = 16, max_batch: int = 32, precision: str = "fp16", calib_images: Path | str | None = None,
          triton_release: str | None = None, kind: str = "auto", instances: int = 1, force: bool = False):
    """`tritonize build`: export -> convert -> repo build -> repo check; finished stages are skipped. Returns the
    pipeline's report (each stage's result and time, repo check's findings)."""
    from tritonize.pipeline.stages import BuildOptions, build_all

    spec, module = model_spec(model, weights, labels, preprocessing)
    options = BuildOptions(artifacts=Path(artifacts), repository=Path(repository), min_batch=min_batch,
                           opt_batch=opt_batch, max_batch=max_batch, precision=getattr(precision, "value", precision),
                           triton_release=triton_release, calib_images=Path(calib_images) if calib_images else None,
                           kind=kind, instances=instances, force=force)
    with evaluating(module):
        return build_all(spec, options, model=module)


def convert_trt(*, min_batch: int = 1, opt_batch: int = 16, max_batch: int | None = 32, latency: str | None = None,
                precision: str = "fp16", builder: str = "auto", workspace: float = 4.0,
                timing_cache: Path | str | None = None, opt_level: int = 3, version_compatible: bool = False,
                hardware_compatibility: str = "none", triton_release: str | None = None,
                calib_images: Path | str | None = None, calib_count: int = 32, onnx: Path | str | None = None,
                artifacts: Path | str = DEFAULT_ARTIFACTS, dry_run: bool = False, force: bool = False) -> StageResult:
    """`tritonize convert trt`: a TensorRT plan where a builder can run; elsewhere everything the GPU box needs
    (convert.sh, the prepared ONNX, the manifest entry), and the result's status says `waiting for GPU`."""
    from tritonize.convert import ConvertOptions, Profile, convert_trt as convert
    from tritonize.convert.options import latency_profile
    from tritonize.plan_settings import BuildSettings

    options = ConvertOptions(
        profile=Profile(min_batch, opt_batch, max_batch), latency=latency_profile(latency),
        precision=getattr(precision, "value", precision), builder=getattr(builder, "value", builder),
        settings=BuildSettings.from_cli(workspace, _path(timing_cache), opt_level, version_compatible,
                                        hardware_compatibility),
        triton_release=triton_release, calib_images=_path(calib_images), calib_count=calib_count, onnx=_path(onnx),
        dry_run=dry_run, force=force,
    )
    return convert(Path(artifacts), options)


def repo_build(*, artifacts: Path | str = DEFAULT_ARTIFACTS, repository: Path | str = DEFAULT_REPOSITORY,
               max_batch: int | None = None, preferred: str | Sequence[int] = "4,8,16,32", queue_delay_us: int = 100,
               instances: int = 1, latency_instances: int | None = None, kind: str = "auto", warmup: bool = True,
               models: str | Sequence[str] | None = None, ensembles: bool = True, force: bool = False,
               cuda_graphs: bool = False, context_memory: str | None = None,
               plans: str | Sequence[str] | None = None) -> StageResult:
    """`tritonize repo build`: the Triton model repository from the artifacts."""
    from tritonize.repository_builder import RepoOptions, build_repository

    options = RepoOptions(
        max_batch=max_batch, preferred=_list(preferred, "--preferred", int), queue_delay_us=queue_delay_us,
        instances=instances, latency_instances=latency_instances, kind=kind, warmup=warmup,
        models=_list(models, "--models") if models is not None else None, ensembles=ensembles, force=force,
        plans=_list(plans, "--plans", Path), cuda_graphs=cuda_graphs, context_memory=context_memory,
    )
    return build_repository(Path(artifacts), Path(repository), options)


def repo_check(*, repository: Path | str = DEFAULT_REPOSITORY, artifacts: Path | str | None = None,
               triton_release: str | None = None, gpu_cc: str | None = None) -> list:
    """`tritonize repo check`: the findings (errors and warnings) about what would make Triton refuse or
    misbehave. `artifacts`: the manifest to check against (default: build/ when it has one)."""
    from tritonize.repository_builder import check_repository

    if artifacts is None and (DEFAULT_ARTIFACTS / "manifest.json").is_file():
        artifacts = DEFAULT_ARTIFACTS
    return check_repository(Path(repository), _path(artifacts), triton_release, gpu_cc=gpu_cc)


@contextlib.contextmanager
def serve(repository: Path | str = DEFAULT_REPOSITORY, *, host: str = "127.0.0.1", http_port: int | None = None,
          grpc_port: int | None = None, metrics_port: int | None = None, config_name: str | None = None,
          ready_timeout: float | None = None, log_file: Path | str | None = None) -> Iterator:
    """`tritonize serve` on the embedded engine, for the duration of a `with` block: a real Triton serving the
    repository (ports left None are picked free). Yields the server's addresses (`.grpc_url`, `.http_url`,
    `.metrics_url`) and models; the clients here find its control key themselves."""
    from tritonize.access import ControlKey
    from tritonize.serve.embedded import embedded_server

    with embedded_server(Path(repository), host=host, http_port=http_port, grpc_port=grpc_port,
                         metrics_port=metrics_port, model_config_name=config_name,
                         ready_timeout=ready_timeout or 120.0, log_path=_path(log_file),
                         control_key=ControlKey.generate()) as server:
        yield server


def client_classify(images: Sequence[Path | str], *, model: str = DEFAULT_MODEL, top_k: int = 5,
                    url: str | None = None, control_key_file: Path | str | None = None, tls_ca: Path | str | None = None,
                    timeout: float = 30.0, max_pixels: int | None = None, preprocess: str | None = None):
    """`tritonize client classify`: the top-k labels and probabilities per image (a ClassifyReport: `.predictions`,
    `.failures`, `.to_text()`)."""
    from tritonize.client.classify import classify
    from tritonize.client.connection import DEFAULT_URL, Connection
    from tritonize.images import DEFAULT_MAX_PIXELS
    url = DEFAULT_URL if url is None else url
    max_pixels = DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels
    with Connection(url, timeout, key_file=_path(control_key_file), tls_ca=_path(tls_ca)) as connection:
        return classify(connection, model, [Path(p) for p in images], top_k, max_pixels, preprocess)


def client_compare(images: Sequence[Path | str], *, models: str | Sequence[str] | None = None, repeat: int = 3,
                   min_top1_agreement: float | None = None, url: str | None = None,
                   control_key_file: Path | str | None = None, tls_ca: Path | str | None = None, timeout: float = 30.0,
                   max_pixels: int | None = None, preprocess_paths: str | Sequence[str] | None = None):
    """`tritonize client compare`: the same images through several models or preprocessing paths; logits, top-1/5
    agreement, KL, latency (a CompareReport: `.pairs`, `.passed`, `.to_text()`)."""
    from tritonize.client.compare import compare_models
    from tritonize.client.connection import DEFAULT_URL, Connection
    from tritonize.images import DEFAULT_MAX_PIXELS

    url = DEFAULT_URL if url is None else url
    max_pixels = DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels
    with Connection(url, timeout, key_file=_path(control_key_file), tls_ca=_path(tls_ca)) as connection:
        return compare_models(connection, [Path(p) for p in images], _list(models, "--models") or None, repeat,
                              min_top1_agreement, max_pixels, _list(preprocess_paths, "--preprocess-paths") or None)


def _path(value) -> Path | None:
    return None if value is None else Path(value)
