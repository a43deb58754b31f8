"""On pgsql:// to its own database the loop publishes a transaction's events in
that transaction (an outbox, issue 55): the ``line_events`` row is written by the
loop's commit, not by a commit of the transport's own, and a transaction that
does not commit publishes nothing."""

from __future__ import annotations

import uuid

import pytest
from kombu import Connection, Exchange, Producer, Queue

from services.line_controller.messages import new_message


@pytest.fixture
def line_events(db_url):
    """A kombu producer on pgsql:// and a durable queue bound to what it publishes."""
    exchange = Exchange(f"events-{uuid.uuid4().hex[:8]}", "topic", durable=True)
    queue = Queue(f"{exchange.name}-q", exchange, routing_key="line_events", durable=True)
    with Connection("pgsql://" + db_url.split("://", 1)[1]) as conn:
        channel = conn.channel()
        queue(channel).declare()
        producer = Producer(channel, exchange)
        yield queue, lambda tx_id, frames: producer.publish({"txId": tx_id, "events": frames},
                                                           routing_key="line_events", delivery_mode=2)


def test_the_loop_publishes_its_events_in_its_own_transaction(harness, line_events):
    queue, publish = line_events
    harness.loop.publish = publish
    harness.loop.uow.outbox = True
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    rows = harness.rows("SELECT xmin::text AS x FROM mq_message WHERE queue = :q", q=queue.name)
    assert len(rows) == 1
    events = harness.rows("SELECT DISTINCT xmin::text AS x FROM event_log"
                          " WHERE tx_id = (SELECT max(tx_id) FROM event_log)")
    assert [r.x for r in rows] == [e.x for e in events]  # one transaction wrote both

    # A message that changes nothing (rolled back as a duplicate) publishes nothing.
    harness.loop.handle(new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, id="same", actor="op"))
    harness.loop.handle(new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, id="same", actor="op"))
    assert harness.row("SELECT count(*) AS n FROM mq_message WHERE queue = :q", q=queue.name).n == 2
