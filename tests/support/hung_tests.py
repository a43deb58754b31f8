"""A test that runs over its time limit fails alone, and its shard goes on.

pytest-timeout's ``signal`` method would do that, but it falls back to its
``thread`` method whenever ``threading.current_thread()`` is not the main
thread, which is always so once eventlet has patched ``threading``: its timer
was then a green thread (it fires only if the hub runs) that dumps the stacks
and ends the whole process with ``os._exit(1)``, the shard's every later test
with it. So the suite arms the timer itself, on SIGALRM (``ITIMER_REAL``):

- the limit is pytest-timeout's (``timeout`` in pyproject.toml, or a test's
  ``pytest.mark.timeout``), for its set-up, call and teardown together;
- when it runs out the test fails with one line naming its limit and the phase it
  was in, and the traceback of where the test itself waited. The signal may land
  in another green thread (most often the hub, polling): the failure still goes
  to the greenlet the test runs in;
- its teardown then gets ``TEARDOWN_GRACE`` seconds, again and again (up to
  ``GRACES`` times): a finalizer that hangs too fails in its turn rather than
  holding the shard.
"""

from __future__ import annotations

import signal
import traceback

import greenlet
import pytest
from eventlet import hubs

TEARDOWN_GRACE = 30.0
GRACES = 4


class _Timer:
    def __init__(self, item: pytest.Item, limit: float):
        self.item, self.limit = item, limit
        self.main = greenlet.getcurrent()  # the test runs in the greenlet that arms its timer
        self.phase = "setup"
        self.fired = 0

    def message(self) -> str:
        if self.fired == 1:
            return (f"Timeout: {self.item.nodeid} ran over its {self.limit:g} s limit (set-up, call and "
                    f"teardown; pytest.mark.timeout) in its {self.phase}; the traceback is where it waited")
        return (f"Timeout: {self.item.nodeid} still waited {TEARDOWN_GRACE:g} s in its {self.phase} "
                f"after running over its {self.limit:g} s limit")

    def on_alarm(self, signum, frame) -> None:
        self.fired += 1
        if self.fired <= GRACES:
            signal.setitimer(signal.ITIMER_REAL, TEARDOWN_GRACE)
        failure = pytest.fail.Exception(self.message(), pytrace=True)
        current = greenlet.getcurrent()
        if current is self.main or self.main.dead:
            raise failure
        where = "".join(traceback.format_stack(self.main.gr_frame)) if self.main.gr_frame else ""
        self.item.add_report_section(self.phase, "timeout", f"the test waited here:\n{where}")
        if current is hubs.get_hub().greenlet:
            # The hub, polling: it ends with the failure, which goes to its parent (made the
            # test's greenlet), and the next switch starts it again with its timers and
            # listeners. (Resumed instead, it would go back to a poll that may last a minute.)
            current.parent = self.main
            raise failure
        # Another green thread ran: the test's greenlet fails where it waits (this
        # one stays suspended: a test past its limit loses it).
        self.main.throw(failure)


_ARMED = pytest.StashKey[_Timer]()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool:
    timer = _Timer(item, settings.timeout)
    item.stash[_ARMED] = timer
    signal.signal(signal.SIGALRM, timer.on_alarm)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool:
    # pytest-timeout asks this at every failure too (pytest_exception_interact, for a
    # debugger): a test that failed or ran out of time still has teardown to bound.
    # Its timer ends with the test (below), or when a debugger is on its way.
    if item.config.option.usepdb:
        _disarm(item)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    yield
    _disarm(item)


def _disarm(item: pytest.Item) -> None:
    if item.stash.get(_ARMED, None) is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        del item.stash[_ARMED]


def _phase(item: pytest.Item, name: str) -> None:
    timer = item.stash.get(_ARMED, None)
    if timer is not None:
        timer.phase = name


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _phase(item, "setup")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _phase(item, "call")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _phase(item, "teardown")
