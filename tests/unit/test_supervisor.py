"""The supervisor's restart policy on real child processes: a crash loop backs
off, a process that had been running comes back at once, a process that cannot
run here stops the stack."""

import os
import signal
import sys
import time
from contextlib import contextmanager

import pytest

from services.hardware.sim.serving import EXIT_CANNOT_LISTEN
from services.stack import supervisor
from services.stack.supervisor import CannotRun, ProcessSpec, Supervisor
from tests.support.waiting import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@contextmanager
def quiet_supervisor(*specs: ProcessSpec):
    """A supervisor of ``specs`` whose children's output is thrown away."""
    sup = Supervisor(list(specs), env=dict(os.environ))
    with open(os.devnull, "w") as devnull:
        for child in sup.children:
            child.out = devnull
        yield sup


def test_a_crash_loop_backs_off_but_a_killed_process_comes_back_at_once(monkeypatch):
    monkeypatch.setattr(supervisor, "STABLE_SECONDS", 0.5)
    monkeypatch.setattr(supervisor, "BACKOFF_FIRST", 0.05)
    # The crashing child is a shell: a Python start on a loaded machine (CI's suite in four
    # shards) took longer than STABLE_SECONDS, counted as a stable run and reset the backoff.
    with quiet_supervisor(ProcessSpec("crashing", ["/bin/sh", "-c", "exit 3"]), ProcessSpec("steady", SLEEPER)) as sup:
        crashing, steady = sup.children
        for child in sup.children:
            child.start()
        try:
            wait_for(lambda: sup._watch() or crashing.restarts >= 4, 30, 0.01, "four restarts")
            assert crashing.backoff >= 0.05 * 2 ** 4  # doubled at every quick death

            # steady has run for longer than STABLE_SECONDS by now: killed, it restarts at once
            assert time.monotonic() - steady.started_at >= 0.5
            first = steady.proc.pid
            steady.proc.kill()
            steady.proc.wait()
            wait_for(lambda: sup._watch() or (steady.alive() and steady.proc.pid != first), 5, 0.01,
                     "steady restarted")
            assert steady.restarts == 1 and steady.backoff == 0.1  # the next delay starts over

            # killed soon after its restart it would back off, unless the stack was ready meanwhile
            steady.backoff = 0.8
            sup.mark_healthy()
            assert steady.backoff == 0.05
        finally:
            for child in sup.children:
                child.stop()


def test_a_process_that_cannot_run_stops_the_stack_instead_of_a_crash_loop():
    # A simulator whose port another holds says so and exits EXIT_CANNOT_LISTEN (the
    # port taken between linectl up's own look and its start, or while it was down).
    cannot_listen = ProcessSpec("sim", ["/bin/sh", "-c", "echo 'linectl sim: cannot listen on 127.0.0.1:5020'; "
                                        f"exit {EXIT_CANNOT_LISTEN}"], fatal_exits=(EXIT_CANNOT_LISTEN,))
    with quiet_supervisor(cannot_listen, ProcessSpec("hardware", SLEEPER)) as sup:
        sim, hardware = sup.children
        handlers = {n: signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            with pytest.raises(CannotRun) as stopped:
                sup.run()
        finally:  # run() takes them over, as linectl up's main thread
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    assert str(stopped.value) == "sim cannot run (linectl sim: cannot listen on 127.0.0.1:5020): stopped"
    assert sim.restarts == 0 and not hardware.alive()
