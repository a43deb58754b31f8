"""The pgsql:// Transport: connections, LISTEN bookkeeping and the drain loop."""

from __future__ import annotations

import random
import threading
import weakref
from collections import deque
from time import monotonic

import psycopg2
import psycopg2.extensions
from kombu.transport import virtual

from shared.config.database import mask_url

from .channel import Channel
from .listener import NotifyListener
from .sql import (
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_POLLING_INTERVAL,
    DEFAULT_PREFETCH_BATCH,
)


def connection_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("pgsql", "postgresql", "postgres"):
        raise ValueError(f"not a pgsql:// URL: {url!r}")
    return "postgresql://" + rest


SESSION_OPTIONS = ("-c synchronous_commit=off -c plan_cache_mode=force_generic_plan"
                   " -c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2"
                   " -c tcp_keepalives_count=2")


# A consumer loop around ``drain_events`` (kombu's ConsumerMixin, so nameko's
# QueueConsumer) sees a cancel or its stop only when a drain returns; with
# nothing to deliver that is the caller's timeout (kombu's 1 s), waited out once
# per cancel and once more after the last. A stopping transport ends an idle
# drain after this long instead: a process's stop takes milliseconds, not seconds.
STOPPING_DRAIN_SECONDS = 0.05

_process_stopping = threading.Event()
_live_transports = weakref.WeakSet()
_live_lock = threading.Lock()


def process_stopping() -> None:
    """This process is stopping: every pgsql:// Transport in it, and any made
    from now on, ends an idle drain within ``STOPPING_DRAIN_SECONDS``, the one
    in progress too. Messages are still delivered as usual meanwhile."""
    _process_stopping.set()
    with _live_lock:
        transports = list(_live_transports)
    for transport in transports:
        transport.stopping()


class Transport(virtual.Transport):
    """One connection per channel; notifications come from the process's one
    :class:`NotifyListener`, shared with every other Transport in it."""

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
        # The URL's own ``options`` (e.g. a search_path) come first; ours are added.
        self._url_options = psycopg2.extensions.parse_dsn(self._dsn).get("options", "")
        self._listener = None  # the process's NotifyListener, once this consumes
        self._losses_seen = 0  # the listener's losses when this last knew its sessions alive
        self._consuming = {}  # queue -> the channel consuming it
        self._direct_inbox = deque()  # (queue, payload) of direct replies not yet delivered
        self._dirty = set()  # queues that may hold messages to claim
        self._dirty_lock = threading.Lock()
        self._wakeup = threading.Event()  # set by the listener, an ack, a consume
        self._next_sweep = 0.0
        # A queue whose LISTEN could not be confirmed is looked at each polling interval
        # (its wake-ups may not come); every other wakes by push alone.
        self._unheard = set()
        self._stopping = _process_stopping.is_set()
        with _live_lock:
            _live_transports.add(self)

    def stopping(self) -> None:
        """This transport's consumer is stopping: its idle drains end within
        ``STOPPING_DRAIN_SECONDS`` from now on, the one in progress too."""
        self._stopping = True
        self._wake()

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The URL as kombu prints it; kombu's own parser cannot read libpq's
        multi-host form (``db1:5432,db2:5432``)."""
        return uri if include_password else mask_url(uri, mask)

    def driver_version(self):
        return psycopg2.__version__

    def connect_db(self):
        # Set at connect, no round trip of their own. Acks, claims and requeues
        # need no WAL flush (see the package docstring); the prepared statements'
        # plans are made once; server-side keepalives end the backend of a
        # vanished client host within ~10 s, which is what releases its leases.
        conn = psycopg2.connect(self._dsn, application_name="kombu-pgsql",
                                options=f"{self._url_options} {SESSION_OPTIONS}".strip())
        conn.autocommit = True
        return conn

    def verify_connection(self, connection):
        """kombu's ``Connection.connected``, and so a pool's pre-ping: are this
        transport's sessions alive? Free unless the process's listener lost its own
        connection since the last look (a PostgreSQL restart ends every session; the
        listener sees it at once, it waits on its socket): then a round trip per channel."""
        channels = self.channels
        if any(channel._conn is None or channel._conn.closed for channel in channels):
            return False
        listener = self._listener
        if listener is None or listener.losses == self._losses_seen:
            return True
        losses = listener.losses
        if not all(channel.ping() for channel in channels):
            return False
        self._losses_seen = losses
        return True

    # -- notifications (the process's NotifyListener calls these, from its thread) --

    def _listen(self, queue, channel, consumer_tag):
        """``channel`` consumes ``queue``: be woken for it, and take its direct replies."""
        if self._listener is None:
            self._listener = NotifyListener.acquire(self._dsn, self.connect_db, self)
            self._losses_seen = self._listener.losses
        self._consuming[queue] = channel
        consumer = (queue, channel._backend[0], str(consumer_tag)) if self.direct_replies else None
        if not self._listener.subscribe(self, queue, consumer):
            self._unheard.add(queue)
        self._notified(queue)  # what is already there

    def _unlisten(self, queue):
        self._unheard.discard(queue)
        self._consuming.pop(queue, None)
        if self._listener is not None:
            self._listener.unsubscribe(self, queue)

    def _notified(self, queue):
        with self._dirty_lock:
            self._dirty.add(queue)
        self._wake()

    def _heard_again(self):
        """The listener (re)connected and LISTENs for every queue: no fallback polls."""
        self._unheard.clear()

    def _swept(self):
        """Some process of the plant just swept: this transport's own sweep waits."""
        self._next_sweep = monotonic() + self._sweep_interval()

    def _sweep_interval(self):
        # Spread: whichever transport of the plant comes first sweeps for all (``_swept``).
        return self.polling_interval * random.uniform(1.0, 1.5)

    def _direct(self, queue, payload):
        self._direct_inbox.append((queue, payload))
        self._wake()

    def _take_dirty(self, queues):
        """The ones of ``queues`` to claim from now; they are clean until notified again."""
        with self._dirty_lock:
            taken = self._dirty & queues
            self._dirty -= taken
            return taken

    def _mark_dirty(self, queues):
        with self._dirty_lock:
            self._dirty.update(queues)

    def _wake(self):
        self._wakeup.set()

    def _wait(self, seconds):
        # An Event, not a pipe: under eventlet a set is a green switch, with no
        # syscalls. Cleared after the wait: whoever set it changed state first,
        # and the caller looks at that state next.
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    # -- draining ------------------------------------------------------------------

    def drain_events(self, connection, timeout=None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            if self._deliver_ready():
                return
            now = monotonic()
            if now >= self._next_sweep:
                self._next_sweep = now + self._sweep_interval()
                self._sweep()
                continue
            if deadline is not None and self._stopping:
                deadline = min(deadline, now + STOPPING_DRAIN_SECONDS)
            if deadline is not None and now >= deadline:
                raise TimeoutError()
            wait = self._next_sweep - now
            if deadline is not None:
                wait = min(wait, deadline - now)
            for channel in self.channels:
                due = channel.acks_due()
                if due is not None and (due <= now or self._stopping):
                    channel.flush_acks()
                elif due is not None:
                    wait = min(wait, due - now)
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
            for queue, raw in channel.claim_ready(self, self.prefetch_batch):
                callback = self._callbacks.get(queue)
                if callback is None:  # cancelled meanwhile: hand it back
                    if raw["row_id"] is not None:
                        channel._release_rows([raw["row_id"]])
                    continue
                callback(raw)
                delivered = True
        return delivered

    def _sweep(self):
        """Hand back messages of dead consumers and drop dead queues (for the whole
        plant, see ``_swept``); look again at the queues whose wake-ups may not come."""
        for channel in self.channels:
            if channel._active_queues:
                channel.sweep(self.max_deliveries)
                break
        if self._unheard:
            self._mark_dirty(self._unheard)

    def close_connection(self, connection):
        try:
            super().close_connection(connection)
        finally:
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.release(self)
