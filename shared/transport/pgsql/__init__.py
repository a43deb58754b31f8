"""``pgsql://`` — a kombu transport on PostgreSQL (psycopg2), for nameko and plain kombu.

URL: an ordinary PostgreSQL URL with the scheme ``pgsql``:
``pgsql://user:pass@host:port/db`` or ``pgsql:///db?host=/socket/dir`` (every libpq
parameter may go in the query string). The tables come from migrations 0002 and
0004 (``mq_exchange``, ``mq_queue``, ``mq_binding``, ``mq_consumer``, ``mq_message``,
``mq_dead_letter``).

What it supports, as AMQP 0-9-1 / pyamqp does it:

* direct, topic and fanout exchanges and the default exchange (``""``). Exchanges,
  queues and bindings live in the database, so every process routes the same way;
  ``queue_unbind`` and ``queue_delete`` remove bindings. Publishing routes in one SQL
  statement that inserts one row per bound queue and ``NOTIFY``s each of them.
  A topic binding key without ``*`` or ``#`` matches by equality; only wildcard
  keys run their regular expression (PostgreSQL caches 32 compiled per session,
  and nameko binds one key per RPC client's reply queue).
* ``mandatory=True``: a message no queue is bound for raises
  :class:`kombu.exceptions.ChannelError` ``NO_ROUTE`` (nameko: ``UnknownService``).
* ``auto_delete`` (dropped when the last consumer cancels or dies), ``exclusive``
  (dropped when the declaring connection closes or dies), ``x-expires`` (dropped after
  that long without consumers) queues; per-message ``expiration``.
* message properties as pyamqp gives them (``content_type``, ``content_encoding``,
  ``correlation_id``, ``reply_to``, ``delivery_mode``, ``priority``, ``expiration``)
  plus ``headers``; ``delivery_info['redelivered']``.
* QoS ``prefetch_count``; ``basic_get``; ``basic_reject`` with and without requeue.
* Push: each process has one listening connection per database
  (:mod:`.listener`), which ``LISTEN``s on one channel per consumed queue (``mq_`` +
  md5 of the name; the payload is the queue name) for every kombu Connection of the
  process. A Transport sleeps in ``select`` on a pipe until a notification for one of
  its queues, an ack that frees prefetch room, or its share of the plant's sweep (below).
  No statement runs on a timer for a consumed queue: a queue is looked at again
  each polling interval only while its LISTEN could not be confirmed.
* Direct replies (RabbitMQ's direct reply-to): a message with a ``correlation_id``
  and no ``reply_to``, to a private queue (exclusive, auto-delete or ``x-expires``)
  with exactly one consumer whose listener is alive, is the payload of a ``NOTIFY``
  on ``mqd_`` + md5 of the queue name: no row, claim or delete. Larger than a NOTIFY
  may carry (8000 bytes), or with no live listener, it goes through the table. At
  most once: a reply to a consumer that has gone is lost (its caller times out); it
  bypasses prefetch; settling it is a no-op and a requeue drops it.
* Claiming: ``UPDATE … FOR UPDATE SKIP LOCKED``, so competing consumers never block
  each other or get the same message. A claimed row carries a lease: the PostgreSQL
  backend (pid + start time) of the consuming channel. Ack deletes the row (in the
  statement of the channel's next claim, or 1 s after the ack when no claim came
  first; ``Channel.close`` flushes): a process that dies in that second has the
  message delivered again, as a broker redelivers an ack lost with its connection.
  Reject with requeue clears the lease. If the consumer's connection or process
  dies, its backend ends, and the next sweep hands the message out again with
  ``redelivered`` set; a message whose consumers died ``max_deliveries`` times
  (default 5) goes to ``mq_dead_letter`` instead.
* Sweeps: one look per ``polling_interval`` (default 5 s) for the whole database:
  every consuming Transport's timer runs 1–1.5 intervals, the first due looks
  (one query, cheap while nothing is due: a dead backend's lease, consumer or
  exclusive queue, an x-expires queue past its time, an expired message) and
  ``NOTIFY``s ``mq_swept``, which puts every other process's timer off; only when
  something is due does the sweep itself run.

Durability: a publish waits for its WAL flush only when the message
is persistent (``delivery_mode=2``) and at least one target queue is durable and
neither auto-delete, exclusive nor ``x-expires``. Everything else — transient messages,
messages to reply queues (nameko's have ``x-expires``), claims, acks, requeues — commits with
``synchronous_commit = off``: a PostgreSQL crash may lose the last fraction of a
second of those (a lost ack is a redelivery; a lost reply is an RPC timeout), never
corrupts anything, and it saves a WAL flush per statement.

A persistent message that is no reply (an RPC request, an event) is confirmed
as RabbitMQ confirms one: the publish returns once the message is flushed to
the WAL, and a consumer may take it before that. It runs two transactions: the
rows and their wake-up ``NOTIFY``, committed without waiting; and, only when a
target queue is durable, a transaction that writes a WAL record and commits
with ``synchronous_commit = on``, so it waits for the flush through the rows too.
The flush is off the path from publisher to consumer, and no ``NOTIFY``ing commit waits for one: PostgreSQL serialises
every ``NOTIFY``ing commit of a cluster under one lock and holds it through the
commit's flush, so in one transaction every other publisher (and every direct
reply) waited for it and no two flushes could be shared. A crash before the
flush can lose a message a consumer took; its publisher then gets an error,
never a confirm.

Outbox (:mod:`.outbox`): inside ``publishing_in(Outbox(conn))`` a publish to the
same database is written by ``conn`` in its open transaction, committed (and
flushed) with the caller's own state change or not at all, with no commit of its
own; ``Outbox.wake()`` is the one ``NOTIFY`` for its queues after the commit. The
line_controller's loop publishes its ``line_events`` and hardware requests so on
``pgsql://`` to its own database. A wake-up lost with the process leaves the rows
for the queue's next wake-up or a consumer's start; a request so left expires.

``Connection.connected`` asks :meth:`Transport.verify_connection`: free while the
process's listener has kept its connection, a ``SELECT 1`` per channel once it lost
one (a PostgreSQL restart ends every session). Pools of started clients check it
before lending one (``shared.rpc.RpcClientPool``).

Each channel's connection prepares the hot statements (publish, claim, take,
delete, release) once, with generic plans: planning was most of a publish.

Transport options (``transport_options=`` or nameko ``TRANSPORT_OPTIONS``):
``polling_interval`` (s, the sweep period, default 5.0),
``max_deliveries`` (default 5), ``prefetch_batch`` (rows claimed per query when no
prefetch limit is set, default 10), ``durable_publish`` (default True; False commits
every publish with ``synchronous_commit = off``, trading the last fraction of a second
of persistent messages on a PostgreSQL crash for one WAL flush less per message),
``direct_replies`` (default True).

Stopping: a consumer loop around ``drain_events`` (nameko's QueueConsumer) sees a
cancel or its own stop only when a drain returns, which with nothing to deliver is
its timeout (kombu's 1 s, waited once per cancel and once after the last).
:func:`process_stopping` (called by a service process on SIGTERM) and
:meth:`Transport.stopping` (one connection) end idle drains within 50 ms from then on.

Not supported: message priorities (delivery is FIFO per queue), exchange-to-exchange
bindings, headers exchanges, publisher confirms beyond "committed" (every publish is
confirmed when its statement returns).
"""

from .channel import Channel, Message, QoS
from .sql import notify_channel, topic_pattern
from .transport import Transport, process_stopping

__all__ = ["Transport", "Channel", "Message", "QoS", "notify_channel", "process_stopping", "topic_pattern"]
