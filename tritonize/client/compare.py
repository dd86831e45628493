"""`tritonize client compare`: the same images through several served models, judged with verify.compare.

Each classifier is driven along each preprocessing path asked for (`--preprocess client,server,uint8`:
the classifier itself, and its ensembles), with inputs made by its own contract (they normally agree).
The logits of the first round are compared pairwise on the images all of them classified (the first
model of a pair is the reference), and every round's request latencies give p50/p95/p99 per model.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from tritonize.client.connection import Connection
from tritonize.client.stats import latency_summary
from tritonize.console import ms, table
from tritonize.errors import TritonizeError
from tritonize.images import DEFAULT_MAX_PIXELS, load_images
from tritonize.verify import Tolerance, compare


@dataclass
class CompareReport:
    url: str
    images: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # unreadable files, one line each
    models: dict[str, dict] = field(default_factory=dict)  # name -> {"status", "latency", ...}
    pairs: list[dict] = field(default_factory=list)
    min_top1_agreement: float | None = None
    error: str | None = None  # a model failed midway (server died); the rest is kept

    @property
    def passed(self) -> bool:
        """False when a pair falls short of --min-top1-agreement (always True without it)."""
        if self.min_top1_agreement is None:
            return True
        return all(p["top1_agreement"] >= self.min_top1_agreement for p in self.pairs)

    def to_dict(self) -> dict:
        return {
            "url": self.url, "images": self.images, "failures": self.failures, "models": self.models,
            "pairs": self.pairs, "min_top1_agreement": self.min_top1_agreement, "passed": self.passed,
            "error": self.error,
        }

    def to_text(self) -> str:
        rows = []
        for name, m in self.models.items():
            lat = m.get("latency") or {}
            rows.append((name, m.get("preprocessing_path", "-"), m["status"], m.get("requests", "-"), m.get("max_batch_size", "-"),
                         ms(lat.get("p50_ms", float("nan"))), ms(lat.get("p95_ms", float("nan"))), ms(lat.get("p99_ms", float("nan")))))
        out = [f"{len(self.images)} images, {self.url}", "models (latency per request)",
               table(("model", "preprocessing", "status", "requests", "max batch", "p50 ms", "p95 ms", "p99 ms"), rows)]
        if self.pairs:
            out.append("pairs (reference vs candidate)")
            out.append(table(
                ("reference", "candidate", "top-1 agree", "top-5 overlap", "max abs", "rel to scale", "KL"),
                [(p["reference"], p["candidate"], f"{p['top1_agreement']:.1%}", f"{p['top5_overlap']:.1%}",
                  f"{p['max_abs']:.3g}", f"{p['rel_to_scale']:.2e}", f"{p['mean_kl']:.2e}") for p in self.pairs],
            ))
        disagreements = [(p["reference"], p["candidate"], d) for p in self.pairs for d in p["disagreements"]]
        if disagreements:
            out.append("images where top-1 differs")
            out.append(table(("image", "reference", "candidate"),
                             [(d["image"], f"{a}: {d[a]}", f"{b}: {d[b]}") for a, b, d in disagreements]))
        elif self.pairs:
            out.append("all models give the same top-1 on every image")
        if self.min_top1_agreement is not None:
            verdict = "met" if self.passed else "NOT met"
            out.append(f"minimum top-1 agreement {self.min_top1_agreement:.1%}: {verdict}")
        return "\n".join(out)


def compare_models(
    connection: Connection,
    paths: Sequence[Path],
    models: Sequence[str] | None = None,
    repeat: int = 3,
    min_top1_agreement: float | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    preprocess: Sequence[str] | None = None,
) -> CompareReport:
    """Each classifier along each preprocessing path in `preprocess` (None: the default path per
    classifier), every pair compared on the same images."""
    if repeat < 1:
        raise TritonizeError(f"--repeat must be at least 1, got {repeat}")
    names = list(models) if models else connection.classifiers()
    states = connection.models(names)
    report = CompareReport(connection.url, min_top1_agreement=min_top1_agreement)
    infos = {}  # served model -> ModelInfo: each classifier along each preprocessing path asked for
    for name in names:
        state = states.get(name, "not in the repository")
        if state != "READY":
            report.models[name] = {"status": state}
            continue
        for path in preprocess or [None]:
            info = connection.model_for(name, path)
            infos[info.name] = info
            report.models[info.name] = {"status": "READY", "classifier": info.classifier, "preprocessing_path": info.path}
    if len(infos) < 2:
        listing = ", ".join(f"{n} ({s})" for n, s in sorted(states.items())) or "none"
        raise TritonizeError(f"compare needs at least two READY models or preprocessing paths, got {len(infos)} "
                             f"({', '.join(infos) or 'none'}) of {', '.join(names) or 'none'}; models at {connection.url}: {listing}")

    # Read once per distinct contract and form; which files are bad does not depend on it.
    inputs, loaded = {}, {}
    for name, info in infos.items():
        key = (info.preprocess, info.form)
        if key not in loaded:
            loaded[key] = load_images(paths, info.preprocess, max_pixels, info.form)
        inputs[name] = loaded[key]
    contracts = {info.preprocess for info in infos.values()}

    rows, labels = {}, {}  # served model -> {image: logits row}
    refusals: list[tuple[str, str]] = []  # (file, its one line), for each path that refused it
    for name, info in infos.items():
        entry = report.models[name]
        entry["max_batch_size"] = info.max_batch_size
        if len(contracts) > 1:
            entry["preprocess"] = vars(info.preprocess)
        latencies: list[float] = []
        rejected: dict[int, str] = {}
        try:
            labels[name] = connection.labels(info)
            for round_ in range(repeat):
                out = connection.infer_all(info, inputs[name].arrays, on_batch=lambda _l, s, into=latencies: into.append(s),
                                           rejected=rejected)
                if round_ == 0:
                    kept = [image for i, image in enumerate(inputs[name].names) if i not in rejected]
                    rows[name] = dict(zip(kept, out))
        except TritonizeError as e:  # the server failed midway: keep what the other models gave
            entry["status"] = f"FAILED: {e}"
            report.error = report.error or str(e)
        refusals += [(inputs[name].names[i], f"{inputs[name].names[i]}: {reason}") for i, reason in rejected.items()]
        entry["requests"] = len(latencies)
        entry["latency"] = latency_summary(latencies, (50, 95, 99))

    # Compare on the images every model classified (a file is bad for all, or refused by the server). A file refused
    # along several paths (by this client and by the server, each with its own hint) is one bad input: its first line.
    for images in loaded.values():
        refusals += zip(images.failed, images.failures)
    first: dict[str, str] = {}
    for file, line in refusals:
        first.setdefault(file, line)
    report.failures = list(first.values())
    report.images = [str(p) for p in paths if all(str(p) in r for r in rows.values())]
    if not report.images:
        return report
    logits = {name: np.stack([r[image] for image in report.images]) for name, r in rows.items()}

    tol = Tolerance(min_top1_agreement=min_top1_agreement if min_top1_agreement is not None else 1.0)
    for a, b in itertools.combinations([n for n in infos if n in logits], 2):
        result = compare(logits[a], logits[b], tol)
        top_a, top_b = logits[a].argmax(-1), logits[b].argmax(-1)
        pair = {"reference": a, "candidate": b, **result.to_dict()}
        pair["disagreements"] = [
            {"image": image, a: labels[a][i], b: labels[b][j]}
            for image, i, j in zip(report.images, top_a, top_b) if i != j
        ]
        report.pairs.append(pair)
    return report

