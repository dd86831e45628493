"""Numeric comparison of a candidate's outputs with a reference, with scale-aware tolerances.

Logits of random-init models reach 1e5 while trained ones stay near 10: absolute tolerances are
meaningless across them, so errors are judged relative to the reference's output scale
(max |reference|). Top-1 agreement and top-5 overlap say what the error means for predictions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tritonize.errors import TritonizeError


@dataclass(frozen=True)
class Tolerance:
    max_rel_to_scale: float = 1e-4  # max |candidate - reference| / max |reference|
    min_top1_agreement: float = 1.0  # fraction of samples whose argmax matches


FP32 = Tolerance()


@dataclass(frozen=True)
class Comparison:
    batch: int
    max_abs: float
    scale: float
    rel_to_scale: float
    top1_agreement: float
    top5_overlap: float
    mean_kl: float  # KL(softmax(reference) || softmax(candidate)), mean over samples
    finite: bool
    passed: bool

    def to_dict(self) -> dict:
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Comparison":
        return cls(**data)


@dataclass(frozen=True)
class VerificationReport:
    """The checks of one artifact at several batch sizes, as the manifest records them."""

    tolerance: Tolerance
    batches: Mapping[str, Comparison]  # batch size (as a string, JSON keys) -> comparison with the reference
    invariance_rel_to_scale: float  # worst difference of a sample's outputs between batch sizes
    invariance_passed: bool
    worst_rel_to_scale: float
    top1_agreement: float  # the worst batch's
    top5_overlap: float
    passed: bool
    inputs: str | None = None  # what the inputs were, when not the default synthetic set

    def to_dict(self) -> dict:
        data = {
            "tolerance": asdict(self.tolerance),
            "batches": {b: c.to_dict() for b, c in self.batches.items()},
            "batch_invariance": {"max_rel_to_scale": self.invariance_rel_to_scale, "passed": self.invariance_passed},
            "worst_rel_to_scale": self.worst_rel_to_scale,
            "top1_agreement": self.top1_agreement,
            "top5_overlap": self.top5_overlap,
            "passed": self.passed,
        }
        if self.inputs is not None:
            data["inputs"] = self.inputs
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "VerificationReport":
        invariance = data["batch_invariance"]
        return cls(
            tolerance=Tolerance(**data["tolerance"]),
            batches={b: Comparison.from_dict(c) for b, c in data["batches"].items()},
            invariance_rel_to_scale=invariance["max_rel_to_scale"],
            invariance_passed=invariance["passed"],
            worst_rel_to_scale=data["worst_rel_to_scale"],
            top1_agreement=data["top1_agreement"],
            top5_overlap=data["top5_overlap"],
            passed=data["passed"],
            inputs=data.get("inputs"),
        )

    def summary(self) -> str:
        """One line for the console."""
        return (
            f"rel err {self.worst_rel_to_scale:.1e} of scale, top-1 {self.top1_agreement:.0%}, "
            f"top-5 {self.top5_overlap:.0%}, batch-invariant {'yes' if self.invariance_passed else 'NO'}"
        )


# Outputs are compared as rows: (batch, values); axis 1 is each sample's values.

def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities per row of (batch, classes) logits, computed in float64."""
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def topk(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits per row of (batch, classes), best first."""
    k = min(k, logits.shape[1])
    idx = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(logits, idx, axis=1), axis=1)
    return np.take_along_axis(idx, order, axis=1)


def compare(reference: np.ndarray, candidate: np.ndarray, tol: Tolerance = FP32) -> Comparison:
    reference = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    candidate = np.asarray(candidate, dtype=np.float64).reshape(len(candidate), -1)
    if reference.shape != candidate.shape:
        raise TritonizeError(f"output shapes differ: reference {reference.shape} vs candidate {candidate.shape}")
    finite = bool(np.isfinite(candidate).all())
    max_abs = float(np.abs(candidate - reference).max()) if finite else float("inf")
    scale = float(np.abs(reference).max()) or 1.0
    rel = max_abs / scale
    top1 = float((reference.argmax(1) == candidate.argmax(1)).mean()) if finite else 0.0
    ref5, cand5 = topk(reference, 5), topk(np.nan_to_num(candidate), 5)
    overlap = float(np.mean([len(set(a) & set(b)) / ref5.shape[1] for a, b in zip(ref5, cand5)]))
    if finite:
        p, q = softmax(reference), softmax(candidate)
        kl = float(np.mean(np.sum(p * (np.log(p + 1e-300) - np.log(q + 1e-300)), axis=1)))
    else:
        kl = float("inf")
    passed = finite and rel <= tol.max_rel_to_scale and top1 >= tol.min_top1_agreement
    return Comparison(len(reference), max_abs, scale, rel, top1, overlap, kl, finite, passed)


def verification_inputs(input_shape: Sequence[int], count: int, mean, std, seed: int = 0,
                        layout: str = "NCHW") -> np.ndarray:
    """A deterministic set of `count` images in the model's normalized input domain.

    Pixels are drawn uniformly in [0, 1] and normalized with the model's own mean and std (one per channel, on
    the layout's channel axis), so the inputs have the value range real preprocessed images have.
    """
    rng = np.random.default_rng(seed)
    pixels = rng.random((count, *input_shape), dtype=np.float32)
    shape = (1, -1, 1, 1) if layout == "NCHW" else (1, 1, 1, -1)
    mean = np.asarray(mean, dtype=np.float32).reshape(shape)
    std = np.asarray(std, dtype=np.float32).reshape(shape)
    return ((pixels - mean) / std).astype(np.float32)


def verification_batches(max_batch: int) -> list[int]:
    """Batch 1, an odd size, and the max batch."""
    odd = 7 if max_batch > 7 else max(1, max_batch - 1 if max_batch % 2 == 0 else max_batch)
    return sorted({1, odd, max_batch})


def verify_runner(
    run: Callable[[np.ndarray], np.ndarray],
    inputs: np.ndarray,
    reference: np.ndarray,
    tol: Tolerance = FP32,
    batches: Sequence[int] | None = None,
    described: str | None = None,
) -> VerificationReport:
    """Run `run` at each batch size on inputs[:b] and compare with reference[:b].

    Also checks batch invariance: a sample's outputs must not depend on the batch it is in
    (the smaller batches are compared with the same samples inside the largest one).
    `described` says what the inputs are when they are not the default synthetic set.
    """
    batches = list(batches or verification_batches(len(inputs)))
    # A copy of each result: runners reuse their output buffers (Polygraphy's TrtRunner resizes one per output).
    outputs = {b: np.array(run(inputs[:b]), copy=True) for b in batches}
    per_batch = {b: compare(reference[:b], outputs[b], tol) for b in batches}
    largest = max(batches)
    invariance = [compare(outputs[largest][:b], outputs[b], tol) for b in batches if b != largest]
    inv_ok = all(c.passed for c in invariance)
    return VerificationReport(
        tolerance=tol,
        batches={str(b): c for b, c in per_batch.items()},
        invariance_rel_to_scale=max((c.rel_to_scale for c in invariance), default=0.0),
        invariance_passed=inv_ok,
        worst_rel_to_scale=max(c.rel_to_scale for c in per_batch.values()),
        top1_agreement=min(c.top1_agreement for c in per_batch.values()),
        top5_overlap=min(c.top5_overlap for c in per_batch.values()),
        passed=inv_ok and all(c.passed for c in per_batch.values()),
        inputs=described,
    )
