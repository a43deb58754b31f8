"""Wait on a condition with a timeout, never a bare sleep as synchronisation."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Return the first truthy value of ``predicate()``; fail after ``timeout``
    (``message``: what was waited for, or a callable saying it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = message() if callable(message) else message  # a callable: what was seen last
            raise AssertionError(f"timed out after {timeout}s waiting for {said or predicate}")
        time.sleep(interval)
