"""Artifacts -> Triton model repository (`tritonize repo build`), and its linter (`tritonize repo check`).

Layout written by `build_repository(artifacts, repository, options)`:

    <repository>/<name>/config.pbtxt        the default config (instance kind per --kind, see below)
    <repository>/<name>/configs/gpu.pbtxt   the same model pinned to KIND_GPU
    <repository>/<name>/configs/cpu.pbtxt   pinned to KIND_CPU (not for a model that runs only on a GPU)
    <repository>/<name>/labels.txt          one category per line: the output's label_filename
    <repository>/<name>/1/<its file>        hard-linked from the artifacts (copied across filesystems)

Models: one per Backend record of tritonize/model_repository.py (its name, platform and file), for each
artifact the manifest has; a TensorRT plan only when the manifest's plan has status "built" and its file
exists. A model whose artifact is missing is skipped with one line saying why.

Preprocessing on the server (unless --no-ensembles): the Python-backend models `preprocess` (IMAGE: encoded
images) and `preprocess_uint8` (PIXELS: cropped UINT8 pixels), whose <model>/1/ holds model.py
(preprocess_model.py) and copies of the tritonize modules it runs (the client's own preprocessing code),
and per classifier two ensembles, <backend>_classifier and <backend>_classifier_uint8 (the record's
`ensemble`): the preprocessing model, then the classifier, LOGITS out with the labels.

One repository for GPU and CPU-only boxes: with `--kind auto` (default) the config.pbtxt of a model that runs
anywhere leaves the instance kind at Triton's KIND_AUTO, which places instances on a GPU when the server has
one and on the CPU otherwise; a model that runs only on a GPU (trt_model) is always KIND_GPU. To pin
placement, start Triton with `--model-config-name=gpu` or `--model-config-name=cpu`: each model then loads
configs/<name>.pbtxt instead of config.pbtxt, and a model without that variant (a GPU-only model has no
cpu.pbtxt) falls back to its config.pbtxt, so on a CPU-only box it stays unavailable while the others serve.
`--kind gpu|cpu` writes that kind into config.pbtxt itself (`--kind cpu` leaves GPU-only models out).

Each config is a `tritonclient.grpc.model_config_pb2.ModelConfig` written with protobuf's text format. Its
`parameters` carry the preprocessing contract (preprocess.resize, .crop, .mean, .std, .interpolation,
.antialias, .channel_order, .layout, .scale, .crop_offset) and the provenance (source.arch, source.weights,
source.manifest_sha256; for trt_model also source.tensorrt_version, .triton_release, .version_compatible)
as strings, so a client and `serve` need only the repository.

The repository is published atomically: it is built in a sibling temporary directory and swapped in
whole, so a server never sees a half-written repository.
"""

from tritonize.repository_builder.builder import build_repository
from tritonize.repository_builder.checker import Finding, check_repository
from tritonize.repository_builder.options import RepoOptions

__all__ = ["Finding", "RepoOptions", "build_repository", "check_repository"]
