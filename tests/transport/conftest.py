"""Fixtures of the transport tests: a pgsql:// URL on the test database, and
peer processes that print one line per event."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import shared  # noqa: F401  (registers pgsql://)
from tests.support.processes import Started

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pgsql_url(db_url):
    return "pgsql://" + db_url.split("://", 1)[1]


class Peer:
    """A child process whose stdout lines are read by a thread into a queue."""

    def __init__(self, args, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **(env or {})},
        )
        self.lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout=30):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            err = self.proc.stderr.read() if self.proc.poll() is not None else "(still running)"
            raise AssertionError(f"no line from peer within {timeout}s; stderr: {err}") from None

    def expect(self, line, timeout=30):
        got = self.next_line(timeout)
        assert got == line, got

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)  # it reads stdout to EOF; closing under it would race
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def peers():
    start = Started(Peer, Peer.kill)
    yield start
    start.stop_all()


@pytest.fixture
def kombu_peer(peers):
    def start(url, mode, spec):
        peer = peers(["-m", "tests.transport.kombu_peer", url, mode, json.dumps(spec)])
        peer.expect("ready")
        return peer

    return start
