"""`tritonize client classify`: top-k labels and probabilities per image from one served model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tritonize.client.connection import Connection, PartialResult
from tritonize.console import table
from tritonize.images import DEFAULT_MAX_PIXELS, load_images
from tritonize.sources.labels import are_placeholders
from tritonize.verify import softmax, topk


@dataclass
class ClassifyReport:
    model: str
    url: str
    preprocess: str = "client"  # the path the images took: client | server | uint8
    predictions: list[dict] = field(default_factory=list)  # {"image", "top_k": [{"label", "index", "probability"}]}
    failures: list[str] = field(default_factory=list)  # one line per unreadable file
    error: str | None = None  # the server failed midway; predictions hold what came back before
    weights: str = ""  # what the model was built from (source.weights); "none": random init, labels mean nothing
    unnamed: bool = False  # the model's labels are placeholders (`class N` is output N): it was given none

    @property
    def warning(self) -> str | None:
        if self.weights != "none":
            return None
        return (f"{self.model} was built with --weights none (random init): its labels and probabilities mean "
                "nothing; build with pretrained weights or a checkpoint to classify")

    def to_dict(self) -> dict:
        return {"model": self.model, "url": self.url, "preprocess": self.preprocess, "weights": self.weights,
                "labels": "placeholders" if self.unnamed else "named",
                "predictions": self.predictions, "failures": self.failures, "error": self.error}

    def to_text(self) -> str:
        blocks = []
        for p in self.predictions:
            rows = [(f"{i}.", t["label"], f"{t['probability']:.4f}") for i, t in enumerate(p["top_k"], 1)]
            blocks.append(f"{p['image']}  ({self.model}, {self.preprocess} preprocessing)\n"
                          + table(("#", "label", "probability"), rows))
        if self.unnamed and blocks:
            blocks.append(f"({self.model} has no label names: `class N` is its output N; export it with --labels FILE "
                          "to name them)")
        return "\n".join(blocks)


def classify(connection: Connection, model: str, paths: Sequence[Path], top_k: int = 5,
             max_pixels: int = DEFAULT_MAX_PIXELS, preprocess: str | None = None) -> ClassifyReport:
    """Send the images along the preprocessing path (`Connection.model_for`: the encoded files when the
    repository has the ensembles), infer in batches of at most max_batch_size, softmax, top-k."""
    info = connection.model_for(model, preprocess)
    images = load_images(paths, info.preprocess, max_pixels, info.form)
    report = ClassifyReport(info.name, connection.url, info.path, failures=images.failures, weights=info.weights)
    if not images.arrays:
        return report
    labels = connection.labels(info)
    report.unnamed = are_placeholders(labels)
    rejected: dict[int, str] = {}
    try:
        logits = connection.infer_all(info, images.arrays, rejected=rejected)
    except PartialResult as e:
        logits, report.error = e.logits, str(e)
    report.failures += [f"{images.names[i]}: {reason}" for i, reason in rejected.items()]
    names = [name for i, name in enumerate(images.names) if i not in rejected]
    probs = softmax(logits)
    for name, row_logits, row_probs in zip(names, logits, probs):
        best = topk(row_logits[None], top_k)[0]
        report.predictions.append({
            "image": name,
            "top_k": [{"label": labels[i], "index": int(i), "probability": float(row_probs[i])} for i in best],
        })
    return report

