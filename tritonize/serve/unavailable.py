"""A model that Triton lists as UNAVAILABLE with tritonize's own reason: a model the supervisor gave
up on, or one `repo build` left out with a note. Triton's repository index (what clients and
`tritonize serve` read) carries a reason only for a model whose load failed, so this is a Python
backend model whose initialize() raises the reason.

A load that carries files writes them to a new /tmp/folderXXXXXX (Triton's, whatever TMPDIR says), which
Triton removes when the model unloads, but never when its load fails: `remove_overrides` removes the one such
a load of ours left (each carries a token of its own).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.serve.leftovers import OVERRIDE, TMP, owner

MODEL_PY = "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError({reason!r})\n"


def _config(name: str) -> dict:
    tensor = {"data_type": "TYPE_BOOL", "dims": [1]}  # Triton wants one input and one output
    return {"name": name, "backend": "python", "max_batch_size": 0, "input": [{"name": "none", **tensor}],
            "output": [{"name": "nothing", **tensor}], "instance_group": [{"kind": "KIND_CPU", "count": 1}]}


MODEL_FILE = "1/model.py"


def load_request(name: str, reason: str) -> tuple[bytes, bytes]:
    """The body of a model repository `load` of `name` that leaves it UNAVAILABLE with `reason` (the config and
    files of the request replace the model's own), and the model.py it carries."""
    # Its own token, and who sent it (serve/leftovers.py): the folder it leaves is told by them.
    code = (MODEL_PY.format(reason=reason) + f"# tritonize {secrets.token_hex(8)} {owner()}\n").encode()
    return json.dumps({"parameters": {
        "config": json.dumps(_config(name)), f"file:{MODEL_FILE}": base64.b64encode(code).decode(),
    }}).encode(), code


def remove_overrides(code: bytes) -> None:
    """Remove the folder Triton wrote for a failed load that carried `code` as its model.py (a server on this
    machine, as this user)."""
    for folder in TMP.glob(OVERRIDE):
        try:
            if folder.stat().st_uid == os.geteuid() and (folder / MODEL_FILE).read_bytes() == code:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def write_model(repository: Path, name: str, reason: str) -> None:
    """The same model as a directory of `repository`."""
    (repository / name / "1").mkdir(parents=True)
    config = json_format.ParseDict(_config(name), pb.ModelConfig())
    (repository / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    (repository / name / "1" / "model.py").write_text(MODEL_PY.format(reason=reason))
