"""What idle consumers cost PostgreSQL (issue 55): nothing per consumer. Each
wakes by push (LISTEN/NOTIFY) alone, and the plant's look for what dead
consumers left is one query per polling interval for all of them (the first
transport due looks and tells the others), not one sweep and one claim per
consumer per interval."""

from __future__ import annotations

import collections
import threading
import time
import uuid

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

from shared.transport.pgsql.channel import Channel
from shared.transport.pgsql.sql import CLAIM, SWEEP_DUE_SQL, SWEEP_SQL, TAKE
from tests.support.waiting import wait_for

INTERVAL = 0.2
CONSUMERS = 4
LOOKS = 10


@pytest.fixture
def statements(monkeypatch):
    """The statements every pgsql:// channel of this process sends, by kind."""
    counted = collections.Counter()
    query = Channel._query

    def counting(self, sql, params=None):
        kind = {SWEEP_DUE_SQL: "look", SWEEP_SQL: "sweep", CLAIM.call: "claim", TAKE.call: "claim"}.get(sql, "other")
        counted[kind] += 1
        return query(self, sql, params)

    monkeypatch.setattr(Channel, "_query", counting)
    return counted


def test_idle_consumers_send_one_look_per_interval_for_all_and_no_claim(pgsql_url, statements):
    exchange = Exchange(f"idle-{uuid.uuid4().hex[:8]}", "direct")
    stop, received, errors = threading.Event(), [], []

    def consume(n):
        try:
            queue = Queue(f"{exchange.name}-{n}", exchange, routing_key=str(n), durable=True)
            with Connection(pgsql_url, transport_options={"polling_interval": INTERVAL}) as conn:
                with Consumer(conn, [queue], callbacks=[lambda b, m: (received.append(b), m.ack())]):
                    while not stop.is_set():
                        try:
                            conn.drain_events(timeout=0.1)
                        except TimeoutError:
                            pass
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(n,), daemon=True) for n in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: statements["look"] >= CONSUMERS, message="every consumer's first look")
        statements.clear()
        started = time.monotonic()
        wait_for(lambda: statements["look"] >= LOOKS, timeout=30, interval=0.01, steady=True,
                 message="the plant's looks")
        elapsed = time.monotonic() - started
        idle = dict(statements)
        # One consumer looking each interval for all: LOOKS take about LOOKS intervals.
        # (Each of CONSUMERS looking on its own would take a quarter of that.)
        assert elapsed >= 0.7 * LOOKS * INTERVAL, (elapsed, idle)
        assert idle.get("claim", 0) == 0 and idle.get("other", 0) == 0 and idle.get("sweep", 0) == 0, idle

        with Connection(pgsql_url) as conn:  # a message still wakes its consumer at once
            Producer(conn).publish({"n": 2}, exchange=exchange, routing_key="2", delivery_mode=2)
        wait_for(lambda: received == [{"n": 2}], timeout=5, message="the message")
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert not errors
