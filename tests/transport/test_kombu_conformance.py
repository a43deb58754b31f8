"""kombu-level behaviour of pgsql:// on a real PostgreSQL, with real peer processes."""

import json
import time

import psycopg2
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.exceptions import ChannelError

from shared.transport.pgsql.channel import ACK_DELAY_SECONDS
from tests.support.waiting import wait_for

FAST_SWEEP = {"polling_interval": 0.2}


def rows(db_url, sql, *params):
    conn = psycopg2.connect(db_url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def drain_until(conn, received, count, timeout=10):
    wait_for(lambda: _drain_once(conn) or len(received) >= count, timeout=timeout)


def _drain_once(conn):
    try:
        conn.drain_events(timeout=0.2)
    except TimeoutError:
        pass
    return False


def test_publish_consume_ack_deletes_the_row_and_keeps_amqp_properties(pgsql_url, db_url):
    exchange = Exchange("orders", "direct")
    orders = Queue("orders", exchange, routing_key="new")
    received = []
    with Connection(pgsql_url) as conn:
        with Consumer(conn, [orders], callbacks=[lambda b, m: received.append((b, m))]):
            Producer(conn).publish({"n": 1}, exchange=exchange, routing_key="new",
                                   correlation_id="c-1", reply_to="back", headers={"h": "v"})
            drain_until(conn, received, 1)
            body, message = received[0]
            assert body == {"n": 1}
            assert message.properties["content_type"] == "application/json"
            assert message.properties["content_encoding"] == "utf-8"
            assert message.properties["correlation_id"] == "c-1"
            assert message.properties["reply_to"] == "back"
            assert message.headers == {"h": "v"}
            assert message.delivery_info["redelivered"] is False
            assert rows(db_url, "SELECT count(*) FROM mq_message WHERE lease_pid IS NOT NULL") == [(1,)]
            message.ack()
            # The DELETE rides on the next claim, or runs ACK_DELAY_SECONDS after the ack
            # when none came first (issue 55: most acks cost no statement of their own).
            Producer(conn).publish({"n": 2}, exchange=exchange, routing_key="new")
            drain_until(conn, received, 2)
            assert rows(db_url, "SELECT count(*) FROM mq_message") == [(1,)]  # the first went with that claim
            received[1][1].ack()
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=ACK_DELAY_SECONDS + 0.5)
            assert rows(db_url, "SELECT count(*) FROM mq_message") == [(0,)]
            assert time.monotonic() - started < ACK_DELAY_SECONDS + 1.0


def test_reject_with_requeue_redelivers_and_without_drops(pgsql_url, db_url):
    jobs = Queue("jobs", Exchange("jobs", "direct"), routing_key="jobs")
    received = []
    with Connection(pgsql_url) as conn:
        with Consumer(conn, [jobs], callbacks=[lambda b, m: received.append(m)]):
            Producer(conn).publish("once", exchange="jobs", routing_key="jobs")
            drain_until(conn, received, 1)
            received[0].requeue()
            drain_until(conn, received, 2)
            assert received[1].body == received[0].body
            assert received[1].delivery_info["redelivered"] is True
            received[1].reject()
            assert rows(db_url, "SELECT count(*) FROM mq_message") == [(0,)]


def test_topic_and_fanout_routing_across_processes(pgsql_url, kombu_peer):
    peer = kombu_peer(pgsql_url, "consume", [
        ["events", "topic", "peer-orders", "orders.*"],
        ["events", "topic", "peer-all", "#"],
        ["broadcast", "fanout", "peer-fan", ""],
    ])
    # This process never declared the peer's bindings: routing happens in the database.
    with Connection(pgsql_url) as conn:
        producer = Producer(conn)
        producer.publish({"k": "orders.created"}, exchange="events", routing_key="orders.created")
        producer.publish({"k": "stock.low"}, exchange="events", routing_key="stock.low")
        producer.publish({"k": "fan"}, exchange="broadcast", routing_key="anything")
    got = sorted(json.loads(peer.next_line())["k"] for _ in range(4))
    assert got == ["fan", "orders.created", "orders.created", "stock.low"]


def test_bindings_are_shared_between_connections_and_removed_by_unbind_and_delete(pgsql_url):
    exchange = Exchange("shared-ex", "direct")
    with Connection(pgsql_url) as declaring, Connection(pgsql_url) as publishing:
        queue = Queue("shared-q", exchange, routing_key="k")(declaring.default_channel)
        queue.declare()
        producer = Producer(publishing)
        producer.publish("hello", exchange="shared-ex", routing_key="k", mandatory=True)
        assert queue.get(no_ack=True).payload == "hello"
        queue.unbind_from(exchange, routing_key="k")
        with pytest.raises(ChannelError, match="NO_ROUTE"):
            producer.publish("lost", exchange="shared-ex", routing_key="k", mandatory=True)
        queue.bind_to(exchange, routing_key="k")
        producer.publish("again", exchange="shared-ex", routing_key="k", mandatory=True)
        queue.delete()
        with pytest.raises(ChannelError, match="NO_ROUTE"):
            producer.publish("gone", exchange="shared-ex", routing_key="k", mandatory=True)


def test_mandatory_publish_without_a_route_raises_no_route(pgsql_url, db_url):
    with Connection(pgsql_url) as conn:
        Exchange("nobody-home", "topic")(conn.default_channel).declare()
        with pytest.raises(ChannelError, match="NO_ROUTE"):
            Producer(conn).publish("x", exchange="nobody-home", routing_key="a.b", mandatory=True)
        Producer(conn).publish("x", exchange="nobody-home", routing_key="a.b")  # dropped quietly
    assert rows(db_url, "SELECT count(*) FROM mq_message") == [(0,)]


def test_expired_messages_are_never_delivered(pgsql_url, db_url):
    queue = Queue("short-lived", Exchange("short", "direct"), routing_key="s")
    received = []
    with Connection(pgsql_url) as conn:
        queue(conn.default_channel).declare()
        Producer(conn).publish("stale", exchange="short", routing_key="s", expiration=0.01)
        Producer(conn).publish("fresh", exchange="short", routing_key="s")
        wait_for(lambda: rows(db_url, "SELECT count(*) FROM mq_message WHERE expires_at < now()")
                 == [(1,)], timeout=10)
        with Consumer(conn, [queue], callbacks=[lambda b, m: (received.append(b), m.ack())]):
            drain_until(conn, received, 1)
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)
    assert received == ["fresh"]


def test_prefetch_limits_unacked_deliveries(pgsql_url, db_url):
    queue = Queue("prefetched", Exchange("pf", "direct"), routing_key="p")
    received = []
    with Connection(pgsql_url) as conn:
        queue(conn.default_channel).declare()
        for n in range(5):
            Producer(conn).publish(n, exchange="pf", routing_key="p")
        with Consumer(conn, [queue], callbacks=[lambda b, m: received.append(m)]) as consumer:
            consumer.qos(prefetch_count=2)
            drain_until(conn, received, 2)
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)
            assert len(received) == 2
            assert rows(db_url, "SELECT count(*) FROM mq_message WHERE lease_pid IS NOT NULL") == [(2,)]
            received[0].ack()
            drain_until(conn, received, 3)
            assert [m.payload for m in received] == [0, 1, 2]


def test_exclusive_and_auto_delete_queues_go_away_with_their_consumer(pgsql_url, db_url):
    with Connection(pgsql_url) as conn:
        reply = Queue("reply-q", Exchange("replies", "direct"), routing_key="r",
                      exclusive=True, auto_delete=True, queue_arguments={"x-expires": 1000})
        with Consumer(conn, [reply], callbacks=[]):
            assert rows(db_url, "SELECT exclusive, auto_delete, expires_ms FROM mq_queue"
                                " WHERE name = 'reply-q'") == [(True, True, 1000)]
    assert rows(db_url, "SELECT count(*) FROM mq_queue WHERE name = 'reply-q'") == [(0,)]
    assert rows(db_url, "SELECT count(*) FROM mq_binding WHERE queue = 'reply-q'") == [(0,)]


def test_a_message_held_by_a_killed_consumer_is_redelivered(pgsql_url, db_url, kombu_peer):
    spec = [["work", "direct", "work", "w"]]
    holder = kombu_peer(pgsql_url, "hold", spec)
    with Connection(pgsql_url, transport_options=FAST_SWEEP) as conn:
        Producer(conn).publish({"job": 7}, exchange="work", routing_key="w")
        assert json.loads(holder.next_line()) == {"job": 7}
        holder.kill()  # SIGKILL while the message is unacked
        received = []
        with Consumer(conn, [Queue("work", Exchange("work", "direct"), routing_key="w")],
                      callbacks=[lambda b, m: received.append(m)]):
            drain_until(conn, received, 1, timeout=30)
        assert received[0].payload == {"job": 7}
        assert received[0].delivery_info["redelivered"] is True
        received[0].ack()
    assert rows(db_url, "SELECT count(*) FROM mq_message") == [(0,)]


def test_a_message_that_keeps_killing_consumers_is_dead_lettered(pgsql_url, db_url, kombu_peer):
    spec = [["poison", "direct", "poison", "p"]]
    holder = kombu_peer(pgsql_url, "hold", spec)
    options = dict(FAST_SWEEP, max_deliveries=1)
    with Connection(pgsql_url, transport_options=options) as conn:
        Producer(conn).publish({"poison": True}, exchange="poison", routing_key="p")
        holder.next_line()
        holder.kill()
        received = []
        with Consumer(conn, [Queue("poison", Exchange("poison", "direct"), routing_key="p")],
                      callbacks=[lambda b, m: received.append(m)]):
            wait_for(lambda: _drain_once(conn) or rows(
                db_url, "SELECT queue, delivery_count FROM mq_dead_letter") == [("poison", 1)],
                timeout=30)
        assert received == []
    assert rows(db_url, "SELECT count(*) FROM mq_message") == [(0,)]


def test_a_lost_database_connection_still_closes_channels_cleanly(pgsql_url, db_url):
    """PostgreSQL restarted under a consumer: closing must still detach every
    channel (kombu's Consumer.__exit__ reads channel.connection.client)."""
    lost = Queue("lost", Exchange("lost", "direct"), routing_key="k")
    received = []
    conn = Connection(pgsql_url)
    consumer = Consumer(conn, [lost], callbacks=[lambda b, m: received.append(m)])
    consumer.consume()
    Producer(conn).publish({"n": 1}, exchange=lost.exchange, routing_key="k")
    drain_until(conn, received, 1)
    received[0].ack()  # recorded; its DELETE rides on the next claim
    channel = consumer.channel
    rows(db_url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                 " WHERE datname = current_database() AND pid <> pg_backend_pid()")

    conn.close()

    assert channel.closed and channel.connection is None
    consumer.__exit__(None, None, None)  # what kombu's ConsumerMixin runs next: no AttributeError


def delivered_once(conn, queue, payload):
    """A consumer of ``queue`` on ``conn``, and ``payload`` published to it and
    delivered (not acked)."""
    received = []
    consumer = Consumer(conn, [queue], callbacks=[lambda b, m: received.append(m)])
    consumer.consume()
    Producer(conn).publish(payload, exchange=queue.exchange, routing_key="k")
    drain_until(conn, received, 1)
    return consumer, received[0]


def delivered_again(pgsql_url, queue):
    """The next message of ``queue``, to a new connection's consumer (acked)."""
    again = []
    with Connection(pgsql_url, transport_options=FAST_SWEEP) as conn, \
            Consumer(conn, [queue], callbacks=[lambda b, m: again.append(m)]):
        drain_until(conn, again, 1)
        again[0].ack()
    return again[0]


def test_a_requeue_on_a_lost_session_does_not_raise_and_the_message_comes_again(pgsql_url, db_url):
    """A handler failed because the database went away, and its consumer requeues
    the message on the dead session (nameko does so, and dies of an exception):
    nothing raises, and the sweep hands the message out again (issue 40)."""
    lost = Queue("requeued", Exchange("requeued", "direct"), routing_key="k")
    with Connection(pgsql_url, transport_options=FAST_SWEEP) as conn:
        consumer, message = delivered_once(conn, lost, {"n": 1})
        rows(db_url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        message.requeue()  # on a session that is gone: no exception
        consumer.__exit__(None, None, None)
    again = delivered_again(pgsql_url, lost)
    assert again.payload == {"n": 1} and again.delivery_info.get("redelivered")


def test_unacked_messages_restored_on_a_lost_session_do_not_raise_and_come_again(pgsql_url, db_url):
    """kombu restores a channel's unacked messages when it closes, and once more from
    a finalizer at the interpreter's exit: on a session already gone, nothing raises
    (it printed a traceback at every exit), and the sweep hands the message out again."""
    held = Queue("held", Exchange("held", "direct"), routing_key="k")
    with Connection(pgsql_url, transport_options=FAST_SWEEP) as conn:
        consumer, _never_acked = delivered_once(conn, held, {"n": 2})
        channel = consumer.channel
        channel._conn.close()  # the session is gone (a server restart, the interpreter's exit)
        assert channel.qos.restore_unacked() == []
        assert not channel.qos._delivered
    assert delivered_again(pgsql_url, held).payload == {"n": 2}


def test_topic_keys_without_wildcards_match_exactly_beside_many_bindings(pgsql_url):
    # More bindings than PostgreSQL caches compiled regular expressions (32): plain
    # keys match by equality, wildcard keys by pattern, each exactly as AMQP says.
    exchange = Exchange("many-keys", "topic")
    plain = [Queue(f"plain-{n}", exchange, routing_key=f"reply.{n}") for n in range(40)]
    star = Queue("star", exchange, routing_key="reply.*")
    dotted = Queue("dotted", exchange, routing_key="reply.1.#")
    got = {}
    with Connection(pgsql_url) as conn:
        channel = conn.channel()
        for queue in [*plain, star, dotted]:
            queue(channel).declare()
        producer = Producer(channel)
        for key in ("reply.7", "reply.1", "reply.1.x", "reply"):
            producer.publish({"k": key}, exchange="many-keys", routing_key=key)
        for queue in [*plain, star, dotted]:
            while (message := queue(channel).get(no_ack=True)) is not None:
                got.setdefault(queue.name, []).append(message.payload["k"])
    assert got == {"plain-7": ["reply.7"], "plain-1": ["reply.1"],
                   "star": ["reply.7", "reply.1"], "dotted": ["reply.1", "reply.1.x"]}
