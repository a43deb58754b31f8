"""Wait on a condition with a timeout, never a bare sleep as synchronisation."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Return the first truthy value of ``predicate()``; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(interval)
