"""The project's Python-based Triton backends (`<name>/model.py`), run by the embedded server's
Python backend for models whose native backend is not in the backend directory."""

BACKEND_NAMES = ("onnxruntime", "pytorch", "tensorrt")
