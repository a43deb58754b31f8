"""``linectl up``: run the stack's processes under one supervisor.

Each process gets its output prefixed with its name, is restarted with
back-off when it dies, and is stopped in reverse start order (SIGTERM, then
SIGKILL after a grace period) on Ctrl-C or SIGTERM; a process nothing else waits
on (``independent``) is told to stop with the first. A process that exits with
one of its ``fatal_exits`` (it cannot run here: a simulator's port is taken)
stops the stack, which then raises :class:`CannotRun`. SIGHUP is passed on to the
processes that take it (the gateway: its workers re-read the tokens file).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("linectl.up")

# A process that ran this long before it died, or that was running when the
# stack last answered as ready (``mark_healthy``), was not crash-looping (it was
# killed, or lost its database): it comes back at once, not after a back-off.
STABLE_SECONDS = 5.0
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)  # None: not inherited from the supervisor
    grace_seconds: float = 10.0
    takes_hangup: bool = False  # SIGHUP to the supervisor is passed on to it
    # Nothing in the stack waits on it (the retention job): it is told to stop with
    # the first process, not after every later one has stopped.
    independent: bool = False
    # Exit statuses that say the process cannot run here at all (a simulator whose
    # port another holds): the stack stops (:class:`CannotRun`) instead of restarting it.
    fatal_exits: tuple[int, ...] = ()


class CannotRun(Exception):
    """A process of the stack cannot run (one of its ``fatal_exits``): the stack was
    stopped; ``str()`` is one line saying why."""


class Supervised:
    def __init__(self, spec: ProcessSpec, base_env: dict[str, str], out=sys.stdout, width: int = 16):
        self.spec = spec
        self.width = width  # of the name before each output line (a plant's names are longer)
        self.base_env = base_env
        self.out = out
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.backoff = BACKOFF_FIRST
        self.next_start = 0.0
        self.started_at = 0.0
        self.terminated: subprocess.Popen | None = None  # the run SIGTERM was sent to
        self.last_line = ""  # of its output: a process that cannot run says why last
        self.pump: threading.Thread | None = None  # copies its output
        self._lock = threading.Lock()

    def start(self) -> None:
        env = {name: value for name, value in {**self.base_env, **self.spec.env, "PYTHONUNBUFFERED": "1"}.items()
               if value is not None}
        self.proc = subprocess.Popen(
            self.spec.argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
            text=True,
            bufsize=1,
        )
        self.started_at = time.monotonic()
        self.pump = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        self.pump.start()
        log.info("started %s (pid %s)", self.spec.name, self.proc.pid)

    def _pump(self, proc: subprocess.Popen) -> None:
        prefix = f"{self.spec.name:<{self.width}}| "
        for line in proc.stdout:
            with self._lock:
                self.out.write(prefix + line)
                self.out.flush()
                self.last_line = line.strip() or self.last_line

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def terminate(self) -> None:
        """SIGTERM, once per run of the process."""
        if self.alive() and self.terminated is not self.proc:
            self.terminated = self.proc
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if not self.alive():
            return
        self.terminate()
        try:
            self.proc.wait(self.spec.grace_seconds)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %ss; killing it", self.spec.name, self.spec.grace_seconds)
            self.proc.kill()
            self.proc.wait()
        log.info("stopped %s", self.spec.name)


class Supervisor:
    def __init__(self, specs: list[ProcessSpec], env: dict[str, str] | None = None):
        width = max([16] + [len(s.name) for s in specs])
        self.children = [Supervised(s, dict(env or os.environ), width=width) for s in specs]
        self._stop = threading.Event()
        self.cannot_run: str | None = None  # why the stack stopped by itself

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def pass_on_hangup(self, *_args) -> None:
        for child in self.children:
            if child.spec.takes_hangup:
                child.signal(signal.SIGHUP)

    def stopping(self) -> bool:
        return self._stop.is_set()

    def mark_healthy(self) -> None:
        """The whole stack answers as ready: every running process is healthy, so a
        later death is not part of a crash loop (it restarts after the first delay)."""
        for child in self.children:
            if child.alive():
                child.backoff = BACKOFF_FIRST

    def status(self) -> dict[str, bool]:
        return {c.spec.name: c.alive() for c in self.children}

    def run(self, on_started=None, on_stopping=None) -> None:
        """Start every process, watch them until asked to stop, then stop them;
        ``on_started(self)`` once all are started, ``on_stopping()`` when the stop begins.
        Raises :class:`CannotRun` once stopped, when a process exited saying it cannot run."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.pass_on_hangup)
        for child in self.children:
            child.start()
        if on_started:
            on_started(self)
        try:
            while not self._stop.wait(0.5):
                self._watch()
        finally:
            if on_stopping:
                on_stopping()
            for child in self.children:
                if child.spec.independent:
                    child.terminate()
            for child in reversed(self.children):
                child.stop()
        if self.cannot_run is not None:
            raise CannotRun(self.cannot_run)

    def _watch(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.alive():
                continue
            if child.next_start == 0.0:
                code = child.proc.returncode if child.proc else None
                if code in child.spec.fatal_exits and self.cannot_run is None:
                    child.pump.join(1.0)  # its last words first
                    self.cannot_run = (f"{child.spec.name} cannot run"
                                       f" ({child.last_line or f'exit status {code}'}): stopped")
                    self._stop.set()  # restarting it would only say the same again
                    return
                if now - child.started_at >= STABLE_SECONDS:
                    child.backoff = BACKOFF_FIRST  # it had been running: forget earlier crashes
                child.next_start = now + child.backoff
                log.error(
                    "%s exited (status %s); restarting in %.1fs",
                    child.spec.name, code, child.backoff,
                )
                child.backoff = min(child.backoff * 2, BACKOFF_MAX)
            elif now >= child.next_start:
                child.next_start = 0.0
                child.restarts += 1
                child.start()
