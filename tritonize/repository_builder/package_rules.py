"""`repo check`'s rules about PyTorch 2 models (`platform: "torch_aoti"`, an AOTInductor package), as Triton's
pytorch backend serves them (read in triton-inference-server/pytorch_backend's source, per release: model_repository's
AOTI_MODEL record says why): the release serves the platform and batches it or not, the device the package was
compiled for is where its instances run, and the config names the tensors the backend binds from the package's call
spec (ARGS[i] / RESULT, or the ordinals INPUT__i / OUTPUT__i), with the dims a batch-1 run gives."""

from __future__ import annotations

from pathlib import Path

from tritonize import aoti
from tritonize.model_repository import AOTI_MODEL, batches, release_problem
from tritonize.repository_builder.config import PACKAGE_KEYS, kind_name
from tritonize.repository_builder.findings import REBUILD, Severity

RELEASE_PARAMETER = PACKAGE_KEYS[0]  # the release the package was made for (repo build writes it)
KINDS = {"cpu": "KIND_CPU", "cuda": "KIND_GPU"}  # a package's device -> the instances that run it


class PackageChecks:
    """Mixed into the checker of one model: `add` a finding, `ctx` the CheckContext, `_read` a file once."""

    def _check_package(self, cfg, path: Path | None) -> None:
        release = self._serving_release(cfg)
        if release is not None:
            self._check_release(cfg, release)
        if path is None:
            return
        facts = self._read(path, "aoti", _package_facts)
        if isinstance(facts, Exception):
            self.add(Severity.error, f"cannot read {path.name} as an AOTInductor package: {str(facts).splitlines()[0]}",
                     REBUILD)
            return
        device, call_spec = facts
        want = KINDS.get(device or "")
        for group in cfg.instance_group:
            kind = kind_name(group.kind)
            if want and kind != want:
                self.add(Severity.error, f"{path.name} was compiled for the {device.upper()}, but an instance group is "
                                         f"{kind}" + (" (the GPU when the server has one)" if kind == "KIND_AUTO" else "")
                                         + ": those instances cannot run it",
                         f"set kind: {want}, or compile a package for that device (`tritonize convert aoti --device "
                         f"{'gpu' if want == 'KIND_CPU' else 'cpu'}`), then {REBUILD}")
        if call_spec is not None:
            self._check_names(cfg, path, call_spec)
        if device == "cpu":
            self._check_run(cfg, path)

    def _serving_release(self, cfg) -> str | None:
        """--triton-release, else the release the config says the package was made for."""
        if self.ctx.release is not None:
            return self.ctx.release.release
        if RELEASE_PARAMETER in cfg.parameters:
            return cfg.parameters[RELEASE_PARAMETER].string_value or None
        self.add(Severity.warning, f"the config does not say which Triton release serves the package ({RELEASE_PARAMETER})",
                 f"give --triton-release to check it against one, or {REBUILD}")
        return None

    def _check_release(self, cfg, release: str) -> None:
        problem = release_problem(AOTI_MODEL, release)
        if problem:
            self.add(Severity.error, problem, f"serve it with Triton {AOTI_MODEL.first_release} or later")
            return
        if batches(AOTI_MODEL, release):
            return
        said = "; ".join(what for what, present in (
            (f"max_batch_size {cfg.max_batch_size}", cfg.max_batch_size > 0),
            ("dynamic_batching", cfg.HasField("dynamic_batching")),
            ("sequence_batching", cfg.HasField("sequence_batching"))) if present)
        if said:
            self.add(Severity.error, f"{said}: Triton {release}'s pytorch backend does not batch PT2 models (its README: "
                                     "batch sizes above 1 and sequence batching not completed; batching from "
                                     f"{AOTI_MODEL.batching_release})",
                     f"set max_batch_size: 0 without dynamic or sequence batching (dims with the batch axis, of 1), "
                     f"or serve it with Triton {AOTI_MODEL.batching_release} or later; then {REBUILD}")

    def _check_names(self, cfg, path: Path, call_spec: list[str]) -> None:
        """Each config tensor is one the backend binds: a name from the call spec or its ordinal; as many inputs as
        the package takes (src/pt2/model_instance_state.cc ValidateInputs)."""
        inputs, outputs = aoti.tensor_names(call_spec)
        if len(cfg.input) != len(inputs):
            self.add(Severity.error, f"config declares {len(cfg.input)} input(s); {path.name} takes {len(inputs)} "
                                     f"({', '.join(inputs)})", f"declare {', '.join(inputs)} or {REBUILD}")
        for role, tensors, names, ordinal in (("input", cfg.input, inputs, "INPUT__"), ("output", cfg.output, outputs, "OUTPUT__")):
            bound = {*names, *(f"{ordinal}{i}" for i in range(len(names)))}
            for t in tensors:
                if t.name not in bound:
                    self.add(Severity.error, f"{role} {t.name!r} is not a tensor Triton's pytorch backend binds for "
                                             f"{path.name}: {', '.join(names)} (or {ordinal}0 ...)",
                             f"name it {names[0] if names else ordinal + '0'} or {REBUILD}")

    def _check_run(self, cfg, path: Path) -> None:
        """A batch-1 run on zeros of the configured input shape gives the configured output dims."""
        if len(cfg.input) != 1 or any(d < 1 for d in cfg.input[0].dims):
            return
        shape = [1, *cfg.input[0].dims] if cfg.max_batch_size > 0 else list(cfg.input[0].dims)
        result = self._read(path, f"aoti run {shape}", lambda p: _run(p, shape))
        if isinstance(result, Exception):
            first = str(result).strip().splitlines()[-1] if str(result).strip() else type(result).__name__
            self.add(Severity.error, f"{path.name} fails on an input of the configured shape {shape}: {first}",
                     f"set the input dims the package takes or {REBUILD}")
            return
        for t, got in zip(cfg.output, result):
            got = got[1:] if cfg.max_batch_size > 0 else got
            if len(got) != len(t.dims) or any(e not in (-1, g) for e, g in zip(t.dims, got)):
                self.add(Severity.error, f"output {t.name!r}: config dims {list(t.dims)}, {path.name} returns {got}"
                                         + (" (batch axis excluded)" if cfg.max_batch_size > 0 else ""),
                         f"set dims to {got} or {REBUILD}")


def _package_facts(path: Path):
    """(the device it was compiled for, its call spec), or the exception that reading them raised."""
    try:
        return aoti.device(path), aoti.archived_call_spec(path)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: reported as a finding
        return e


def _run(path: Path, shape: list[int]):
    """The output shapes of one run on zeros, or the exception the package raised."""
    try:
        import torch

        with aoti.inductor_files():
            package = torch._inductor.aoti_load_package(str(path))
            with torch.inference_mode():
                result = package(torch.zeros(shape))
            del package
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        return [list(r.shape) for r in results]
    except Exception as e:  # noqa: BLE001 - the model's own refusal: reported as a finding
        return e
