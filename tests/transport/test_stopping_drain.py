"""A stopping pgsql:// transport ends an idle drain at once, not at the end of
the caller's timeout: nameko's QueueConsumer sees its cancels and its stop
only when a drain returns (``linectl up``'s clean stop is timed in
tests/ops/test_up.py)."""

import threading
import time

import pytest
from kombu import Connection, Consumer, Queue

from shared.transport.pgsql.transport import STOPPING_DRAIN_SECONDS


def test_stopping_ends_an_idle_drain_in_progress_and_the_next_ones(pgsql_url):
    with Connection(pgsql_url, transport_options={"polling_interval": 60}) as conn:
        with Consumer(conn, [Queue("stopping-drain", auto_delete=True)], callbacks=[lambda *_: None]):
            entered, ended = threading.Event(), []

            def drain():
                entered.set()
                started = time.monotonic()
                with pytest.raises(TimeoutError):
                    conn.drain_events(timeout=30)
                ended.append(time.monotonic() - started)

            drainer = threading.Thread(target=drain)
            drainer.start()
            assert entered.wait(5)
            conn.transport.stopping()
            drainer.join(10)
            assert ended and ended[0] < 5, ended  # woken, not the 30 s timeout
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=30)
            assert time.monotonic() - started < STOPPING_DRAIN_SECONDS + 2
