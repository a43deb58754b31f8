"""The SQL of the pgsql:// transport: the statements each hop runs, and the
names of the LISTEN/NOTIFY channels. No Python state here; see ``__init__``
for the semantics the statements implement."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

DEFAULT_POLLING_INTERVAL = 5.0
DEFAULT_MAX_DELIVERIES = 5
DEFAULT_PREFETCH_BATCH = 10



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




@dataclass(frozen=True)
class Prepared:
    """A statement prepared once per connection: no parse or plan on the hot path.

    ``text`` uses ``$n`` parameters; ``call`` is what a channel executes, with
    psycopg2 filling in one ``%s`` per parameter.
    """

    name: str
    types: tuple[str, ...]
    text: str

    @property
    def prepare(self) -> str:
        types = f" ({', '.join(self.types)})" if self.types else ""
        return f"PREPARE {self.name}{types} AS {self.text}"

    @property
    def call(self) -> str:
        params = f" ({', '.join(['%s'] * len(self.types))})" if self.types else ""
        return f"EXECUTE {self.name}{params}"


def direct_channel(queue: str) -> str:
    """The LISTEN/NOTIFY channel of a queue's direct replies (the payload is the message)."""
    return "mqd_" + hashlib.md5(queue.encode()).hexdigest()


# The private queues (exclusive, auto-delete or x-expires: nameko's reply queues)
# whose one consumer takes direct replies on a live listening connection. The
# listener is looked up by pid: the pg_stat_activity view builds a row for every
# backend, which at 120 backends made a reply cost 1 ms of server CPU.
# ``mq_backend_started`` (migration 0010) is ``pg_stat_get_activity(pid)``'s
# ``backend_start`` as the migrating user sees it: PostgreSQL shows another
# login's to no one else, and each line logs in as its own role.
DIRECT_TARGET = """
SELECT 1 FROM mq_queue q
WHERE q.name = t.queue AND (q.exclusive OR q.auto_delete OR q.expires_ms IS NOT NULL)
  AND (SELECT count(*) FROM mq_consumer c WHERE c.queue = q.name) = 1
  AND EXISTS (SELECT 1 FROM mq_consumer c
              WHERE c.queue = q.name AND mq_backend_started(c.listener_pid) = c.listener_started)
"""

# The queues a message is routed to: $1 exchange, $2 routing key. A topic
# binding key without a wildcard matches by equality: only keys with ``*`` or
# ``#`` run their regular expression. PostgreSQL caches 32 compiled regular
# expressions per session; nameko binds each RPC client's reply queue to the
# RPC exchange by its own key, so with more than 32 clients every publish
# compiled a regular expression per binding (most of the server's CPU at 50
# RPC callers).
ROUTE = """
ex AS (SELECT type FROM mq_exchange WHERE name = $1),
targets AS (
    SELECT DISTINCT b.queue FROM mq_binding b, ex
    WHERE b.exchange = $1
      AND (ex.type = 'fanout'
           OR (ex.type = 'direct' AND b.routing_key = $2)
           OR (ex.type = 'topic' AND (b.routing_key = $2
               OR ((strpos(b.routing_key, '*') > 0 OR strpos(b.routing_key, '#') > 0)
                   AND $2 ~ b.pattern))))
    UNION
    SELECT q.name FROM mq_queue q WHERE $1 = '' AND q.name = $2
)"""

# Whether a publish must wait for its WAL flush: only a persistent ($5) message to at
# least one durable queue (see the package docstring); over the target queues q.
# DURABILITY applies it to the publishing transaction itself.
MUST_FLUSH = """CASE WHEN $5 AND bool_or(q.durable AND NOT q.auto_delete AND NOT q.exclusive
                                   AND q.expires_ms IS NULL)
               THEN 'on' ELSE 'off' END"""
DURABILITY = f"set_config('synchronous_commit', {MUST_FLUSH}, true)"

# Route one message: a direct reply goes as the payload of a NOTIFY to the
# consumer's listening connection; to every other target queue a row is
# inserted and a wake-up notified, in the same transaction.
# $1 exchange, $2 routing key, $3 payload, $4 ttl ms, $5 persistent, $6 may go direct.
PUBLISH = Prepared("mq_publish", ("text", "text", "text", "bigint", "boolean", "boolean"), f"""
WITH {ROUTE},
routed AS (
    SELECT t.queue, $6 AND EXISTS ({DIRECT_TARGET}) AS direct FROM targets t
),
sent AS (
    INSERT INTO mq_message (queue, payload, expires_at)
    SELECT queue, $3, now() + $4 * interval '1 millisecond' FROM routed WHERE NOT direct
    RETURNING queue
),
notified AS (
    SELECT pg_notify('mq_' || md5(queue), queue) FROM (SELECT DISTINCT queue FROM sent) s
    UNION ALL
    SELECT pg_notify('mqd_' || md5(queue), $3) FROM routed WHERE direct
)
SELECT (SELECT count(*) FROM notified),
       (SELECT {DURABILITY} FROM sent JOIN mq_queue q ON q.name = sent.queue)
""")

# A persistent message that is no reply (an RPC request, an event) is confirmed
# only once its WAL is flushed, as RabbitMQ confirms a persistent message only
# once it is on disk; and, as with RabbitMQ, a consumer may have it before that.
# Two transactions, and the second only when a target queue is durable:
#   1. PUBLISH_ROWS: the rows and their wake-ups (NOTIFY), committed without waiting
#      for the flush: consumers take the message now; it answers whether to wait;
#   2. SETTLE: a transaction whose commit waits for the WAL to be flushed up to its
#      own commit, and so past the rows'.
# The flush is thus off the path from publisher to consumer, and no NOTIFYing
# commit waits for one: PostgreSQL holds the lock that serialises every NOTIFYing
# commit of the cluster through that commit's flush, so with rows, wake-up and
# flush in one transaction each publisher and each direct reply queued behind
# another's flush and no two flushes could be shared. A crash before the flush
# loses rows a consumer may have taken, and the publisher gets an error, not a
# confirm: a publish that returned is durable. (Rows and wake-ups commit together:
# no wake-up can be lost between them.) Parameters as PUBLISH's first five;
# answers (queues routed to, whether to SETTLE).
PUBLISH_ROWS = Prepared("mq_publish_rows", PUBLISH.types[:5], f"""
WITH {ROUTE},
sent AS (
    INSERT INTO mq_message (queue, payload, expires_at)
    SELECT queue, $3, now() + $4 * interval '1 millisecond' FROM targets
    RETURNING queue
),
notified AS (
    SELECT pg_notify('mq_' || md5(queue), queue) FROM (SELECT DISTINCT queue FROM sent) s
)
SELECT (SELECT count(*) FROM notified),
       coalesce((SELECT {MUST_FLUSH} FROM sent JOIN mq_queue q ON q.name = sent.queue) = 'on', false)
""")

# This transaction writes a WAL record of its own (an empty transactional logical
# message: any role may, at any wal_level) and commits with synchronous_commit on,
# so its commit waits until the WAL is flushed through its own record, and so
# through the rows'. (An xid alone would not do: a commit that wrote no WAL
# before its commit record never waits.)
SETTLE = Prepared("mq_settle", (), """
SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'linectl.mq.flush', '')
""")

# Deletes the rows acked since the last claim in the same statement.
# $1 lease pid, $2 lease backend start, $3 queues, $4 limit, $5 acked row ids.
CLAIM = Prepared("mq_claim", ("integer", "timestamptz", "text[]", "integer", "bigint[]"), """
WITH acked AS (DELETE FROM mq_message WHERE id = ANY($5))
UPDATE mq_message m
SET lease_pid = $1, lease_started = $2, delivery_count = m.delivery_count + 1
FROM (SELECT id FROM mq_message
      WHERE queue = ANY($3) AND lease_pid IS NULL
        AND (expires_at IS NULL OR expires_at > now())
      ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) c
WHERE m.id = c.id
RETURNING m.id, m.queue, m.payload, m.delivery_count
""")

# Consume without ack: the row is gone as it is handed out. Called as CLAIM is
# ($1 and $2, the lease, are unused).
TAKE = Prepared("mq_take", CLAIM.types, """
WITH acked AS (DELETE FROM mq_message WHERE id = ANY($5))
DELETE FROM mq_message m
USING (SELECT id FROM mq_message
       WHERE queue = ANY($3) AND lease_pid IS NULL
         AND (expires_at IS NULL OR expires_at > now())
       ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) c
WHERE m.id = c.id
RETURNING m.id, m.queue, m.payload, m.delivery_count + 1
""")

DELETE = Prepared("mq_delete", ("bigint[]",), "DELETE FROM mq_message WHERE id = ANY($1)")

# $1 lease pid, $2 row ids.
RELEASE = Prepared("mq_release", ("integer", "bigint[]"), """
WITH freed AS (
    UPDATE mq_message SET lease_pid = NULL, lease_started = NULL
    WHERE id = ANY($2) AND lease_pid = $1 RETURNING queue
)
SELECT pg_notify('mq_' || md5(queue), queue) FROM (SELECT DISTINCT queue FROM freed) f
""")

PREPARED = (PUBLISH, PUBLISH_ROWS, SETTLE, CLAIM, TAKE, DELETE, RELEASE)

# Run on the listening connection once it LISTENs: its backend takes these
# consumers' direct replies. %s: queues, channel backend pids, consumer tags.
REGISTER_LISTENER_SQL = """
UPDATE mq_consumer c SET listener_pid = a.pid, listener_started = a.backend_start
FROM pg_stat_activity a, unnest(%s::text[], %s::integer[], %s::text[]) AS r(queue, pid, tag)
WHERE a.pid = pg_backend_pid() AND c.queue = r.queue AND c.backend_pid = r.pid AND c.tag = r.tag
"""

# A new listening connection takes over the direct replies of the one it replaces.
# %s: the old backend's pid and start.
MOVE_LISTENER_SQL = """
UPDATE mq_consumer c SET listener_pid = a.pid, listener_started = a.backend_start
FROM pg_stat_activity a
WHERE a.pid = pg_backend_pid() AND c.listener_pid = %s AND c.listener_started = %s
"""

# Liveness of leases, consumers and exclusive queues: a backend is alive when
# PostgreSQL shows its pid with the same start time (one snapshot per
# transaction; the statements below run as one implicit transaction), whoever
# its login is (``mq_backend_started``, above).
LIVE = "SELECT 1 WHERE mq_backend_started({pid}) = {started}"
LIVE_CONSUMER = (
    "SELECT 1 FROM mq_consumer c"
    " WHERE c.queue = q.name AND mq_backend_started(c.backend_pid) = c.backend_started"
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

# The plant's one look each polling interval, cheap when nothing is due: is a
# lease, consumer or exclusive queue of a backend that has gone (each backend
# looked up once), an x-expires queue past its time, or a message expired? Only
# then does SWEEP_SQL run. It tells every process's listener (SWEPT_CHANNEL) that
# the plant was just looked at, so their transports put their own look off: one
# look per interval for the whole plant, not one per consumer.
SWEPT_CHANNEL = "mq_swept"
SWEEP_DUE_SQL = f"""
SELECT pg_notify('{SWEPT_CHANNEL}', ''),
  EXISTS (SELECT 1 FROM (SELECT lease_pid, lease_started FROM mq_message WHERE lease_pid IS NOT NULL
                         UNION SELECT backend_pid, backend_started FROM mq_consumer
                         UNION SELECT owner_pid, owner_started FROM mq_queue WHERE exclusive) b(pid, started)
          WHERE mq_backend_started(b.pid) IS DISTINCT FROM b.started)
  OR EXISTS (SELECT 1 FROM mq_queue q WHERE q.expires_ms IS NOT NULL
             AND q.idle_since + q.expires_ms * interval '1 millisecond' < now()
             AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name))
  OR EXISTS (SELECT 1 FROM mq_message WHERE expires_at < now() AND lease_pid IS NULL)
"""

CANCEL_SQL = """
DELETE FROM mq_consumer WHERE queue = %(queue)s AND backend_pid = %(pid)s AND tag = %(tag)s;
DELETE FROM mq_queue q WHERE name = %(queue)s AND auto_delete
    AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name);
UPDATE mq_queue q SET idle_since = now() WHERE name = %(queue)s
    AND NOT EXISTS (SELECT 1 FROM mq_consumer c WHERE c.queue = q.name);
"""
