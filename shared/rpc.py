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

from nameko.rpc import ServiceProxy
from nameko.standalone.rpc import ClusterProxy, ClusterRpcProxy, StandaloneProxyBase


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
    """nameko 2.14's ClusterRpcProxy whose requests expire after ``timeout`` seconds."""

    def __init__(self, config: dict, timeout: float, context_data: dict | None = None):
        StandaloneProxyBase.__init__(self, config, context_data=context_data, timeout=timeout)
        self._proxy = _ExpiringClusterProxy(self._worker_ctx, self._reply_listener, timeout)
