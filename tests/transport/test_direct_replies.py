"""The pgsql:// fast path: direct replies over NOTIFY, with the table as the
fallback, and one listening connection per process."""

import threading
import time
import uuid

import psycopg2
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.exceptions import ChannelError

from shared.transport.pgsql.channel import NOTIFY_PAYLOAD_MAX
from tests.support.waiting import wait_for
from tests.transport.test_kombu_conformance import rows

SLOW_SWEEP = {"polling_interval": 60}  # nothing in these tests may wait for a sweep


def reply_queue(name=None, expires_ms=300_000):
    """A private queue as nameko declares its reply queues (x-expires)."""
    name = name or f"rpc.reply-test-{uuid.uuid4().hex[:8]}"
    return Queue(name, Exchange("nameko-rpc", "topic"), routing_key=name,
                 queue_arguments={"x-expires": expires_ms})


def drain_until(conn, received, count, timeout=10):
    def step():
        try:
            conn.drain_events(timeout=0.2)
        except TimeoutError:
            pass
        return len(received) >= count

    wait_for(step, timeout=timeout)


def publish_reply(url, queue, body, correlation_id="c-1"):
    with Connection(url) as conn:
        Producer(conn).publish(body, exchange="nameko-rpc", routing_key=queue.routing_key,
                               correlation_id=correlation_id, delivery_mode=2)


def test_a_small_reply_goes_direct_and_a_large_one_through_the_table(pgsql_url, db_url):
    queue = reply_queue()
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        with Consumer(conn, [queue], callbacks=[lambda b, m: received.append(m)]):
            publish_reply(pgsql_url, queue, {"result": "small"})
            drain_until(conn, received, 1)
            direct = received[0]
            assert direct.payload == {"result": "small"}
            assert direct.properties["correlation_id"] == "c-1"
            assert direct.row_id is None  # a NOTIFY payload: no row was written
            direct.ack()  # settling a direct reply changes nothing

            large = "x" * (NOTIFY_PAYLOAD_MAX + 100)  # beyond what a NOTIFY may carry
            publish_reply(pgsql_url, queue, {"result": large}, correlation_id="c-2")
            drain_until(conn, received, 2)
            table = received[1]
            assert table.payload == {"result": large}
            assert table.properties["correlation_id"] == "c-2"
            assert table.row_id is not None
            table.ack()
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.2)  # the ack's DELETE runs before the loop sleeps
    assert rows(db_url, "SELECT count(*) FROM mq_message WHERE queue = %s", queue.name) == [(0,)]


def test_a_request_is_never_sent_direct(pgsql_url, db_url):
    # A message that asks for a reply is a request: it keeps the table's at-least-once
    # delivery even on a private queue.
    queue = reply_queue()
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        with Consumer(conn, [queue], callbacks=[lambda b, m: received.append(m)]):
            with Connection(pgsql_url) as other:
                Producer(other).publish("ask", exchange="nameko-rpc", routing_key=queue.name,
                                        correlation_id="c-1", reply_to="somewhere")
            drain_until(conn, received, 1)
            assert received[0].row_id is not None
            received[0].ack()


def test_a_reply_to_a_client_that_died_is_dropped_with_its_queue(pgsql_url, db_url, kombu_peer):
    queue = reply_queue(expires_ms=300)
    peer = kombu_peer(pgsql_url, "consume",
                      [["nameko-rpc", "topic", queue.name, queue.name, {"x-expires": 300}]])
    publish_reply(pgsql_url, queue, "to a live client")
    assert peer.next_line() == '"to a live client"'
    assert rows(db_url, "SELECT count(*) FROM mq_message WHERE queue = %s", queue.name) == [(0,)]

    peer.kill()
    # Its listening backend is gone: the reply is not sent into the void but kept
    # in the table, and it goes with the queue when the queue expires.
    publish_reply(pgsql_url, queue, "to a dead client", correlation_id="c-2")
    assert rows(db_url, "SELECT count(*) FROM mq_message WHERE queue = %s", queue.name) == [(1,)]
    with Connection(pgsql_url, transport_options={"polling_interval": 0.2}) as conn:
        # Any consuming process sweeps: dead consumers, then the idle queue.
        with Consumer(conn, [reply_queue()], callbacks=[]):
            def gone():
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
                return rows(db_url, "SELECT count(*) FROM mq_queue WHERE name = %s",
                            queue.name) == [(0,)]

            wait_for(gone, timeout=15)
    assert rows(db_url, "SELECT count(*) FROM mq_message WHERE queue = %s", queue.name) == [(0,)]


def kombu_backends(db_url):
    # This test's database only: on a server shared by the suite's shards
    # (LINECTL_TEST_DATABASE_URL) the others' transports are counted too.
    return rows(db_url, "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'kombu-pgsql' AND datname = current_database()")[0][0]


def test_one_listening_connection_serves_every_connection_of_a_process(pgsql_url, db_url):
    connections = [Connection(pgsql_url, transport_options=SLOW_SWEEP) for _ in range(5)]
    queues = [reply_queue() for _ in connections]
    received = {q.name: [] for q in queues}
    consumers = []
    try:
        for conn, queue in zip(connections, queues, strict=True):
            consumer = Consumer(conn, [queue], callbacks=[
                lambda b, m, name=queue.name: received[name].append(m)])
            consumer.consume()
            consumers.append(consumer)
        # A channel connection each, and one listener for all of them.
        assert kombu_backends(db_url) == len(connections) + 1
        for n, queue in enumerate(queues):
            publish_reply(pgsql_url, queue, n, correlation_id=f"c-{n}")
        for conn, queue in zip(connections, queues, strict=True):
            drain_until(conn, received[queue.name], 1)
        assert {name: [m.payload for m in got] for name, got in received.items()} \
            == {q.name: [n] for n, q in enumerate(queues)}
    finally:
        for consumer in consumers:
            consumer.cancel()
        for conn in connections:
            conn.release()
    # The last one out closes the listener.
    wait_for(lambda: kombu_backends(db_url) == 0, timeout=10)


def test_a_lost_listening_connection_is_replaced_without_waiting_for_the_sweep(pgsql_url, db_url):
    work = Queue(f"work-{uuid.uuid4().hex[:6]}", Exchange("work", "direct"), routing_key="w")
    replies = reply_queue()
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        with Consumer(conn, [work, replies], callbacks=[lambda b, m: (received.append(m), m.ack())]):
            admin = psycopg2.connect(db_url)
            admin.autocommit = True
            try:
                with admin.cursor() as cur:
                    # The listener is the kombu backend that is not the channel's.
                    cur.execute("SELECT pid FROM pg_stat_activity"
                                " WHERE application_name = 'kombu-pgsql' AND datname = current_database()"
                                " AND pid <> ALL(%s)",
                                ([channel._backend[0] for channel in conn.transport.channels],))
                    (listener_pid,), = cur.fetchall()
                    cur.execute("SELECT pg_terminate_backend(%s)", (listener_pid,))
                # A new listener LISTENs again and takes over the direct registration (the
                # terminated backend stays in pg_stat_activity until it has exited: not it).
                wait_for(lambda: rows(db_url, "SELECT count(*) FROM mq_consumer c"
                                      " JOIN pg_stat_activity a ON a.pid = c.listener_pid"
                                      " WHERE c.queue = %s AND c.listener_pid <> %s",
                                      replies.name, listener_pid) == [(1,)], timeout=10)
            finally:
                admin.close()
            with Connection(pgsql_url) as other:
                Producer(other).publish("job", exchange="work", routing_key="w")
            drain_until(conn, received, 1, timeout=5)  # a wake-up, long before the 60 s sweep
            publish_reply(pgsql_url, replies, "answer")
            drain_until(conn, received, 2, timeout=5)
            assert [m.payload for m in received] == ["job", "answer"]
            assert received[1].row_id is None  # direct again


def test_a_wake_is_never_lost_between_two_waits(pgsql_url):
    # The listener wakes a transport from its own thread, at any moment: a wake
    # given while the transport was not waiting ends its next wait at once, and a
    # wait that ended clears it (a pipe and a flag once fell out of step here, and
    # every later wake was lost).
    transport = Connection(pgsql_url).transport
    transport._wake()
    started = time.monotonic()
    transport._wait(30)
    assert time.monotonic() - started < 10  # at once, not after the 30 s timeout
    assert not transport._wakeup.is_set()
    waker = threading.Timer(0.05, transport._wake)  # from another thread, mid-wait
    waker.start()
    started = time.monotonic()
    transport._wait(30)
    waker.join()
    assert time.monotonic() - started < 10


def test_a_release_said_twice_does_not_stop_the_listener_under_another_connection(pgsql_url):
    first = reply_queue()
    second = Queue(f"work-{uuid.uuid4().hex[:6]}", Exchange("work", "direct"), routing_key="w")
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as one, \
            Connection(pgsql_url, transport_options=SLOW_SWEEP) as two:
        with Consumer(one, [first], callbacks=[]), \
                Consumer(two, [second], callbacks=[lambda b, m: (received.append(b), m.ack())]):
            listener = two.transport._listener
            assert one.transport._listener is listener
            listener.release(one.transport)
            listener.release(one.transport)  # e.g. a close racing a reconnect
            with Connection(pgsql_url) as other:
                Producer(other).publish("still woken", exchange="work", routing_key="w")
            drain_until(two, received, 1, timeout=5)  # by its listener, not the 60 s sweep
            assert received == ["still woken"]


def test_the_urls_own_session_options_are_kept_beside_the_transports(pgsql_url):
    url = pgsql_url + ("&" if "?" in pgsql_url else "?") + "options=-c%20statement_timeout%3D12345"
    with Connection(url) as conn:
        channel = conn.default_channel
        assert channel._query("SHOW statement_timeout") == [("12345ms",)]
        assert channel._query("SHOW synchronous_commit") == [("off",)]
        assert channel._query("SHOW plan_cache_mode") == [("force_generic_plan",)]


def test_a_durable_message_wakes_its_consumer_after_its_own_commit(pgsql_url, db_url):
    # A persistent message to a durable queue commits its row (with its WAL flush)
    # before the NOTIFY, in a second transaction of the same round trip: the
    # consumer is still woken at once, not by the sweep.
    queue = Queue(f"durable-{uuid.uuid4().hex[:8]}", Exchange("durable-x", "direct"),
                  routing_key="k", durable=True)
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        with Consumer(conn, [queue], callbacks=[lambda b, m: (received.append(b), m.ack())]):
            with Connection(pgsql_url, transport_options=SLOW_SWEEP) as publisher:
                producer = Producer(publisher)
                started = time.monotonic()
                producer.publish({"n": 1}, exchange="durable-x", routing_key="k",
                                 delivery_mode=2, mandatory=True)
                drain_until(conn, received, 1, timeout=5)
                assert time.monotonic() - started < 5
                with pytest.raises(ChannelError, match="NO_ROUTE"):
                    producer.publish({"n": 2}, exchange="durable-x", routing_key="none",
                                     delivery_mode=2, mandatory=True)
    assert received == [{"n": 1}]


def test_a_durable_publish_that_fails_in_its_transaction_leaves_the_channel_usable(pgsql_url):
    queue = Queue(f"durable-{uuid.uuid4().hex[:8]}", Exchange("durable-y", "direct"),
                  routing_key="k", durable=True)
    received = []
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        with Consumer(conn, [queue], callbacks=[lambda b, m: (received.append(b), m.ack())]):
            producer = Producer(conn.channel())
            with pytest.raises(psycopg2.DataError):  # the expiration overflows bigint
                producer.publish({"n": 0}, exchange="durable-y", routing_key="k",
                                 delivery_mode=2, expiration=2 ** 64)
            producer.publish({"n": 1}, exchange="durable-y", routing_key="k", delivery_mode=2)
            drain_until(conn, received, 1, timeout=5)
    assert received == [{"n": 1}]


def test_a_durable_publish_asks_for_its_flush_and_a_transient_one_does_not(pgsql_url):
    # The rows and their wake-up commit together without waiting (a consumer may take
    # the message at once, as with RabbitMQ); only for a durable queue does a second
    # transaction follow that writes a WAL record of its own and commits with
    # synchronous_commit on, so the publish returns only once the rows are flushed too.
    from shared.transport.pgsql.sql import PUBLISH_ROWS, SETTLE

    durable = Queue(f"durable-{uuid.uuid4().hex[:8]}", Exchange("durable-z", "direct"),
                    routing_key="d", durable=True)
    passing = Queue(f"passing-{uuid.uuid4().hex[:8]}", Exchange("durable-z", "direct"),
                    routing_key="p", durable=False)
    with Connection(pgsql_url, transport_options=SLOW_SWEEP) as conn:
        channel = conn.channel()
        for queue in (durable, passing):
            queue(channel).declare()
        payload = '{"body": "{}", "properties": {}}'

        def publish(key, persistent):
            ((routed, must_flush),) = channel._query(PUBLISH_ROWS.call, ("durable-z", key, payload, None, persistent))
            return routed, must_flush

        assert publish("d", True) == (1, True)
        assert publish("p", True) == (1, False)
        assert publish("d", False) == (1, False)  # not persistent
        assert publish("nowhere", True) == (0, False)
        ((commit, flush_record),) = channel._query(SETTLE.call)
        assert commit == "on" and flush_record is not None
        assert channel._query("SHOW synchronous_commit") == [("off",)]  # the session's own, unchanged
