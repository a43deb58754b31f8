"""Child processes the tests start: stopping one, and stopping all that a
fixture started for its test."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Started:
    """A fixture's starter: calling it starts one more (``start(*args)``);
    ``stop_all()`` stops them all, in the order they were started."""

    def __init__(self, start: Callable[..., Any], stop: Callable[[Any], None]):
        self._start, self._stop = start, stop
        self.started: list[Any] = []

    def __call__(self, *args, **kwargs):
        thing = self._start(*args, **kwargs)
        self.started.append(thing)
        return thing

    def stop_all(self) -> None:
        for thing in self.started:
            self._stop(thing)
