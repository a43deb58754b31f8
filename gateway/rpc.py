"""A pool of nameko RPC clients for the gateway's threads.

One ``ClusterRpcProxy`` shared by threads deadlocks or mixes up replies, and a
client per call costs a connection and a reply queue each time; so each thread
borrows a started client from a pool (``shared.rpc.RpcClientPool``) and gives
it back. A client whose call failed on the transport is dropped, not reused.

Every way a call can fail because the transport or its database went away is a
503 ``UNAVAILABLE`` (a failover's commands answer so, never 500): a connection
lost while publishing or waiting, a reply consumer found disconnected when the
wait begins (``shared.rpc.ReplyConsumerLost``), a publish the server refused
(a server turned standby; a broker's nack), a reply that never came.

Requests carry a broker expiration equal to the RPC timeout
(``shared.rpc.ExpiringClusterRpcProxy``): a command the gateway already
answered 503 for (the line_controller was down) is dropped by the broker
instead of running when the service comes back.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import amqp.exceptions
import kombu.exceptions
import psycopg2
import psycopg2.errors
from nameko.exceptions import RemoteError, RpcTimeout, UnknownService

from gateway.errors import ApiError
from shared.rpc import PoolExhausted, RpcClientPool

log = logging.getLogger(__name__)

# A client's connection to the message transport broke (RabbitMQ or PostgreSQL
# restarted, failed over, a network cut), or the server refused a publish for it:
# the client is dropped and the call may be retried. ``OSError`` covers
# ``shared.rpc.ReplyConsumerLost``.
TRANSPORT_LOST = (OSError, ConnectionError, psycopg2.OperationalError, psycopg2.InterfaceError,
                  psycopg2.errors.ReadOnlySqlTransaction,
                  amqp.exceptions.ConnectionError, amqp.exceptions.MessageNacked,
                  kombu.exceptions.OperationalError)


class TransportLost(ApiError):
    """503: the transport connection broke during a call (a retry with a fresh
    client may succeed; commands carry an id, so a retried one runs once)."""

    def __init__(self, exc: BaseException):
        log.warning("message transport connection lost: %r", exc)
        super().__init__(503, "UNAVAILABLE", "message transport connection lost; try again")


class RpcPool(RpcClientPool):
    """The shared pool, its failures mapped to the HTTP envelope once, here."""

    def __init__(self, nameko_config: dict, size: int = 8, timeout: float = 10.0):
        # An ApiError raised in the block is the gateway's own verdict on a good reply.
        super().__init__(nameko_config, size=size, timeout=timeout,
                         reusable_errors=(ApiError, RemoteError))

    @contextmanager
    def client(self):
        """Borrow a cluster proxy: ``with pool.client() as rpc: rpc.line_controller.x()``."""
        try:
            with super().client() as cluster:
                yield cluster
        except PoolExhausted:
            raise ApiError(503, "UNAVAILABLE", "all RPC clients are busy; try again") from None
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
