"""``pgsql://`` — a kombu transport on PostgreSQL (psycopg2), for nameko and plain kombu.

URL: an ordinary PostgreSQL URL with the scheme ``pgsql``:
``pgsql://user:pass@host:port/db`` or ``pgsql:///db?host=/socket/dir`` (every libpq
parameter may go in the query string). The tables come from migration 0002
(``mq_exchange``, ``mq_queue``, ``mq_binding``, ``mq_consumer``, ``mq_message``,
``mq_dead_letter``).

What it supports, as AMQP 0-9-1 / pyamqp does it:

* direct, topic and fanout exchanges and the default exchange (``""``). Exchanges,
  queues and bindings live in the database, so every process routes the same way;
  ``queue_unbind`` and ``queue_delete`` remove bindings. Publishing routes in one SQL
  statement that inserts one row per bound queue and ``NOTIFY``s each of them.
* ``mandatory=True``: a message no queue is bound for raises
  :class:`kombu.exceptions.ChannelError` ``NO_ROUTE`` (nameko: ``UnknownService``).
* ``auto_delete`` (dropped when the last consumer cancels or dies), ``exclusive``
  (dropped when the declaring connection closes or dies), ``x-expires`` (dropped after
  that long without consumers) queues; per-message ``expiration``.
* message properties as pyamqp gives them (``content_type``, ``content_encoding``,
  ``correlation_id``, ``reply_to``, ``delivery_mode``, ``priority``, ``expiration``)
  plus ``headers``; ``delivery_info['redelivered']``.
* QoS ``prefetch_count``; ``basic_get``; ``basic_reject`` with and without requeue.
* Push: a consumer ``LISTEN``s on one channel per queue (``mq_`` + md5 of the name;
  the payload is the queue name, never the message) and sleeps in ``select`` until a
  notification, an ack that frees prefetch room, or the slow fallback poll.
* Claiming: ``UPDATE … FOR UPDATE SKIP LOCKED``, so competing consumers never block
  each other or get the same message. A claimed row carries a lease: the PostgreSQL
  backend (pid + start time) of the consuming channel. Ack deletes the row (in the
  same round trip as the channel's next claim, or before its drain loop sleeps;
  ``Channel.close`` flushes); reject
  with requeue clears the lease. If the consumer's connection or process dies, its
  backend ends, and the next sweep (every ``polling_interval``, default 5 s) hands the
  message out again with ``redelivered`` set; a message whose consumers died
  ``max_deliveries`` times (default 5) goes to ``mq_dead_letter`` instead.

Durability: a publish commits with ``synchronous_commit = on`` only when the message
is persistent (``delivery_mode=2``) and at least one target queue is durable and
neither auto-delete, exclusive nor ``x-expires``. Everything else — transient messages,
messages to reply queues (nameko's have ``x-expires``), claims, acks, requeues — commits with
``synchronous_commit = off``: a PostgreSQL crash may lose the last fraction of a
second of those (a lost ack is a redelivery; a lost reply is an RPC timeout), never
corrupts anything, and it saves a WAL flush per statement.

Transport options (``transport_options=`` or nameko ``TRANSPORT_OPTIONS``):
``polling_interval`` (s, fallback poll and sweep period, default 5.0),
``max_deliveries`` (default 5), ``prefetch_batch`` (rows claimed per query when no
prefetch limit is set, default 10), ``durable_publish`` (default True; False commits
every publish with ``synchronous_commit = off``, trading the last fraction of a second
of persistent messages on a PostgreSQL crash for one WAL flush less per message).

Not supported: message priorities (delivery is FIFO per queue), exchange-to-exchange
bindings, headers exchanges, publisher confirms beyond "committed" (every publish is
confirmed when its statement returns).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import threading
from collections import OrderedDict
from time import monotonic

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from kombu.exceptions import ChannelError
from kombu.transport import virtual
from kombu.transport.virtual.base import queue_declare_ok_t

DEFAULT_POLLING_INTERVAL = 5.0
DEFAULT_MAX_DELIVERIES = 5
DEFAULT_PREFETCH_BATCH = 10

TRANSIENT_DELIVERY_MODE = 1


def notify_channel(queue: str) -> str:
    """The LISTEN/NOTIFY channel of a queue: a fixed-length identifier."""
    return "mq_" + hashlib.md5(queue.encode()).hexdigest()


def topic_pattern(binding_key: str) -> str:
    """An AMQP topic binding key as a PostgreSQL regular expression
    (``*`` one word, ``#`` zero or more words)."""
    words = []
    for word in binding_key.split("."):
        if word == "*":
            words.append("[^.]+")
        elif word == "#":
            words.append(".*")
        else:
            words.append(re.sub(r"([^\w])", r"\\\1", word))
    pattern = r"\.".join(words)
    # "a.#" also matches "a": the dot before a trailing/inner # is optional.
    pattern = pattern.replace(r"\..*", r"(\..*)?").replace(r".*\.", r"(.*\.)?")
    return f"^{pattern}$"


def connection_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("pgsql", "postgresql", "postgres"):
        raise ValueError(f"not a pgsql:// URL: {url!r}")
    return "postgresql://" + rest


# Route one message: insert a row per matching queue, notify each, and decide
# synchronous_commit for this statement's transaction (see the module docstring).
PUBLISH_SQL = """
WITH ex AS (SELECT type FROM mq_exchange WHERE name = %(exchange)s),
targets AS (
    SELECT DISTINCT b.queue FROM mq_binding b, ex
    WHERE b.exchange = %(exchange)s
      AND (ex.type = 'fanout'
           OR (ex.type = 'direct' AND b.routing_key = %(routing_key)s)
           OR (ex.type = 'topic' AND %(routing_key)s ~ b.pattern))
    UNION
    SELECT q.name FROM mq_queue q WHERE %(exchange)s = '' AND q.name = %(routing_key)s
),
sent AS (
    INSERT INTO mq_message (queue, payload, expires_at)
    SELECT queue, %(payload)s, now() + %(ttl_ms)s * interval '1 millisecond' FROM targets
    RETURNING queue
),
notified AS (
    SELECT pg_notify('mq_' || md5(queue), queue) FROM (SELECT DISTINCT queue FROM sent) s
)
SELECT (SELECT count(*) FROM notified),
       set_config('synchronous_commit',
                  CASE WHEN %(persistent)s AND bool_or(q.durable AND NOT q.auto_delete
                                                       AND NOT q.exclusive
                                                       AND q.expires_ms IS NULL)
                       THEN 'on' ELSE 'off' END, true)
FROM sent JOIN mq_queue q ON q.name = sent.queue
"""

CLAIM_SQL = """
UPDATE mq_message m
SET lease_pid = %(pid)s, lease_started = %(started)s, delivery_count = m.delivery_count + 1
FROM (SELECT id FROM mq_message
      WHERE queue = ANY(%(queues)s) AND lease_pid IS NULL
        AND (expires_at IS NULL OR expires_at > now())
      ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) c
WHERE m.id = c.id
RETURNING m.id, m.queue, m.payload, m.delivery_count
"""

# Consume without ack: the row is gone as it is handed out.
TAKE_SQL = """
DELETE FROM mq_message m
USING (SELECT id FROM mq_message
       WHERE queue = ANY(%(queues)s) AND lease_pid IS NULL
         AND (expires_at IS NULL OR expires_at > now())
       ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) c
WHERE m.id = c.id
RETURNING m.id, m.queue, m.payload, m.delivery_count + 1
"""

ACK_SQL = "DELETE FROM mq_message WHERE id = ANY(%(acked)s::bigint[]);\n"

RELEASE_SQL = """
WITH freed AS (
    UPDATE mq_message SET lease_pid = NULL, lease_started = NULL
    WHERE id = ANY(%(ids)s) AND lease_pid = %(pid)s RETURNING queue
)
SELECT pg_notify('mq_' || md5(queue), queue) FROM (SELECT DISTINCT queue FROM freed) f
"""

# Liveness of leases, consumers and exclusive queues: a backend is alive when
# pg_stat_activity shows its pid with the same start time (one snapshot per
# transaction; the statements below run as one implicit transaction).
LIVE = "SELECT 1 FROM pg_stat_activity a WHERE a.pid = {pid} AND a.backend_start = {started}"
LIVE_CONSUMER = (
    "SELECT 1 FROM mq_consumer c JOIN pg_stat_activity a"
    " ON a.pid = c.backend_pid AND a.backend_start = c.backend_started WHERE c.queue = q.name"
)
SWEEP_SQL = f"""
WITH orphaned AS (
    SELECT id FROM mq_message m
    WHERE m.lease_pid IS NOT NULL
      AND NOT EXISTS ({LIVE.format(pid="m.lease_pid", started="m.lease_started")})
    FOR UPDATE SKIP LOCKED
),
dead AS (
    DELETE FROM mq_message m USING orphaned o
    WHERE m.id = o.id AND m.delivery_count >= %(max_deliveries)s
    RETURNING m.id, m.queue, m.payload, m.delivery_count
),
buried AS (
    INSERT INTO mq_dead_letter (id, queue, payload, delivery_count)
    SELECT id, queue, payload, delivery_count FROM dead ON CONFLICT (id) DO NOTHING
),
freed AS (
    UPDATE mq_message m SET lease_pid = NULL, lease_started = NULL FROM orphaned o
    WHERE m.id = o.id AND m.delivery_count < %(max_deliveries)s
    RETURNING m.queue
)
SELECT count(pg_notify('mq_' || md5(queue), queue)::text)
FROM (SELECT DISTINCT queue FROM freed) f;
-- auto_delete: consumed once (idle_since NULL), no live consumer left
DELETE FROM mq_queue q
WHERE q.auto_delete AND q.idle_since IS NULL AND NOT EXISTS ({LIVE_CONSUMER});
UPDATE mq_queue q SET idle_since = now()
WHERE q.idle_since IS NULL AND NOT EXISTS ({LIVE_CONSUMER});
DELETE FROM mq_consumer c
WHERE NOT EXISTS ({LIVE.format(pid="c.backend_pid", started="c.backend_started")});
DELETE FROM mq_queue q
WHERE (q.exclusive AND NOT EXISTS ({LIVE.format(pid="q.owner_pid", started="q.owner_started")}))
   OR (q.expires_ms IS NOT NULL AND q.idle_since + q.expires_ms * interval '1 millisecond' < now()
       AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name));
DELETE FROM mq_message WHERE expires_at < now() AND lease_pid IS NULL;
"""

CANCEL_SQL = """
DELETE FROM mq_consumer WHERE queue = %(queue)s AND backend_pid = %(pid)s AND tag = %(tag)s;
DELETE FROM mq_queue q WHERE name = %(queue)s AND auto_delete
    AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name);
UPDATE mq_queue q SET idle_since = now() WHERE name = %(queue)s
    AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name);
"""


class Message(virtual.Message):
    """A delivered message, with its properties shaped as pyamqp's."""

    def __init__(self, payload, channel=None, **kwargs):
        super().__init__(payload, channel=channel, **kwargs)
        self.row_id = payload.get("row_id")
        props = self.properties
        props["content_type"] = self.content_type
        props["content_encoding"] = self.content_encoding
        props["application_headers"] = self.headers


class QoS(virtual.QoS):
    """Prefetch bookkeeping; ack deletes the row, requeue clears its lease."""

    def ack(self, delivery_tag):
        message = self._delivered.get(delivery_tag)
        if message is not None and delivery_tag not in self._dirty:
            self.channel._ack_later(message.row_id)
        super().ack(delivery_tag)
        self.channel._room_made()

    def reject(self, delivery_tag, requeue=False):
        message = self._delivered.get(delivery_tag)
        if message is not None and delivery_tag not in self._dirty:
            if requeue:
                self.channel._release_rows([message.row_id])
            else:
                self.channel._delete_rows([message.row_id])
        self._quick_ack(delivery_tag)
        self.channel._room_made()

    def restore_unacked(self):
        self._flush()
        ids = [message.row_id for message in self._delivered.values()]
        self._delivered.clear()
        if ids:
            self.channel._release_rows(ids)
        return []


class Channel(virtual.Channel):
    """One psycopg2 connection per channel; its backend is the lease owner of
    the messages this channel claims."""

    Message = Message
    QoS = QoS
    body_encoding = "base64"

    def __init__(self, connection, **kwargs):
        self._conn = None
        super().__init__(connection, **kwargs)
        self._lock = threading.RLock()
        self._no_ack_queues = set()
        # Acked rows not yet deleted: the DELETE rides on the next claim, or runs
        # before the drain loop sleeps, so it is off the path of the next message.
        # Until then the row stays leased to this live backend; if the process
        # dies first, the message is redelivered (at-least-once).
        self._acked = []
        self._conn = connection.connect_db()
        (self._backend,) = self._query(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )

    # -- SQL ------------------------------------------------------------------

    def _query(self, sql, params=None):
        with self._lock:
            with self._conn.cursor() as cur:
                try:
                    cur.execute(sql, params)
                except (psycopg2.errors.ForeignKeyViolation,
                        psycopg2.errors.NotNullViolation) as exc:
                    raise ChannelError(f"NOT_FOUND - {exc.diag.message_detail}") from exc
                return cur.fetchall() if cur.description else None

    @property
    def _lease(self):
        pid, started = self._backend
        return {"pid": pid, "started": started}

    # -- exchanges, queues, bindings --------------------------------------------

    def exchange_declare(self, exchange=None, type="direct", durable=False,
                         auto_delete=False, arguments=None, nowait=False, passive=False):
        type = type or "direct"
        exchange = exchange or f"amq.{type}"
        if passive:
            if not self._query("SELECT 1 FROM mq_exchange WHERE name = %s", (exchange,)):
                raise ChannelError(f"NOT_FOUND - no exchange {exchange!r}")
            return
        if type not in ("direct", "topic", "fanout"):
            raise ChannelError(f"COMMAND_INVALID - exchange type {type!r} is not supported")
        self._query(
            "INSERT INTO mq_exchange (name, type, durable, auto_delete)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
            (exchange, type, bool(durable), bool(auto_delete)),
        )

    def exchange_delete(self, exchange, if_unused=False, nowait=False):
        self._query("DELETE FROM mq_exchange WHERE name = %s", (exchange,))

    def queue_declare(self, queue=None, passive=False, durable=True, exclusive=False,
                      auto_delete=False, arguments=None, nowait=False, **kwargs):
        queue = queue or f"amq.gen-{virtual.base.uuid()}"
        if passive:
            # Live consumers only, as RabbitMQ counts them: a consumer whose process
            # died (its backend is gone) no longer counts, before any sweep.
            rows = self._query(
                "SELECT (SELECT count(*) FROM mq_message WHERE queue = q.name),"
                f" (SELECT count(*) FROM ({LIVE_CONSUMER}) live)"
                " FROM mq_queue q WHERE name = %s", (queue,))
            if not rows:
                raise ChannelError(f"NOT_FOUND - no queue {queue!r}")
            return queue_declare_ok_t(queue, *rows[0])
        expires = (arguments or {}).get("x-expires")
        pid, started = self._backend if exclusive else (None, None)
        (messages, consumers), = self._query(
            "INSERT INTO mq_queue AS q (name, durable, auto_delete, exclusive, expires_ms,"
            " owner_pid, owner_started, idle_since)"
            " VALUES (%(name)s, %(durable)s, %(auto_delete)s, %(exclusive)s, %(expires)s,"
            " %(pid)s, %(started)s, now())"
            # redeclaring restarts an idle queue's x-expires clock
            " ON CONFLICT (name) DO UPDATE SET idle_since ="
            " CASE WHEN q.idle_since IS NULL THEN NULL ELSE now() END"
            " RETURNING (SELECT count(*) FROM mq_message WHERE queue = %(name)s),"
            " (SELECT count(*) FROM mq_consumer WHERE queue = %(name)s)",
            {"name": queue, "durable": bool(durable), "auto_delete": bool(auto_delete),
             "exclusive": bool(exclusive), "expires": int(expires) if expires else None,
             "pid": pid, "started": started},
        )
        return queue_declare_ok_t(queue, messages, consumers)

    def queue_delete(self, queue, if_unused=False, if_empty=False, **kwargs):
        rows = self._query(
            "WITH gone AS (DELETE FROM mq_queue q WHERE name = %(name)s"
            " AND (NOT %(if_empty)s OR NOT EXISTS (SELECT 1 FROM mq_message WHERE queue = q.name))"
            " AND (NOT %(if_unused)s OR NOT EXISTS (SELECT 1 FROM mq_consumer WHERE queue = q.name))"
            " RETURNING name)"
            " SELECT count(*) FROM mq_message WHERE queue IN (SELECT name FROM gone)",
            {"name": queue, "if_empty": bool(if_empty), "if_unused": bool(if_unused)},
        )
        return rows[0][0]

    def queue_bind(self, queue, exchange=None, routing_key="", arguments=None, **kwargs):
        if not exchange:
            return  # the default exchange routes to every queue by name
        rows = self._query(
            "INSERT INTO mq_binding (exchange, queue, routing_key, pattern)"
            " SELECT name, %(queue)s, %(key)s, CASE WHEN type = 'topic' THEN %(pattern)s END"
            " FROM mq_exchange WHERE name = %(exchange)s"
            " ON CONFLICT DO NOTHING RETURNING 1",
            {"exchange": exchange, "queue": queue, "key": routing_key or "",
             "pattern": topic_pattern(routing_key or "")},
        )
        if not rows and not self._query("SELECT 1 FROM mq_exchange WHERE name = %s", (exchange,)):
            raise ChannelError(f"NOT_FOUND - no exchange {exchange!r}")

    def queue_unbind(self, queue, exchange=None, routing_key="", arguments=None, **kwargs):
        self._query(
            "DELETE FROM mq_binding WHERE exchange = %s AND queue = %s AND routing_key = %s",
            (exchange or "", queue, routing_key or ""),
        )

    def list_bindings(self):
        return self._query("SELECT queue, exchange, routing_key FROM mq_binding")

    def queue_purge(self, queue, **kwargs):
        rows = self._query(
            "WITH gone AS (DELETE FROM mq_message WHERE queue = %s AND lease_pid IS NULL"
            " RETURNING 1) SELECT count(*) FROM gone", (queue,))
        return rows[0][0]

    def _size(self, queue):
        return self._query("SELECT count(*) FROM mq_message WHERE queue = %s", (queue,))[0][0]

    def _has_queue(self, queue, **kwargs):
        return bool(self._query("SELECT 1 FROM mq_queue WHERE name = %s", (queue,)))

    # -- publishing -------------------------------------------------------------

    def basic_publish(self, message, exchange, routing_key, mandatory=False, **kwargs):
        self._inplace_augment_message(message, exchange, routing_key)
        props = message["properties"]
        expiration = props.get("expiration")
        ((routed, _),) = self._query(PUBLISH_SQL, {
            "exchange": exchange or "",
            "routing_key": routing_key or "",
            "payload": json.dumps(message),
            "ttl_ms": int(expiration) if expiration is not None else None,
            "persistent": props.get("delivery_mode") == 2 and self.connection.durable_publish,
        })
        if not routed and mandatory:
            raise ChannelError(
                f"Basic.return: (312) NO_ROUTE - no queue bound to exchange {exchange!r}"
                f" for routing key {routing_key!r}")

    # -- consuming ---------------------------------------------------------------

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        params = dict(self._lease, queue=queue, tag=str(consumer_tag))
        self._query(
            "INSERT INTO mq_consumer (queue, backend_pid, tag, backend_started)"
            " VALUES (%(queue)s, %(pid)s, %(tag)s, %(started)s) ON CONFLICT DO NOTHING;"
            "UPDATE mq_queue SET idle_since = NULL WHERE name = %(queue)s", params)
        super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        if no_ack:
            self._no_ack_queues.add(queue)
        self.connection._listen(queue)

    def basic_cancel(self, consumer_tag):
        queue = self._tag_to_queue.get(consumer_tag)
        super().basic_cancel(consumer_tag)
        if queue is None:
            return
        if queue not in self._active_queues:
            self._no_ack_queues.discard(queue)
            self.connection._unlisten(queue)
        self._query(CANCEL_SQL, dict(self._lease, queue=queue, tag=str(consumer_tag)))

    def basic_get(self, queue, no_ack=False, **kwargs):
        rows = self._claim([queue], 1, take=no_ack)
        if not rows:
            return None
        message = self.Message(self._raw(*rows[0]), channel=self)
        if not no_ack:
            self.qos.append(message, message.delivery_tag)
        return message

    def _claim(self, queues, limit, take=False):
        with self._lock:
            acked, self._acked = self._acked, []
            return self._query(ACK_SQL + (TAKE_SQL if take else CLAIM_SQL),
                               dict(self._lease, queues=list(queues), limit=limit,
                                    acked=acked))

    def _raw(self, row_id, queue, payload, delivery_count):
        raw = json.loads(payload)
        raw["row_id"] = row_id
        props = raw["properties"]
        props["delivery_tag"] = self._next_delivery_tag()
        props["delivery_info"]["redelivered"] = delivery_count > 1
        return raw

    def claim_ready(self, dirty, batch):
        """Claim what this channel may take from its dirty queues:
        ``[(queue, raw_message)]``; queues that may hold more stay in ``dirty``."""
        queues = set(self._active_queues) & dirty
        if not queues:
            return []
        limit = self.qos.can_consume_max_estimate()
        limit = batch if limit is None else limit
        if not limit:
            return []  # prefetch window full: stays dirty until an ack makes room
        dirty.difference_update(queues)
        rows = []
        for take in (False, True):
            group = [q for q in queues if (q in self._no_ack_queues) == take]
            if group:
                claimed = self._claim(group, limit, take=take)
                if len(claimed) >= limit:
                    dirty.update(group)
                rows.extend(claimed)
        rows.sort()
        return [(row[1], self._raw(*row)) for row in rows]

    # -- settling ----------------------------------------------------------------

    def _ack_later(self, row_id):
        with self._lock:
            self._acked.append(row_id)

    def flush_acks(self):
        with self._lock:
            acked, self._acked = self._acked, []
            if acked:
                self._delete_rows(acked)

    def _delete_rows(self, ids):
        self._query("DELETE FROM mq_message WHERE id = ANY(%s)", (ids,))

    def _release_rows(self, ids):
        self._query(RELEASE_SQL, dict(self._lease, ids=ids))

    def _room_made(self):
        if self.qos.prefetch_count and self.connection is not None:
            self.connection._wake()

    def _restore(self, message):
        self._release_rows([message.row_id])

    def sweep(self, max_deliveries):
        self._query(SWEEP_SQL, {"max_deliveries": max_deliveries})

    def close(self):
        if self.closed or self._conn is None:
            return super().close()
        try:
            self.flush_acks()
            super().close()  # cancels consumers, requeues unacked messages
            self._query("DELETE FROM mq_queue WHERE exclusive AND owner_pid = %(pid)s"
                        " AND owner_started = %(started)s", self._lease)
        except psycopg2.Error:
            # The connection is gone (the sweep of another process cleans up). Still
            # end as closed and detached from the transport, as kombu expects: a
            # consumer's __exit__ must not find a channel of a closed connection.
            self.closed = True
            if self.connection is not None:
                self.connection.close_channel(self)
        finally:
            self._conn.close()


class Transport(virtual.Transport):
    """One LISTEN connection per kombu Connection plus one connection per channel."""

    Channel = Channel

    can_parse_url = True
    default_port = 5432
    driver_type = "postgresql"
    driver_name = "psycopg2"
    polling_interval = DEFAULT_POLLING_INTERVAL

    connection_errors = virtual.Transport.connection_errors + (
        psycopg2.OperationalError, psycopg2.InterfaceError)
    channel_errors = virtual.Transport.channel_errors + (psycopg2.DatabaseError,)
    # Only a lost database connection is worth a reconnect and retry; NO_ROUTE,
    # NOT_FOUND and SQL errors are not.
    recoverable_connection_errors = (psycopg2.OperationalError, psycopg2.InterfaceError)
    recoverable_channel_errors = ()

    implements = virtual.Transport.implements.extend(
        exchange_type=frozenset(["direct", "topic", "fanout"]))

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        options = client.transport_options
        self.max_deliveries = int(options.get("max_deliveries", DEFAULT_MAX_DELIVERIES))
        self.prefetch_batch = int(options.get("prefetch_batch", DEFAULT_PREFETCH_BATCH))
        self.durable_publish = bool(options.get("durable_publish", True))
        self._dsn = connection_dsn(client.hostname)
        self._listen_conn = None
        self._listening = {}  # notify channel -> queue
        self._pending_listens = OrderedDict()  # queue -> True (LISTEN) / False (UNLISTEN)
        self._dirty = set()
        self._wake_r = self._wake_w = None
        self._wake_pending = False
        self._next_sweep = 0.0

    def driver_version(self):
        return psycopg2.__version__

    def connect_db(self):
        conn = psycopg2.connect(self._dsn, application_name="kombu-pgsql")
        conn.autocommit = True
        with conn.cursor() as cur:
            # Acks, claims and requeues need no WAL flush (see module docstring);
            # server-side keepalives end the backend of a vanished client host
            # within ~10 s, which is what releases its leases.
            cur.execute("SET synchronous_commit TO off; SET tcp_keepalives_idle TO 5;"
                        " SET tcp_keepalives_interval TO 2; SET tcp_keepalives_count TO 2")
        return conn

    # -- LISTEN bookkeeping (applied by the draining thread only) ----------------

    def _listen(self, queue):
        self._pending_listens[queue] = True
        self._dirty.add(queue)
        self._wake()

    def _unlisten(self, queue):
        self._pending_listens[queue] = False

    def _apply_listens(self):
        if self._listen_conn is None:
            self._listen_conn = self.connect_db()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
        statements = []
        while self._pending_listens:
            queue, listen = self._pending_listens.popitem(last=False)
            channel = notify_channel(queue)
            if listen:
                self._listening[channel] = queue
                statements.append(f"LISTEN {channel}")
            elif self._listening.pop(channel, None) is not None:
                statements.append(f"UNLISTEN {channel}")
        if statements:
            with self._listen_conn.cursor() as cur:
                cur.execute("; ".join(statements))
            self._take_notifies()

    def _take_notifies(self):
        conn = self._listen_conn
        for note in conn.notifies:
            queue = self._listening.get(note.channel)
            if queue is not None:
                self._dirty.add(queue)
        conn.notifies.clear()

    def _wake(self):
        # At most one byte in the pipe: a full pipe would make eventlet's green
        # os.write wait, and two green threads waiting on one fd is an error.
        if self._wake_w is not None and not self._wake_pending:
            self._wake_pending = True
            os.write(self._wake_w, b"!")

    def _wait(self, seconds):
        readable, _, _ = select.select([self._listen_conn, self._wake_r], [], [], seconds)
        if self._wake_r in readable:
            self._wake_pending = False
            # One read: the pipe is readable, and a loop would block a green thread
            # (eventlet's os.read waits for data instead of raising).
            os.read(self._wake_r, 65536)
        if self._listen_conn in readable:
            self._listen_conn.poll()
            self._take_notifies()

    # -- draining ------------------------------------------------------------------

    def drain_events(self, connection, timeout=None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            if self._pending_listens or self._listen_conn is None:
                self._apply_listens()
            if self._deliver_ready():
                return
            now = monotonic()
            if now >= self._next_sweep:
                self._sweep()
                self._next_sweep = now + self.polling_interval
                continue
            if deadline is not None and now >= deadline:
                raise TimeoutError()
            wait = self._next_sweep - now
            if deadline is not None:
                wait = min(wait, deadline - now)
            for channel in self.channels:
                channel.flush_acks()
            self._wait(wait)

    def _deliver_ready(self):
        delivered = False
        for channel in list(self.channels):
            if not channel._active_queues:
                continue
            for queue, raw in channel.claim_ready(self._dirty, self.prefetch_batch):
                callback = self._callbacks.get(queue)
                if callback is None:  # cancelled meanwhile: hand it back
                    channel._release_rows([raw["row_id"]])
                    continue
                callback(raw)
                delivered = True
        return delivered

    def _sweep(self):
        """Fallback poll: hand back messages of dead consumers, drop dead queues,
        and look at every consumed queue once more."""
        for channel in self.channels:
            if channel._active_queues:
                channel.sweep(self.max_deliveries)
                break
        for channel in self.channels:
            self._dirty.update(channel._active_queues)

    def close_connection(self, connection):
        try:
            super().close_connection(connection)
        finally:
            if self._listen_conn is not None:
                self._listen_conn.close()
                self._listen_conn = None
            for fd in (self._wake_r, self._wake_w):
                if fd is not None:
                    os.close(fd)
            self._wake_r = self._wake_w = None


__all__ = ["Transport", "Channel", "Message", "QoS", "notify_channel", "topic_pattern"]
