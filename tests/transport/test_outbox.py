"""Publishing in the caller's transaction on pgsql:// (an outbox, issue 55): the
message's rows are written by the caller's connection, commit or roll back with
its transaction, and cost no statement (so no commit) of the channel's own; the
consumer is woken after the commit."""

from __future__ import annotations

import uuid

import psycopg2
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

from shared.transport.pgsql.channel import Channel
from shared.transport.pgsql.outbox import Outbox, publishing_in, same_database


@pytest.fixture
def channel_statements(monkeypatch):
    sent = []
    query = Channel._query

    def counting(self, sql, params=None):
        sent.append(sql)
        return query(self, sql, params)

    monkeypatch.setattr(Channel, "_query", counting)
    return sent


def test_a_publish_in_an_outbox_commits_with_the_callers_transaction(db_url, pgsql_url, channel_statements):
    exchange = Exchange(f"outbox-{uuid.uuid4().hex[:8]}", "direct", durable=True)
    queue = Queue(f"{exchange.name}-q", exchange, routing_key="k", durable=True)
    caller = psycopg2.connect(db_url)
    received = []
    try:
        with Connection(pgsql_url) as conn, Consumer(conn, [queue], callbacks=[
                lambda body, message: (received.append(body), message.ack())]):
            producer = Producer(conn.channel(), exchange)
            producer.publish({"n": 0}, routing_key="k")  # declares; outside any outbox
            conn.drain_events(timeout=5)
            assert received == [{"n": 0}]

            outbox = Outbox(caller)
            with caller.cursor() as cur:  # rolled back: nothing was published
                with publishing_in(outbox):
                    producer.publish({"n": 1}, routing_key="k")
            caller.rollback()
            del channel_statements[:]
            outbox = Outbox(caller)
            with caller.cursor() as cur:
                cur.execute("SELECT txid_current()")
                (txid,) = cur.fetchone()
                with publishing_in(outbox):
                    producer.publish({"n": 2}, routing_key="k", delivery_mode=2)
            assert channel_statements == []  # the channel's own connection did nothing
            with psycopg2.connect(db_url) as other, other.cursor() as cur:
                cur.execute("SELECT count(*) FROM mq_message WHERE queue = %s AND lease_pid IS NULL", (queue.name,))
                assert cur.fetchone() == (0,)  # not before the caller commits
            caller.commit()
            with caller.cursor() as cur:
                cur.execute("SELECT xmin::text::bigint FROM mq_message WHERE queue = %s AND lease_pid IS NULL",
                            (queue.name,))
                assert cur.fetchall() == [(txid % 2**32,)]  # written by the caller's transaction
                cur.execute(*outbox.wake())
            caller.commit()
            conn.drain_events(timeout=5)
            assert received == [{"n": 0}, {"n": 2}]
    finally:
        caller.close()


def test_same_database_compares_where_libpq_connects():
    assert same_database("pgsql://u:p@db:5433/linectl", "postgresql://v@db:5433/linectl")
    assert same_database("pgsql:///linectl?host=/run/pg", "postgresql:///linectl?host=/run/pg")
    assert not same_database("pgsql://db/linectl", "postgresql://db/other")
    assert not same_database("amqp://guest@db:5672//", "postgresql://db:5672/")
    assert not same_database("", "postgresql://db/linectl")


def test_a_queue_being_deleted_neither_stalls_nor_fails_the_callers_transaction(db_url, pgsql_url):
    """A dead consumer's auto-delete queue swept while the loop publishes to it: the
    loop's transaction (its state change) must not wait for the sweep and then fail
    on the message's foreign key (the plant's UNS test saw a line stop so)."""
    exchange = Exchange(f"outbox-{uuid.uuid4().hex[:8]}", "fanout", durable=True)
    kept = Queue(f"{exchange.name}-kept", exchange, durable=True)
    going = Queue(f"{exchange.name}-going", exchange, durable=False, auto_delete=True)
    caller, sweeper = psycopg2.connect(db_url), psycopg2.connect(db_url)
    try:
        with Connection(pgsql_url) as conn:
            kept(conn.channel()).declare()
            going(conn.channel()).declare()
        with sweeper.cursor() as cur:  # the sweep's delete, not yet committed
            cur.execute("DELETE FROM mq_queue WHERE name = %s", (going.name,))
            assert cur.rowcount == 1
        with caller.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '3s'")  # without the skip: waits, then fails
            routed = Outbox(caller).insert("public", exchange.name, "", '{"n": 1}', None)
        assert routed == 1  # the kept queue only
        sweeper.commit()
        caller.commit()
        with caller.cursor() as cur:
            cur.execute("SELECT queue FROM mq_message WHERE payload = %s AND queue LIKE %s",
                        ('{"n": 1}', f"{exchange.name}-%"))
            assert cur.fetchall() == [(kept.name,)]
        caller.commit()
    finally:
        caller.close()
        sweeper.close()
