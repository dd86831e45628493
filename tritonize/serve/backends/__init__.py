"""The project's Python-based Triton backends (`<name>/model.py`), run by the embedded server's
Python backend for models whose native backend is not in the backend directory: one per Triton backend of
tritonize's models (tritonize/model_repository.py's records), or its platform's where the bundled Triton
is older than the platform (serve/embedded.py python_backend_of)."""

from pathlib import Path

BACKEND_NAMES = tuple(sorted(p.parent.name for p in Path(__file__).parent.glob("*/model.py")))  # these directories
