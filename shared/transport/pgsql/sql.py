"""The SQL of the pgsql:// transport: the statements each hop runs, and the
names of the LISTEN/NOTIFY channels. No Python state here; see ``__init__``
for the semantics the statements implement."""

from __future__ import annotations

import hashlib
import re

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
