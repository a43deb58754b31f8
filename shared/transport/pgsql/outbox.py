"""Publishing in the caller's own transaction (an outbox) on ``pgsql://``.

Inside :func:`publishing_in`, every publish of a pgsql:// channel of this
(green) thread to the same database is written by the caller's connection, in
its open transaction: the rows commit with the caller's state change, or not at
all, and cost no commit of their own (a publish is otherwise one, and a durable
one two: rows, then the flush). The caller's commit is what makes them durable:
it must wait for its flush (``synchronous_commit`` on), as a state change does.

Wake-ups: the rows are inserted without ``NOTIFY``, and :meth:`Outbox.wake`
notifies their queues after the commit, in one statement for all of them,
without waiting for a flush. A ``NOTIFY`` in the caller's transaction would hold
PostgreSQL's one lock for ``NOTIFY``ing commits of the whole cluster through
that commit's flush (``sql.PUBLISH_ROWS`` says why that is avoided). If the
process dies between the commit and the wake-up, the rows wait for the next
wake-up of their queue or the consumer's next look (a sweep), as a lost
notification does.

Direct replies never go this way (a reply answers a waiting caller now), nor do
publishes to another database: :meth:`Outbox.accepts` tells, and a channel that
is asked to publish in an outbox it cannot use refuses (``OutboxMismatch``):
sending it at once, outside the transaction, would publish what may never commit.
"""

from __future__ import annotations

import contextlib
import threading

import psycopg2.extensions
from psycopg2 import sql as pgsql

from .sql import ROUTE

_current = threading.local()  # green-thread-local under eventlet's monkey patching


class OutboxMismatch(RuntimeError):
    """A publish in an outbox whose connection is to another database."""


# The rows of one message, routed as PUBLISH_ROWS routes it, no NOTIFY; answers
# the queues routed to. {schema}: the transport tables' schema (the caller's
# search_path may not include it: a line's loop sees its own schema only).
# Each target queue is locked against deletion (KEY SHARE) until the caller commits,
# and a queue being deleted right now (a sweep of a dead consumer's auto-delete
# queue) is skipped, not waited for: the rows' foreign key would otherwise wait for
# that delete and then fail, aborting the caller's transaction with the state
# change it carries, for a message to a queue that is going anyway.
OUTBOX_SQL = """
WITH {route},
live AS (
    SELECT q.name AS queue FROM {schema}.mq_queue q JOIN targets t ON t.queue = q.name
    FOR KEY SHARE OF q SKIP LOCKED
),
sent AS (
    INSERT INTO {schema}.mq_message (queue, payload, expires_at)
    SELECT queue, %(payload)s, clock_timestamp() + %(ttl)s * interval '1 millisecond' FROM live
    RETURNING queue
)
SELECT coalesce(array_agg(DISTINCT queue), '{{}}') FROM sent
"""


def _route(schema: str) -> str:
    return (ROUTE.replace("$1", "%(exchange)s").replace("$2", "%(key)s")
            .replace("FROM mq_exchange", f"FROM {schema}.mq_exchange")
            .replace("FROM mq_binding", f"FROM {schema}.mq_binding")
            .replace("FROM mq_queue", f"FROM {schema}.mq_queue"))


def _where(conn) -> tuple:
    info = conn.info
    return (info.host, info.port, info.dbname)


class Outbox:
    """The caller's psycopg2 connection, in an open transaction, and the queues
    its publishes reached. ``role``: the role the caller's session runs as when
    that role may not write the transport's rows (a line's loop role): the rows
    are written as the session's login, which may."""

    def __init__(self, dbapi_conn, role: str | None = None):
        self.conn = dbapi_conn
        self.role = role
        self.queues: set[str] = set()
        self.published = 0

    def accepts(self, channel_conn) -> bool:
        """Whether a channel on ``channel_conn`` publishes into this outbox (same database)."""
        return _where(channel_conn) == _where(self.conn)

    def insert(self, schema: str, exchange: str, routing_key: str, payload: str, ttl_ms: int | None) -> int:
        """Write one message's rows; the number of queues it was routed to."""
        ident = pgsql.Identifier(schema).as_string(self.conn)
        statement = OUTBOX_SQL.format(route=_route(ident), schema=ident)
        params = {"exchange": exchange, "key": routing_key, "payload": payload, "ttl": ttl_ms}
        with self.conn.cursor() as cur:
            if self.role:
                cur.execute("SET LOCAL ROLE NONE")
            try:
                cur.execute(statement, params)
                (queues,) = cur.fetchone()
            finally:
                if self.role:
                    cur.execute("RESET ROLE")
        self.queues.update(queues)
        self.published += 1
        return len(queues)

    def wake(self) -> tuple[str, tuple] | None:
        """The statement (and its parameters) that wakes the consumers of every queue
        written to, to run after the commit; None when nothing was routed."""
        if not self.queues:
            return None
        queues = sorted(self.queues)
        calls = ", ".join(["pg_notify('mq_' || md5(%s), %s)"] * len(queues))
        return f"SELECT {calls}", tuple(q for queue in queues for q in (queue, queue))


def same_database(transport_url: str, database_url: str) -> bool:
    """Whether ``transport_url`` is pgsql:// on the database ``database_url`` names
    (host, port and database name as libpq reads them)."""
    def where(url: str):
        scheme, sep, rest = url.partition("://")
        if not sep:
            return None
        dsn = psycopg2.extensions.parse_dsn("postgresql://" + rest)
        return scheme, dsn.get("host"), dsn.get("port") or "5432", dsn.get("dbname")

    transport, database = where(transport_url or ""), where(database_url or "")
    return (transport is not None and database is not None and transport[0] == "pgsql"
            and transport[1:] == database[1:])


def current() -> Outbox | None:
    return getattr(_current, "outbox", None)


@contextlib.contextmanager
def publishing_in(outbox: Outbox):
    """Publishes of this thread go into ``outbox`` until the block ends."""
    previous = current()
    _current.outbox = outbox
    try:
        yield outbox
    finally:
        _current.outbox = previous
