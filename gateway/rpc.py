"""A pool of nameko RPC clients for the gateway's threads.

One ``ClusterRpcProxy`` shared by threads deadlocks or mixes up replies, and a
client per call costs a connection and a reply queue each time; so each thread
borrows a started client from a pool and gives it back. A client whose call
failed on the transport is dropped, not reused.

Requests carry a broker expiration equal to the RPC timeout
(``shared.rpc.ExpiringClusterRpcProxy``): a command the gateway already
answered 503 for (the line_controller was down) is dropped by the broker
instead of running when the service comes back.
"""

from __future__ import annotations

import logging
import queue
import threading
from contextlib import contextmanager

import amqp.exceptions
import kombu.exceptions
import psycopg2
from nameko.exceptions import RemoteError, RpcTimeout, UnknownService

from gateway.errors import ApiError
from shared.rpc import ExpiringClusterRpcProxy

log = logging.getLogger(__name__)

# A client's connection to the message transport broke (RabbitMQ or PostgreSQL
# restarted, a network cut): the client is dropped and the call may be retried.
TRANSPORT_LOST = (OSError, ConnectionError, psycopg2.OperationalError, psycopg2.InterfaceError,
                  amqp.exceptions.ConnectionError, kombu.exceptions.OperationalError)


class TransportLost(ApiError):
    """503: the transport connection broke during a call (a retry with a fresh
    client may succeed; commands carry an id, so a retried one runs once)."""

    def __init__(self, exc: BaseException):
        log.warning("message transport connection lost: %r", exc)
        super().__init__(503, "UNAVAILABLE", "message transport connection lost; try again")


class RpcPool:
    def __init__(self, nameko_config: dict, size: int = 8, timeout: float = 10.0):
        self.config = nameko_config
        self.timeout = timeout
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._all: list = []
        self._lock = threading.Lock()

    def _new(self):
        proxy = ExpiringClusterRpcProxy(self.config, timeout=self.timeout)
        cluster = proxy.start()
        with self._lock:
            self._all.append(proxy)
        return proxy, cluster

    @contextmanager
    def client(self):
        """Borrow a cluster proxy: ``with pool.client() as rpc: rpc.line_controller.x()``."""
        if not self._slots.acquire(timeout=self.timeout):
            raise ApiError(503, "UNAVAILABLE", "all RPC clients are busy; try again")
        entry = None
        try:
            try:
                entry = self._idle.get_nowait()
            except queue.Empty:
                entry = self._new()
            ok = False
            try:
                yield entry[1]
                ok = True
            except (RpcTimeout, UnknownService):
                raise
            except (ApiError, RemoteError):
                ok = True  # the client is fine; the call failed on the other side
                raise
            finally:
                if ok:
                    self._idle.put(entry)
                else:
                    self._discard(entry[0])
        except UnknownService as exc:
            raise ApiError(503, "UNAVAILABLE", f"service unavailable: {exc}") from None
        except RemoteError as exc:
            # The service raised (its database is down, most likely): its fault, not the caller's.
            log.warning("RPC failed in the service: %s", exc.exc_type)
            raise ApiError(503, "UNAVAILABLE", "the service could not answer; try again shortly") from None
        except RpcTimeout:
            raise ApiError(503, "UNAVAILABLE", "the service did not answer in time") from None
        except TRANSPORT_LOST as exc:
            raise TransportLost(exc) from None
        finally:
            self._slots.release()

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
            except Exception:  # noqa: BLE001
                pass
