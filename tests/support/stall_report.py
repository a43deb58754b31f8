"""Where a test's set-up or teardown waits, when it waits too long.

A set-up or teardown that takes more than ``STALL_SECONDS`` is a stall (they take
well under a second each, a stack's a few seconds): a watchdog on a real OS
thread (it runs even when the green hub is blocked) writes every green thread's
stack, every OS thread's frame and the server's ``pg_stat_activity`` to
``LINECTL_TEST_STALL_LOG`` (``tests/run_suite.py`` prints each shard's at the
end), or to standard error. A report changes nothing: the test goes on.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback

import greenlet
import pytest
from eventlet import patcher

_threading = patcher.original("threading")
_subprocess = patcher.original("subprocess")

STALL_SECONDS = float(os.environ.get("LINECTL_TEST_STALL_SECONDS", "20"))

# The server the session's databases live on, when known (set by the fixture).
database_server: dict[str, str] = {}


def _green_stacks() -> list[str]:
    out = []
    for obj in gc.get_objects():
        try:  # a dead weak proxy raises on any question, isinstance's included
            frame = obj.gr_frame if isinstance(obj, greenlet.greenlet) else None
        except ReferenceError:
            continue
        if frame is not None:
            out.append(f"--- greenlet {obj!r}\n" + "".join(traceback.format_stack(frame)))
    return out


def _thread_frames() -> list[str]:
    return [f"--- OS thread {ident}\n" + "".join(traceback.format_stack(frame))
            for ident, frame in sys._current_frames().items()]


def _server_activity() -> str:
    url, psql = database_server.get("url"), database_server.get("psql", "psql")
    if not url:
        return "(no database server known)"
    query = ("SELECT pid, datname, state, wait_event_type, wait_event, backend_type,"
             " now() - query_start AS running, left(query, 120) FROM pg_stat_activity")
    try:
        done = _subprocess.run([psql, url.rsplit("/", 1)[0] + "/postgres", "-X", "-c", query],
                               capture_output=True, text=True, timeout=10)
        return done.stdout + done.stderr
    except (OSError, _subprocess.SubprocessError) as exc:
        return f"(pg_stat_activity not read: {exc})"


def write_report(nodeid: str, phase: str, waited: float) -> None:
    parts = [f"==== STALL: {nodeid} ({phase}) has waited {waited:.0f} s ===="]
    for part in (_thread_frames, _green_stacks, _server_activity):
        try:
            found = part()
        except Exception as exc:  # the report must still be written
            found = f"({part.__name__} failed: {exc!r})"
        parts += found if isinstance(found, list) else [found]
    text = "\n".join(parts) + "\n"
    path = os.environ.get("LINECTL_TEST_STALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    else:
        os.write(2, text.encode())  # past pytest's capture of sys.stderr


class _Watchdog:
    def __init__(self, nodeid: str, phase: str):
        self.nodeid, self.phase = nodeid, phase
        self.done = _threading.Event()
        self.thread = _threading.Thread(target=self._watch, daemon=True, name="stall-watchdog")

    def _watch(self) -> None:
        started = time.monotonic()
        if not self.done.wait(STALL_SECONDS):
            write_report(self.nodeid, self.phase, time.monotonic() - started)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _Watchdog(item.nodeid, "setup"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _Watchdog(item.nodeid, "teardown"):
        yield
