"""What the services' refusals have in common: an exception carrying a code a
program can act on and a message a person reads."""

from __future__ import annotations


class CodedError(Exception):
    """An error with ``code`` (machine-readable) and ``message`` (``str(err)``)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
