"""The project's Python-based Triton backends (`<name>/model.py`), run by the embedded server's
Python backend for models whose native backend is not in the backend directory: one per Triton backend of
tritonize's models (tritonize/model_repository.py's records)."""
