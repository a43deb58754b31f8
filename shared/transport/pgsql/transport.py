"""The pgsql:// Transport: connections, LISTEN bookkeeping and the drain loop."""

from __future__ import annotations

import os
import select
from collections import OrderedDict, deque
from time import monotonic

import psycopg2
from kombu.transport import virtual

from .channel import Channel
from .sql import (
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_POLLING_INTERVAL,
    DEFAULT_PREFETCH_BATCH,
    REGISTER_LISTENER_SQL,
    direct_channel,
    notify_channel,
)


def connection_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("pgsql", "postgresql", "postgres"):
        raise ValueError(f"not a pgsql:// URL: {url!r}")
    return "postgresql://" + rest


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
        self.direct_replies = bool(options.get("direct_replies", True))
        self._dsn = connection_dsn(client.hostname)
        self._listen_conn = None
        self._listening = {}  # notify channel -> queue (wake-ups)
        self._listening_direct = {}  # direct channel -> queue (direct replies)
        self._pending_listens = OrderedDict()  # queue -> True (LISTEN) / False (UNLISTEN)
        # Consumers (queue, channel backend pid, tag) whose direct replies this
        # connection's listener takes once it LISTENs; the channel of each queue.
        self._pending_direct = []
        self._consuming = {}
        self._direct_inbox = deque()  # (queue, payload) of direct replies not yet delivered
        self._dirty = set()
        self._wake_r = self._wake_w = None
        self._wake_pending = False
        self._next_sweep = 0.0

    def driver_version(self):
        return psycopg2.__version__

    def connect_db(self):
        # Set at connect, no round trip of their own. Acks, claims and requeues
        # need no WAL flush (see the package docstring); the prepared statements'
        # plans are made once; server-side keepalives end the backend of a
        # vanished client host within ~10 s, which is what releases its leases.
        conn = psycopg2.connect(self._dsn, application_name="kombu-pgsql", options=(
            "-c synchronous_commit=off -c plan_cache_mode=force_generic_plan"
            " -c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=2"))
        conn.autocommit = True
        return conn

    # -- LISTEN bookkeeping (applied by the draining thread only) ----------------

    def _listen(self, queue, channel, consumer_tag):
        self._pending_listens[queue] = True
        self._consuming[queue] = channel
        if self.direct_replies:
            self._pending_direct.append((queue, channel._backend[0], str(consumer_tag)))
        self._dirty.add(queue)
        self._wake()

    def _unlisten(self, queue):
        self._pending_listens[queue] = False
        self._consuming.pop(queue, None)

    def _apply_listens(self):
        if self._listen_conn is None:
            self._listen_conn = self.connect_db()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
        statements = []
        while self._pending_listens:
            queue, listen = self._pending_listens.popitem(last=False)
            channel, direct = notify_channel(queue), direct_channel(queue)
            if listen:
                self._listening[channel] = queue
                self._listening_direct[direct] = queue
                statements += [f"LISTEN {channel}", f"LISTEN {direct}"]
            elif self._listening.pop(channel, None) is not None:
                self._listening_direct.pop(direct, None)
                statements += [f"UNLISTEN {channel}", f"UNLISTEN {direct}"]
        params = None
        if self._pending_direct:
            # Only once this connection LISTENs may a publisher send to it directly:
            # the same round trip, after the LISTENs.
            queues, pids, tags = zip(*self._pending_direct, strict=True)
            self._pending_direct = []
            statements.append(REGISTER_LISTENER_SQL)
            params = (list(queues), list(pids), list(tags))
        if statements:
            with self._listen_conn.cursor() as cur:
                cur.execute("; ".join(statements), params)
            self._take_notifies()

    def _take_notifies(self):
        conn = self._listen_conn
        for note in conn.notifies:
            queue = self._listening.get(note.channel)
            if queue is not None:
                self._dirty.add(queue)
                continue
            queue = self._listening_direct.get(note.channel)
            if queue is not None:
                self._direct_inbox.append((queue, note.payload))
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
        while self._direct_inbox:
            queue, payload = self._direct_inbox.popleft()
            callback, channel = self._callbacks.get(queue), self._consuming.get(queue)
            if callback is None or channel is None:
                continue  # cancelled meanwhile: a reply to a consumer that has gone is lost
            callback(channel._raw(None, queue, payload, 1))
            delivered = True
        for channel in list(self.channels):
            if not channel._active_queues:
                continue
            for queue, raw in channel.claim_ready(self._dirty, self.prefetch_batch):
                callback = self._callbacks.get(queue)
                if callback is None:  # cancelled meanwhile: hand it back
                    if raw["row_id"] is not None:
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
