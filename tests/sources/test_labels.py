"""`--labels FILE`: one per line, a JSON list, or a JSON object from index to name; its length must be the model's
output size; without labels a head of the user's own gets `class 0` ... and says so. Labels come back as given."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMALL_ARCH, error_line, run_cli
from tritonize.errors import TritonizeError
from tritonize.sources.labels import PLACEHOLDER_SOURCE, are_placeholders, labels_for, read_labels

# Commas, quotes, a colon (Triton's classification strings are "score:index:label"), non-ASCII, leading spaces.
AWKWARD = ["cat, tabby", 'say "cheese"', "café crème", "x:y:z", "  indented", "日本語", "back\\slash", "'single'"]


@pytest.mark.parametrize("form", ["lines", "crlf lines", "json list", "json object", "utf-8 bom"])
def test_each_form_gives_the_labels_back_as_written(tmp_path, form):
    path = tmp_path / "labels"
    if form == "lines":
        path.write_text("\n".join(AWKWARD) + "\n", encoding="utf-8")
    elif form == "crlf lines":
        path.write_bytes("\r\n".join(AWKWARD).encode())  # no final newline either
    elif form == "json list":
        path.write_text(json.dumps(AWKWARD), encoding="utf-8")
    elif form == "json object":  # keys out of order, as some id2label dumps have them
        path.write_text(json.dumps({str(i): AWKWARD[i] for i in reversed(range(len(AWKWARD)))}, ensure_ascii=False))
    else:
        path.write_bytes(b"\xef\xbb\xbf" + "\n".join(AWKWARD).encode())
    assert read_labels(path) == tuple(AWKWARD)


@pytest.mark.parametrize("text, message", [
    ("a\n\nc\n", "label 1 is empty"),
    ('["a", 3]', "label 1 is 3, not a string"),
    ('["a", "b\\nc"]', "holds a line break"),
    ('{"0": "a", "2": "c"}', "index 1 is missing"),
    ('{"zero": "a"}', "keys must be the class indexes"),
    ('[1, 2', "starts like JSON but is not"),
    ("[]", "holds no labels"),
    ("", "holds no labels"),
])
def test_bad_label_files_say_what_is_wrong(tmp_path, text, message):
    (tmp_path / "labels.txt").write_text(text, encoding="utf-8")
    with pytest.raises(TritonizeError, match=message):
        read_labels(tmp_path / "labels.txt")


def test_a_count_mismatch_is_one_line_with_both_numbers(tmp_path):
    (tmp_path / "labels.txt").write_text("a\nb\nc\n")
    line = error_line(run_cli("export", "--arch", SMALL_ARCH, "--weights", "none", "--labels", tmp_path / "labels.txt",
                              "--artifacts", tmp_path / "o"))
    assert line == (f"error: --labels {tmp_path / 'labels.txt'} has 3 labels but the model has 1000 outputs; give one "
                    "label per output, in output order")
    assert not (tmp_path / "o").exists()


def test_a_missing_labels_file(tmp_path):
    line = error_line(run_cli("export", "--arch", SMALL_ARCH, "--weights", "none", "--labels", tmp_path / "nope.txt",
                              "--artifacts", tmp_path / "o"))
    assert f"--labels {tmp_path / 'nope.txt'} does not exist" in line


def test_without_labels_the_source_s_or_placeholders():
    assert labels_for(None, 3, ("a", "b", "c"), "the source") == (("a", "b", "c"), "the source")
    assert labels_for(None, 2, ("a", "b", "c"), "the source") == (("class 0", "class 1"), PLACEHOLDER_SOURCE)
    assert labels_for(["x", "y"], 2, ("a", "b"), "the source") == (("x", "y"), "given (labels=...)")
    assert are_placeholders(("class 0", "class 1")) and not are_placeholders(("class 1", "class 0"))
    assert not are_placeholders(())


def test_the_client_says_when_the_labels_are_placeholders():
    """`client classify` (which sets `unnamed` from the labels the server hands out: are_placeholders) says so."""
    from tritonize.client.classify import ClassifyReport

    top = [{"label": "class 3", "index": 3, "probability": 0.5}]
    report = ClassifyReport("onnx_model", "localhost:8001", predictions=[{"image": "a.jpg", "top_k": top}],
                            unnamed=True)
    assert report.to_text().endswith("(onnx_model has no label names: `class N` is its output N; export it with "
                                     "--labels FILE to name them)")
    assert report.to_dict()["labels"] == "placeholders"
    named = ClassifyReport("onnx_model", "localhost:8001", predictions=[{"image": "a.jpg", "top_k": top}])
    assert "no label names" not in named.to_text() and named.to_dict()["labels"] == "named"
