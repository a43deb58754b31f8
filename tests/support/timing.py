"""Timing for the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable


def durations(fn: Callable[[], object], times: int) -> list[float]:
    """How long each of `times` calls of `fn`, one after the other, took (seconds)."""
    out = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out
