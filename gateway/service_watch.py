"""What the gateway knows about the services it calls, cheaply and at once.

* **Presence**: does anything consume a service's RPC queue? Asked of the
  transport with a passive queue declare (RabbitMQ's consumer count; pgsql://
  counts consumers whose database backend is alive). A killed service shows as
  gone as soon as its connection drops, while an RPC to it would wait out its
  timeout: its queue outlives it. Commands check presence first and answer
  503 at once; ``/readyz`` names a service that is not running. Only a
  positive answer is trusted from the cache for a command: "absent" is asked
  again, so a service back a moment ago is not refused.
* **Status**: each service's ``status()``, cached for ``STATUS_TTL`` and
  shared by concurrent callers (one RPC in flight per service), so a burst of
  probes and scrapes costs at most one RPC per service per interval.

Both are per process, behind locks: a caller that finds an answer being
fetched waits for that answer instead of asking again.

After a transport or database error (:meth:`ServiceWatch.saw_trouble`; the
watch notes its own) no positive answer fetched before it is trusted: the next
caller asks again. A PostgreSQL restart drops every service's transport
session, so a "running, answering" from before it says nothing about now.
Negative answers stay cached for their TTL: during an outage a burst of probes
must not each wait out a connect or an RPC timeout.
"""

from __future__ import annotations

import logging
import threading
import time

from kombu import Connection
from nameko.rpc import RPC_QUEUE_TEMPLATE

import shared.transport  # noqa: F401 - registers pgsql:// with kombu
from gateway.errors import ApiError

log = logging.getLogger(__name__)

PRESENCE_TTL = 0.5  # seconds: /readyz follows a killed service within about this
STATUS_TTL = 1.0
TRANSPORT_TIMEOUT = 2.0


def rpc_queue(service: str) -> str:
    return RPC_QUEUE_TEMPLATE.format(service)  # the queue nameko's @rpc entrypoints consume


class ServiceWatch:
    def __init__(self, amqp_uri: str, status_of, *, presence_ttl: float = PRESENCE_TTL,
                 status_ttl: float = STATUS_TTL):
        self.amqp_uri = amqp_uri
        self.status_of = status_of  # service -> status dict (an RPC); raises when it cannot
        self.presence_ttl = presence_ttl
        self.status_ttl = status_ttl
        self._presence_lock = threading.Lock()
        self._presence: dict[str, tuple[float, int | None]] = {}
        self._conn: Connection | None = None
        self._status_locks: dict[str, threading.Lock] = {}
        self._status: dict[str, tuple[float, dict | None, str | None]] = {}
        self._guard = threading.Lock()
        self._trouble_at = float("-inf")  # the last transport or database error seen

    def saw_trouble(self) -> None:
        """A transport or database error was seen: ask afresh before saying "fine"."""
        self._trouble_at = time.monotonic()

    def _usable(self, at: float, ttl: float, positive: bool) -> bool:
        # A positive answer is dated when its question was put, so one in flight
        # across an error counts as from before it; a negative one when it came,
        # so a slow failure is still kept for its whole TTL.
        return time.monotonic() - at < ttl and (not positive or at > self._trouble_at)

    # -- presence ---------------------------------------------------------------

    def consumers(self, service: str, *, recheck_absent: bool = False) -> int | None:
        """Live consumers of the service's RPC queue; None when the transport cannot be asked.

        ``recheck_absent``: a cached "nothing consumes it" is asked again. A
        service that has just come back must not be refused for a whole TTL by
        a worker process that looked while it was away.
        """
        with self._presence_lock:
            at, count = self._presence.get(service, (float("-inf"), None))
            if self._usable(at, self.presence_ttl, bool(count)) and not (recheck_absent and count == 0):
                return count
            asked_at = time.monotonic()
            count = self._ask_transport(rpc_queue(service))
            self._presence[service] = (asked_at if count else time.monotonic(), count)
            return count

    def _ask_transport(self, queue: str) -> int | None:
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = Connection(self.amqp_uri, connect_timeout=TRANSPORT_TIMEOUT,
                                            transport_options={"max_retries": 0})
                    # One retry at once: a probe reports an outage in connect time, not after a back-off.
                    self._conn.ensure_connection(max_retries=1, interval_start=0)
                channel = self._conn.default_channel
                return channel.queue_declare(queue=queue, passive=True).consumer_count
            except Exception as exc:  # noqa: BLE001 - a missing queue or a lost connection
                if "NOT_FOUND" in str(exc) or type(exc).__name__ == "NotFound":
                    self._reset()  # the channel is closed after NOT_FOUND (AMQP)
                    return 0  # never declared: no service ever consumed it
                log.info("asking the transport about %s failed: %r", queue, exc)
                self.saw_trouble()
                self._reset()
                if attempt == 2:
                    return None
        return None

    def _reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.release()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    def require_running(self, service: str) -> None:
        """503 at once when nothing consumes the service's queue (the call would only wait)."""
        count = self.consumers(service, recheck_absent=True)
        if count == 0:
            raise ApiError(503, "UNAVAILABLE", f"the {service} is not running; try again shortly")

    # -- status -------------------------------------------------------------------

    def status(self, service: str) -> tuple[dict | None, str | None]:
        """The service's ``status()``, or why it could not be had (naming the service)."""
        count = self.consumers(service)
        if count == 0:
            return None, f"{service} (not running)"
        if count is None:
            return None, f"{service} (message transport unreachable)"
        with self._guard:
            lock = self._status_locks.setdefault(service, threading.Lock())
        with lock:
            at, status, why = self._status.get(service, (float("-inf"), None, None))
            if self._usable(at, self.status_ttl, status is not None):
                return status, why
            asked_at = time.monotonic()
            try:
                status, why = self.status_of(service), None
            except Exception as exc:  # noqa: BLE001 - named, not echoed: exception text stays in the log
                log.info("%s status failed: %r", service, exc)
                self.saw_trouble()
                status, why = None, f"{service} (not answering)"
            self._status[service] = (asked_at if status is not None else time.monotonic(), status, why)
            return status, why

    def close(self) -> None:
        with self._presence_lock:
            self._reset()
