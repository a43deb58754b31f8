"""One LISTEN connection per process, shared by every pgsql:// Transport in it.

PostgreSQL wakes every listening backend of a database for every NOTIFY, and
each of them reads the whole notification queue to find its own channels. A
LISTEN connection per kombu Connection (nameko opens one per proxy and per
consumer) made every message cost work in every listener: at 50 RPC callers
the server spent more time waking listeners than routing messages. So a
process has one :class:`NotifyListener` per database, which LISTENs for the
queues of all its Transports and hands each notification to the Transports
consuming that queue: a wake-up marks the queue to be claimed, a direct reply
carries the message itself.

A listener thread (a green thread under eventlet) waits on the connection.
LISTEN and the direct-reply registration run in the subscribing caller, under
the connection's lock, so a consumer takes direct replies as soon as
``basic_consume`` returns. If the connection drops, the thread reconnects,
LISTENs again, moves the direct registrations to its new backend and marks
every queue for a claim (the table holds what came meanwhile; a direct reply
published in the instant the old backend died is lost, and its caller times out).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time

import psycopg2

from .sql import MOVE_LISTENER_SQL, REGISTER_LISTENER_SQL, SWEPT_CHANNEL, direct_channel, notify_channel

log = logging.getLogger(__name__)

RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)


CALL_TIMEOUT = 10.0  # s a subscriber waits for its LISTEN before it relies on the sweep


class NotifyListener:
    _instances: dict[tuple[int, str], NotifyListener] = {}
    _instances_lock = threading.Lock()

    @classmethod
    def acquire(cls, dsn: str, connect, transport) -> NotifyListener:
        """This process's listener for the database (a forked child gets its own)."""
        key = (os.getpid(), dsn)
        with cls._instances_lock:
            listener = cls._instances.get(key)
            if listener is None:
                listener = cls._instances[key] = cls(key, connect)
            listener._users.add(transport)
            return listener

    def __init__(self, key, connect):
        self._key = key
        self._connect = connect
        self._users: set = set()  # the transports using it (a release is idempotent)
        # Guards the maps and the request list. The connection itself is used by
        # the listener thread only: under eventlet a query waits on the socket,
        # and two green threads may not wait on one socket.
        self._lock = threading.Lock()
        self._conn = None
        self._backend = None  # (pid, backend_start) of the listening connection
        self._wake_channels: dict[str, str] = {}  # notify channel -> queue
        self._direct_channels: dict[str, str] = {}  # direct channel -> queue
        self._subscribers: dict[str, set] = {}  # queue -> transports consuming it
        self._requests: list = []  # (sql, params, done event, result box) for the thread
        self._poke_r, self._poke_w = os.pipe()
        os.set_blocking(self._poke_r, False)
        os.set_blocking(self._poke_w, False)
        self._poke_pending = False
        self._pipe_closed = False
        self._stopping = False
        self._thread = None
        # How often the connection was lost: a PostgreSQL restart ends every session of
        # the process, so a Transport that sees this change checks its own (verify_connection).
        self.losses = 0

    # -- subscriptions (any thread) ----------------------------------------------

    def subscribe(self, transport, queue: str, consumer=None) -> bool:
        """Wake ``transport`` for ``queue``; ``consumer`` (queue, channel backend pid,
        tag) also takes its direct replies here. Returns once this connection
        LISTENs (True), or, if it cannot now, False: the transport then looks at the
        queue each polling interval until the listener's next connection."""
        with self._lock:
            new = queue not in self._subscribers
            if new:
                self._wake_channels[notify_channel(queue)] = queue
                self._direct_channels[direct_channel(queue)] = queue
            self._subscribers.setdefault(queue, set()).add(transport)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="pgsql-notify-listener")
                self._thread.start()
        statements, params = [], None
        if new:
            statements += [f"LISTEN {notify_channel(queue)}", f"LISTEN {direct_channel(queue)}"]
        if consumer is not None:
            # After the LISTENs, in the same round trip: no publisher sends a
            # direct reply here before this connection can receive it.
            statements.append(REGISTER_LISTENER_SQL)
            params = ([consumer[0]], [consumer[1]], [consumer[2]])
        if statements:
            return self._call("; ".join(statements), params, wait=True)
        return True

    def unsubscribe(self, transport, queue: str) -> None:
        with self._lock:
            transports = self._subscribers.get(queue)
            if not transports or transport not in transports:
                return
            transports.discard(transport)
            if transports:
                return
            del self._subscribers[queue]
            wake, direct = notify_channel(queue), direct_channel(queue)
            self._wake_channels.pop(wake, None)
            self._direct_channels.pop(direct, None)
        self._call(f"UNLISTEN {wake}; UNLISTEN {direct}", None, wait=False)

    def release(self, transport) -> None:
        """``transport`` is closing; the last one out closes the listener."""
        with self._lock:
            queues = [q for q, ts in self._subscribers.items() if transport in ts]
        for queue in queues:
            self.unsubscribe(transport, queue)
        with self._instances_lock:
            if transport not in self._users:
                return
            self._users.discard(transport)
            if self._users:
                return
            self._forget()
        with self._lock:
            self._stopping = True
            if self._thread is None:
                self._close_pipe()
                return
        self._poke(stopping=True)  # the thread closes the connection and the pipe

    def _forget(self):
        """No new transport gets this listener (called under the instances lock)."""
        if self._instances.get(self._key) is self:
            del self._instances[self._key]

    def _call(self, sql, params, wait):
        done, box = threading.Event(), {}
        with self._lock:
            self._requests.append((sql, params, done, box))
        self._poke()
        if not wait:
            return True
        if not done.wait(CALL_TIMEOUT):
            log.warning("pgsql:// listener is not connected; queues wait for the sweep")
        elif "error" in box:
            log.warning("pgsql:// listener could not LISTEN (%r); queues wait for the sweep",
                        box["error"])
        else:
            return True
        return False

    def _poke(self, stopping=False):
        with self._lock:
            # Never into a closed pipe: its fd numbers may belong to something else now.
            if self._pipe_closed or (self._poke_pending and not stopping):
                return
            self._poke_pending = True
            try:
                os.write(self._poke_w, b"!")  # non-blocking: never waits
            except OSError:
                pass  # full: a poke is pending anyway

    # -- the listener thread -------------------------------------------------------

    def _run(self):
        failures = 0
        try:
            while not self._stopping:
                try:
                    if self._conn is None or self._conn.closed:
                        self._reopen()
                    self._serve_requests()
                    readable, _, _ = select.select([self._conn, self._poke_r], [], [])
                    if self._poke_r in readable:
                        os.read(self._poke_r, 4096)  # then the flag: see Transport._wait
                        self._poke_pending = False
                    if self._conn in readable:
                        self._conn.poll()
                    self._dispatch()
                    failures = 0
                except Exception as exc:  # noqa: BLE001 - the listener must outlive any fault
                    if self._stopping:
                        break
                    self.losses += 1
                    if not isinstance(exc, (psycopg2.Error, OSError, ValueError)):
                        log.exception("pgsql:// listener failed")
                    delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                    failures += 1
                    log.warning("pgsql:// listener lost its connection (%r); again in %.1f s",
                                exc, delay)
                    self._close_conn()
                    self._fail_requests(exc)
                    self._sleep(delay)
        except BaseException as exc:
            log.warning("pgsql:// listener ended by %r", exc)
            raise
        finally:
            with self._instances_lock:
                self._forget()  # if it ended otherwise than by a stop: a new one for newcomers
            with self._lock:
                self._stopping = True
                self._close_pipe()
            self._close_conn()
            self._fail_requests(None)

    def _serve_requests(self):
        with self._lock:
            requests, self._requests = self._requests, []
        for n, (sql, params, done, box) in enumerate(requests):
            try:
                with self._conn.cursor() as cur:
                    cur.execute(sql, params)
            except psycopg2.Error as exc:
                box["error"] = exc
                done.set()
                with self._lock:  # the rest waits for the next connection
                    self._requests[:0] = requests[n + 1:]
                raise
            done.set()
        self._dispatch()  # what arrived while they ran

    def _fail_requests(self, exc):
        # LISTENs are made again by the next connection (from the maps); a lost
        # direct registration only means replies go through the table.
        with self._lock:
            requests, self._requests = self._requests, []
        for _, _, done, box in requests:
            box["error"] = exc
            done.set()

    def _open(self):
        self._conn = self._connect()
        with self._conn.cursor() as cur:
            cur.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
            self._backend = cur.fetchone()

    def _reopen(self):
        """A new connection: LISTEN again, take over the direct registrations, claim."""
        old = self._backend
        self._close_conn()
        self._open()
        with self._lock:
            channels = [SWEPT_CHANNEL, *self._wake_channels, *self._direct_channels]
            # Its own LISTENs are covered below.
            self._requests = [r for r in self._requests if not r[0].startswith("UNLISTEN")]
        with self._conn.cursor() as cur:
            if channels:
                cur.execute("; ".join(f"LISTEN {c}" for c in channels))
            if old is not None:
                cur.execute(MOVE_LISTENER_SQL, old)
        with self._instances_lock:
            users = list(self._users)
        for transport in users:
            transport._heard_again()
        with self._lock:  # (under the lock: a transport that unsubscribed is never woken)
            for queue, transports in self._subscribers.items():
                for transport in transports:
                    transport._notified(queue)  # what came while nobody listened

    def _close_conn(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg2.Error:
                pass

    def _close_pipe(self):
        self._pipe_closed = True
        for fd in (self._poke_r, self._poke_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _dispatch(self):
        """Hand what arrived to the transports consuming its queue."""
        conn = self._conn
        if conn is None or not conn.notifies:
            return
        notes = list(conn.notifies)
        conn.notifies.clear()
        if any(note.channel == SWEPT_CHANNEL for note in notes):
            with self._instances_lock:
                users = list(self._users)
            for transport in users:
                transport._swept()
        with self._lock:
            for note in notes:
                queue = self._wake_channels.get(note.channel)
                if queue is not None:
                    for transport in self._subscribers.get(queue, ()):
                        transport._notified(queue)
                    continue
                queue = self._direct_channels.get(note.channel)
                if queue is not None:
                    # A direct reply goes to a queue with exactly one consumer.
                    for transport in self._subscribers.get(queue, ()):
                        transport._direct(queue, note.payload)
                        break

    def _sleep(self, seconds):
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self._poke_r], [], [], left)
            if readable:
                os.read(self._poke_r, 4096)
                self._poke_pending = False
