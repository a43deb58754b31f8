"""Wait on a condition with a timeout, never a bare sleep as synchronisation."""

from __future__ import annotations

import time

# The longest pause between two looks. A look is a query or an HTTP request,
# and the suite's shards share two cores with the stacks they wait on: a long
# wait looks less often, a short one is still seen within about ``interval``.
LONGEST_PAUSE = 0.2


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = "",
             *, steady: bool = False):
    """Return the first truthy value of ``predicate()``; fail after ``timeout``
    (``message``: what was waited for, or a callable saying it). The pause
    between looks starts at ``interval`` and grows to ``LONGEST_PAUSE``;
    ``steady`` keeps it at ``interval``, to catch a moment that passes."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = message() if callable(message) else message  # a callable: what was seen last
            raise AssertionError(f"timed out after {timeout}s waiting for {said or predicate}")
        time.sleep(pause)
        if not steady:
            pause = max(interval, min(pause * 1.5, LONGEST_PAUSE))
