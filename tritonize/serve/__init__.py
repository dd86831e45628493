"""Serve a model repository with a real Triton server: the embedded engine (`serve.embedded`: the
tritonserver binary bundled in nvidia-pytriton + the project's Python-based backends in
`serve.backends`) or the NGC container (`serve.docker`).

Nothing is imported here (tritonize's own __init__ imports only the standard library): the backends run inside
Triton's Python stubs and import only what they use.
"""

from tritonize import _callable_package

_callable_package(__name__)  # tritonize.serve(repository) is tritonize.api.serve
