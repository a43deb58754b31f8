"""A nameko 2.14 standalone RPC client whose requests expire in the broker.

A caller that gave up on a request (its timeout ran out: the service was down
or stopping) has already acted on that: the gateway answered 503, the
line_controller turned a hardware request into a failed task. The request must
not run when the service comes back, so it carries a broker expiration equal
to the timeout (kombu's ``expiration``; RabbitMQ and pgsql:// both drop an
expired message unconsumed). One that was consumed just before it expired
still runs: that is the ambiguity every timeout has, and the caller's failure
path (a 503 to retry with the same command id; an operator's RETRY of a failed
action once the piece is where it was) covers it.
"""

from __future__ import annotations

import logging
import queue
import threading
from contextlib import contextmanager

from nameko.exceptions import RemoteError
from nameko.rpc import ServiceProxy
from nameko.standalone.rpc import (
    ClusterProxy,
    ClusterRpcProxy,
    ConsumeEvent,
    SingleThreadedReplyListener,
    StandaloneProxyBase,
)

log = logging.getLogger(__name__)


class ReplyConsumerLost(ConnectionError):
    """The client's reply consumer lost its transport connection (or was stopped)
    before the reply came: a failover or a broker restart while the request was on
    its way. nameko 2.14 raises a bare ``RuntimeError`` for it; this is a lost
    connection like any other (an ``OSError``), so callers treat it as one."""


class _ReplyEvent(ConsumeEvent):
    def wait(self):
        # nameko's own checks, raising a connection error instead of RuntimeError.
        if self.exception is None:
            consumer = self.queue_consumer
            if consumer.stopped:
                raise ReplyConsumerLost("the RPC client's reply consumer was stopped")
            if consumer.connection.connected is False:
                raise ReplyConsumerLost("the RPC client's reply consumer lost its transport connection")
        return super().wait()


class _ReplyListener(SingleThreadedReplyListener):
    def get_reply_event(self, correlation_id):
        event = _ReplyEvent(self.queue_consumer, correlation_id)
        self._reply_events[correlation_id] = event
        return event


class _ExpiringClusterProxy(ClusterProxy):
    def __init__(self, worker_ctx, reply_listener, expiration: float):
        super().__init__(worker_ctx, reply_listener)
        self._expiration = expiration

    def __getattr__(self, name):
        if name not in self._proxies:
            # Extra ServiceProxy options reach nameko's Publisher (kombu's ``expiration``).
            self._proxies[name] = ServiceProxy(self._worker_ctx, name, self._reply_listener,
                                               expiration=self._expiration)
        return self._proxies[name]


class ExpiringClusterRpcProxy(ClusterRpcProxy):
    """nameko 2.14's ClusterRpcProxy whose requests expire after ``timeout`` seconds,
    and whose lost reply consumer raises :class:`ReplyConsumerLost`."""

    def __init__(self, config: dict, timeout: float, context_data: dict | None = None):
        StandaloneProxyBase.__init__(self, config, context_data=context_data, timeout=timeout,
                                     reply_listener_cls=_ReplyListener)
        self._proxy = _ExpiringClusterProxy(self._worker_ctx, self._reply_listener, timeout)


class PoolExhausted(Exception):
    """Every client of a pool stayed lent for the whole wait."""


class RpcClientPool:
    """Started clients, each lent to one caller at a time.

    A nameko 2.14 standalone client may not be shared by concurrent callers (they
    would drain one reply consumer together), and a client per call costs a
    transport connection, a reply queue and its consumer every time: on pgsql://
    a new database session each, which made every hardware request of the
    line_controller some 20 ms slower. A client whose call failed for any reason
    but ``reusable_errors`` (by default the service's own exception) is dropped:
    its connection may be broken, or a late reply may still come to it.
    """

    def __init__(self, config: dict, size: int = 8, timeout: float = 10.0,
                 context_data: dict | None = None, reusable_errors: tuple = (RemoteError,)):
        self.config = config
        self.timeout = timeout
        self.context_data = context_data
        self.reusable_errors = reusable_errors
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._all: list = []
        self._lock = threading.Lock()

    def _new(self):
        proxy = ExpiringClusterRpcProxy(self.config, timeout=self.timeout,
                                        context_data=self.context_data)
        cluster = proxy.start()
        with self._lock:
            self._all.append(proxy)
        return proxy, cluster

    @contextmanager
    def client(self, wait: float | None = None):
        """Borrow a started cluster proxy: ``with pool.client() as rpc: rpc.hardware.x()``;
        waiting up to ``wait`` seconds (default the pool's timeout) for one to be free."""
        if not self._slots.acquire(timeout=self.timeout if wait is None else wait):
            raise PoolExhausted(f"all {len(self._all)} RPC clients stayed busy for {self.timeout} s")
        try:
            entry = self._idle_usable()
            if entry is None:
                entry = self._new()
            reusable = False
            try:
                yield entry[1]
                reusable = True
            except self.reusable_errors:
                reusable = True  # the client is fine; the call failed on the other side
                raise
            finally:
                if reusable:
                    self._idle.put(entry)
                else:
                    self._discard(entry[0])
        finally:
            self._slots.release()

    def _idle_usable(self):
        """An idle client whose transport is still connected, as SQLAlchemy's
        ``pool_pre_ping``: after a broker or PostgreSQL restart a pooled client holds
        dead sessions, and a request sent on it would be published (by a publisher
        that reconnects) and then fail waiting for its reply, after the service acted.
        ``Connection.connected`` asks the transport (on pgsql:// free until the
        process's listener has seen a restart; py-amqp knows its socket's state)."""
        while True:
            try:
                entry = self._idle.get_nowait()
            except queue.Empty:
                return None
            consumer = entry[0]._reply_listener.queue_consumer
            try:
                usable = not consumer.stopped and consumer.connection.connected
            except Exception:  # noqa: BLE001 - any doubt: a new client
                usable = False
            if usable:
                return entry
            log.info("dropping a pooled RPC client whose connection is gone")
            self._discard(entry[0])

    def _discard(self, proxy) -> None:
        with self._lock:
            if proxy in self._all:
                self._all.remove(proxy)
        try:
            proxy.stop()
        except Exception:  # noqa: BLE001 - a broken client is being thrown away
            log.debug("error stopping a discarded RPC client", exc_info=True)

    def close(self) -> None:
        with self._lock:
            proxies, self._all = self._all, []
        for proxy in proxies:
            try:
                proxy.stop()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
