"""The one exception type for failures a user can act on.

The CLI prints it as a single line and exits non-zero; anything else is a bug and keeps its traceback.
"""


class TritonizeError(Exception):
    """A user-facing failure: the message says what happened and what to do."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
