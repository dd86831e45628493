"""The repository's preprocessing models: the client path's own code, run by Triton's Python backend.

`repo build` places this file as `<repository>/<model>/1/model.py` of the `preprocess` and
`preprocess_uint8` models, and beside it, in `1/tritonize/`, exact copies of the modules it imports
(`errors.py`, `preprocessing.py`, `images.py`). The model directory thus carries the very code the
client runs, and any Triton serves it: the embedded engine, or the NGC container where tritonize
is not installed (there it needs Pillow: `tritonize serve --engine docker` pip-installs it).

- `preprocess`: input IMAGE, encoded images (BYTES, one element per image), decoded with
  `images.decode_rgb` (EXIF orientation, every Pillow mode) and preprocessed with the contract.
  An element may also be the image's base64 text: JSON carries no raw bytes, so that is what a
  plain HTTP client (the curl line of docs/preprocessing.md) sends. No format Pillow reads is valid base64 text
  (every one has bytes outside that alphabet in its header), so the two cannot be confused.
- `preprocess_uint8`: input PIXELS, UINT8 (crop, crop, 3) RGB that the client resized and cropped
  (`Preprocessing.crop_pixels`); only `Preprocessing.normalize` runs here.

The contract comes from the model's own config parameters (`preprocess.*`), as for every model of
the repository. An image that cannot be used fails its request only, with the line the client
path gives for it (`IMAGE[i]: <reason>`); the other requests of the same execution are served.
"""

import base64
import binascii
import json
import sys
from pathlib import Path

# The copies beside this file come first: they are the code this repository was built with. Importing
# them writes no __pycache__ into the repository (which may be read-only).
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from tritonize.images import DEFAULT_MAX_PIXELS, SERVER_MEMORY, BadImage, decode_rgb  # noqa: E402
from tritonize.preprocessing import Preprocessing  # noqa: E402

# The server keeps Pillow's default limit whatever the client's --max-pixels, and spends at most SERVER_MEMORY on
# an image (images.decoding_cost): one client must not be able to make the server decode a decompression bomb, nor
# take its memory with a small file that decodes to a lot. Both, and the size once resized, are judged from the
# image's header, before decoding.
BOMB_HINT = "the server refuses it; preprocess it on the client if you trust the file (--preprocess client --max-pixels N)"


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.contract = Preprocessing.from_parameters(params, args["model_name"])
        (inp,), (out,) = config["input"], config["output"]
        self.input_name, self.output_name = inp["name"], out["name"]
        self.encoded = inp["data_type"] == "TYPE_STRING"
        if self.encoded:
            try:
                import PIL  # noqa: F401
            except ImportError:
                raise RuntimeError(f"Pillow is not installed in the Python that runs {args['model_name']} "
                                   f"({sys.executable}): pip install pillow there") from None

    def execute(self, requests: list) -> list:
        return [self._respond(request) for request in requests]

    def _respond(self, request):
        array = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            if self.encoded:
                rows = [self.contract(decode_rgb(_unbase64(bytes(blob)), f"{self.input_name}[{i}]", DEFAULT_MAX_PIXELS,
                                                 BOMB_HINT, self.contract, SERVER_MEMORY))
                        for i, blob in enumerate(array.reshape(-1))]
                output = np.stack(rows)
            else:
                output = self.contract.normalize(array)
        except BadImage as e:  # the client's: INVALID_ARG, HTTP 400 (gRPC INVALID_ARGUMENT), not the server's 500
            return _error(str(e), pb_utils.TritonError.INVALID_ARG)
        except Exception as e:  # noqa: BLE001 - whatever went wrong, only this request fails
            return _error(f"{self.input_name}: {type(e).__name__}: {e}")
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, output)])


def _unbase64(blob: bytes) -> bytes:
    try:
        return base64.b64decode(blob, validate=True)
    except binascii.Error:  # not base64 text: the image itself
        return blob


def _error(message: str, code=None):
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)
