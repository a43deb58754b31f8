"""``linectl up`` passes SIGHUP on to the gateway, and stops cleanly (SIGTERM)
within 2 s: no service waits out a message drain's timeout, nor the
interpreter's teardown, on its way out."""

from __future__ import annotations

import signal
import time

from tests.ops.stack import Stack
from tests.support.waiting import wait_for

CLEAN_STOP_SECONDS = 2.0


def test_hangup_reaches_the_gateway_and_a_clean_stop_takes_at_most_two_seconds(stack_factory):
    stack: Stack = stack_factory().up()
    stack.wait_line("linectl: ready")
    gateway = stack.process("gateway")

    mark = len(stack.lines)
    stack.proc.send_signal(signal.SIGHUP)
    stack.wait_line("SIGHUP: the workers re-read the tokens", timeout=30, after=mark)
    assert stack.proc.poll() is None and stack.process("gateway") == gateway  # reloaded, not restarted

    started = time.monotonic()
    assert stack.terminate(timeout=30) == 0
    took = time.monotonic() - started
    assert took <= CLEAN_STOP_SECONDS, f"clean stop took {took:.2f}s:\n" + "\n".join(stack.lines[-30:])
    assert "embedded PostgreSQL stopped" in stack.output()
    assert "did not stop in" not in stack.output()  # nothing was killed for being slow
    wait_for(lambda: not stack.pids(), 10, 0.05, "no process of the stack left")
