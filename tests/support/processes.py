"""Child processes the tests start: stopping one, and stopping all that a
fixture started for its test."""

from __future__ import annotations

import os
import signal
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


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process and every child it started, and reap it. For a test's
    servers (started with ``start_new_session=True``, so they lead their own
    process group): a test that is about a clean stop stops them itself; at
    teardown a graceful stop (gunicorn's, Chromium's) only costs seconds."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
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
