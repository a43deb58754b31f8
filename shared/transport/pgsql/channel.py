"""A channel of the pgsql:// transport: one psycopg2 connection, whose backend
is the lease owner of the messages the channel claims."""

from __future__ import annotations

import json
import logging
import threading
from time import monotonic

import psycopg2
import psycopg2.errors
from kombu.exceptions import ChannelError
from kombu.transport import virtual
from kombu.transport.virtual.base import queue_declare_ok_t
from psycopg2 import errorcodes
from psycopg2.extensions import TRANSACTION_STATUS_INERROR

from .outbox import OutboxMismatch
from .outbox import current as current_outbox
from .settling import Message, QoS
from .sql import (
    CANCEL_SQL,
    CLAIM,
    DELETE,
    LIVE_CONSUMER,
    PREPARED,
    PUBLISH,
    PUBLISH_ROWS,
    RELEASE,
    SETTLE,
    SWEEP_DUE_SQL,
    SWEEP_SQL,
    TAKE,
    topic_pattern,
)

# A NOTIFY payload must be shorter than 8000 bytes; a larger reply goes through the table.
log = logging.getLogger(__name__)

NOTIFY_PAYLOAD_MAX = 7999
# An acked row is deleted by the channel's next claim, or this long after the ack
# when no claim came first: at a cell's pace most deletes ride on a claim. Until
# then the row stays leased to this live backend; if the process dies meanwhile,
# the message is delivered again (at-least-once, as an ack lost with its connection).
ACK_DELAY_SECONDS = 1.0


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
        self._acked_at = 0.0  # monotonic time of the oldest ack in _acked
        self._conn = connection.connect_db()
        # Prepared once per connection, in the same round trip as the lease lookup
        # and the transport tables' schema (an outbox names it: outbox.py).
        ((pid, started, self._schema),) = self._query(
            "".join(f"{statement.prepare};\n" for statement in PREPARED)
            + "SELECT pid, backend_start, (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid ="
            " c.relnamespace WHERE c.oid = to_regclass('mq_message'))"
            " FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        self._backend = (pid, started)

    # -- SQL ------------------------------------------------------------------

    def _query(self, sql, params=None):
        with self._lock:
            with self._conn.cursor() as cur:
                try:
                    cur.execute(sql, params)
                except psycopg2.Error as exc:
                    self._end_failed_block()
                    if exc.pgcode == errorcodes.READ_ONLY_SQL_TRANSACTION:  # a write on a server turned standby
                        # The server was demoted (a failover): this session is no use any
                        # more. A lost connection to kombu, so it reconnects, and libpq's
                        # target_session_attrs=read-write finds the new primary.
                        self._conn.close()
                        raise psycopg2.OperationalError(
                            f"the database server no longer accepts writes ({exc.pgerror or exc})") from exc
                    if isinstance(exc, (psycopg2.errors.ForeignKeyViolation,
                                        psycopg2.errors.NotNullViolation)):
                        raise ChannelError(f"NOT_FOUND - {exc.diag.message_detail}") from exc
                    raise
                return cur.fetchall() if cur.description else None

    def _end_failed_block(self):
        # A statement that failed inside an explicit block leaves
        # it aborted; the session is autocommit and must be usable for the next one.
        conn = self._conn
        if not conn.closed and conn.get_transaction_status() == TRANSACTION_STATUS_INERROR:
            try:
                with conn.cursor() as cur:
                    cur.execute("ROLLBACK")
            except psycopg2.Error:
                pass

    def ping(self) -> bool:
        """Is this channel's session alive? (one round trip)"""
        try:
            self._query("SELECT 1")
        except psycopg2.Error:
            return False
        return True

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
        payload = json.dumps(message)  # ASCII: its length is its size in bytes
        # A reply (it answers a correlation id and asks for none) may go direct.
        reply = props.get("correlation_id") is not None and not props.get("reply_to")
        direct = self.connection.direct_replies and reply and len(payload) <= NOTIFY_PAYLOAD_MAX
        persistent = props.get("delivery_mode") == 2 and self.connection.durable_publish
        params = (exchange or "", routing_key or "", payload,
                  int(expiration) if expiration is not None else None, persistent)
        outbox = None if reply else current_outbox()
        if outbox is not None:
            # In the caller's transaction: committed (and flushed) with it (outbox.py).
            if not outbox.accepts(self._conn):
                raise OutboxMismatch("a publish in an outbox on another database")
            routed = outbox.insert(self._schema, *params[:4])
        elif persistent and not reply:
            # Rows and wake-ups commit at once; then, for a durable queue, the flush is
            # waited for in a transaction of its own (sql.PUBLISH_ROWS says why).
            ((routed, must_flush),) = self._query(PUBLISH_ROWS.call, params)
            if must_flush:
                self._query(SETTLE.call)
        else:
            ((routed, _),) = self._query(PUBLISH.call, (*params, direct))
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
        self.connection._listen(queue, self, consumer_tag)

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
            pid, started = self._backend
            return self._query((TAKE if take else CLAIM).call,
                               (pid, started, list(queues), limit, acked))

    def _raw(self, row_id, queue, payload, delivery_count):
        """A kombu raw message from a row (or, ``row_id`` None, a direct reply)."""
        raw = json.loads(payload)
        raw["row_id"] = row_id
        props = raw["properties"]
        props["delivery_tag"] = self._next_delivery_tag()
        props["delivery_info"]["redelivered"] = delivery_count > 1
        return raw

    def claim_ready(self, transport, batch):
        """Claim what this channel may take from the transport's dirty queues:
        ``[(queue, raw_message)]``; queues that may hold more stay dirty."""
        limit = self.qos.can_consume_max_estimate()
        limit = batch if limit is None else limit
        if not limit:
            return []  # prefetch window full: stays dirty until an ack makes room
        queues = transport._take_dirty(set(self._active_queues))
        if not queues:
            return []
        rows = []
        for take in (False, True):
            group = [q for q in queues if (q in self._no_ack_queues) == take]
            if group:
                claimed = self._claim(group, limit, take=take)
                if len(claimed) >= limit:
                    transport._mark_dirty(group)
                rows.extend(claimed)
        rows.sort()
        return [(row[1], self._raw(*row)) for row in rows]

    # -- settling ----------------------------------------------------------------

    def _ack_later(self, row_id):
        with self._lock:
            if not self._acked:
                self._acked_at = monotonic()
            self._acked.append(row_id)

    def acks_due(self) -> float | None:
        """When the acks not yet deleted must be (None: there are none)."""
        return self._acked_at + ACK_DELAY_SECONDS if self._acked else None

    def flush_acks(self):
        with self._lock:
            acked, self._acked = self._acked, []
            if acked:
                self._delete_rows(acked)

    def _delete_rows(self, ids):
        self._query(DELETE.call, (ids,))

    def _release_rows(self, ids):
        self._query(RELEASE.call, (self._backend[0], ids))

    def _room_made(self):
        if self.qos.prefetch_count and self.connection is not None:
            self.connection._wake()

    def _restore(self, message):
        if message.row_id is not None:
            self._release_rows([message.row_id])

    def sweep(self, max_deliveries):
        """The plant's look for what the dead left (tells every listener it was done);
        the sweep itself only when something is due."""
        ((_, due),) = self._query(SWEEP_DUE_SQL)
        if due:
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
