"""Class labels: read from the user's file (`--labels FILE`) or list, checked against the model's output size.

A file is one label per line, a JSON list, or a JSON object from index to name ("0": "cat", ...). Labels come
back exactly as given (commas, quotes, non-ASCII); only a label that cannot survive Triton's label file (one per
line) or an empty one is refused. Without labels for a head that is not the source's own, the labels are
placeholders, `class 0` ... `class N-1`, and the manifest and the client say so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from tritonize.errors import TritonizeError

PLACEHOLDER_SOURCE = "none given: placeholders `class 0` ... `class N-1` (name them with --labels FILE)"


def placeholders(count: int) -> tuple[str, ...]:
    return tuple(f"class {i}" for i in range(count))


def are_placeholders(labels: Sequence[str]) -> bool:
    """Labels that only number the outputs (what `placeholders` makes, and what a client without labels shows)."""
    return len(labels) > 0 and all(label == f"class {i}" for i, label in enumerate(labels))


def read_labels(path: Path) -> tuple[str, ...]:
    """A labels file: one per line (a final newline is not a label), a JSON list, or a JSON object index -> name."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TritonizeError(f"--labels {path} does not exist; give a file with one label per line, a JSON list, or "
                             "a JSON object from index to name") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TritonizeError(f"cannot read --labels {path} ({e}); it must be UTF-8 text") from None
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise TritonizeError(f"--labels {path} starts like JSON but is not ({e.msg} at line {e.lineno}); give a "
                                 "JSON list, a JSON object from index to name, or one label per line") from None
        return check_labels(data, f"--labels {path}")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    return check_labels([line.removesuffix("\r") for line in lines], f"--labels {path}")


def check_labels(data, what: str) -> tuple[str, ...]:
    """A list of strings, or a mapping whose keys are exactly the indexes 0..N-1 (JSON's "0", "1", ... too)."""
    if isinstance(data, dict):
        try:
            indexed = {int(k): v for k, v in data.items()}
        except (TypeError, ValueError):
            raise TritonizeError(f"{what}: an object's keys must be the class indexes 0..N-1, got "
                                 f"{next(iter(data))!r}") from None
        if sorted(indexed) != list(range(len(indexed))):
            missing = sorted(set(range(len(indexed))) - set(indexed))
            raise TritonizeError(f"{what}: an object's keys must be the class indexes 0..{len(indexed) - 1}; "
                                 f"index {missing[0]} is missing")
        data = [indexed[i] for i in range(len(indexed))]
    if isinstance(data, str) or not isinstance(data, (list, tuple)):
        raise TritonizeError(f"{what}: expected a list of labels or an object from index to label, got "
                             f"{type(data).__name__}")
    for i, label in enumerate(data):
        if not isinstance(label, str):
            raise TritonizeError(f"{what}: label {i} is {label!r}, not a string")
        if not label.strip():
            raise TritonizeError(f"{what}: label {i} is empty; every class needs a name")
        if "\n" in label or "\r" in label:
            raise TritonizeError(f"{what}: label {i} ({label!r}) holds a line break, which Triton's label file "
                                 "(one label per line) cannot carry")
    if not data:
        raise TritonizeError(f"{what} holds no labels")
    return tuple(data)


def labels_for(given, count: int, source_labels: Sequence[str] | None, source_origin: str) -> tuple[tuple[str, ...], str]:
    """(labels, where they came from): the user's (a path or a list) when given, else the source's own when they fit
    the output size, else placeholders. The user's must fit the output size: one line with both numbers."""
    if given is not None:
        if isinstance(given, (str, Path)):
            labels, origin = read_labels(Path(given)), f"--labels {Path(given).resolve()}"
        else:
            labels, origin = check_labels(list(given), "labels"), "given (labels=...)"
        if len(labels) != count:
            raise TritonizeError(f"{origin.split(' (')[0]} has {len(labels)} labels but the model has {count} outputs; "
                                 "give one label per output, in output order")
        return labels, origin
    if source_labels is not None and len(source_labels) == count:
        return tuple(source_labels), source_origin
    return placeholders(count), PLACEHOLDER_SOURCE
