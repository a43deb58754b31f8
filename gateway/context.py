"""The gateway's per-app state, :class:`GatewayContext`, and the one way to reach
it: :func:`gateway_context` (settings, read-only DB sessions, the RPC pools, the
layout, metrics, the event relay and stream hub, the AI job queue).

The background parts (relay, hub, service watch, RPC pools) start on first use,
so importing or creating an app starts nothing."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from flask import Flask, current_app
from sqlalchemy.orm import sessionmaker

from gateway import errors, metrics
from gateway.event_log import read_log
from gateway.relay import EventRelay
from gateway.rpc import RpcPool
from gateway.service_watch import ServiceWatch
from gateway.stream_hub import HubLimits, StreamHub
from gateway.tokens import TokenStore
from services.ai_jobs.queue import AiJobQueue
from services.ai_jobs.sweeper import ExpirySweeper
from services.identity.service import Identity
from services.identity.watch import SESSION_CREDENTIAL
from shared.config import Settings, nameko_config
from shared.layout import load_layout

EXTENSION = "linectl"  # the key in ``app.extensions``
STATUS_RPC_TIMEOUT = 2.0  # /readyz and /metrics must answer fast when the loop is down


def gateway_context(app: Flask | None = None) -> GatewayContext:
    """The app's :class:`GatewayContext` (``current_app``'s when no app is given)."""
    return (app or current_app).extensions[EXTENSION]


@dataclass
class GatewayContext:
    settings: Settings
    db: sessionmaker
    rpc: object  # gateway.rpc.RpcPool, created lazily by rpc_pool()
    layout: object = None
    metrics: metrics.GatewayMetrics = None
    status_rpc: object = None  # a small pool with a short timeout, for status()
    relay: object = None  # gateway.relay.EventRelay, started by event_relay()
    hub: object = None  # gateway.stream_hub.StreamHub, started by stream_hub()
    watch: object = None  # gateway.service_watch.ServiceWatch, made by service_watch()
    ai: AiJobQueue = None
    people: Identity = None  # users, sessions, sign-in (services.identity)
    tokens: TokenStore = None  # made from the settings' tokens by __post_init__
    sweeper: ExpirySweeper = None  # started by start_background() in a serving process
    _lock: threading.Lock = None

    def __post_init__(self):
        if self.tokens is None:
            self.tokens = TokenStore(self.settings.tokens, self.settings.tokens_file)

    def start_background(self) -> None:
        """What a serving process runs beside its requests: the AI expiry sweeper and
        the tokens file's watch (so that streams of a revoked token close though no
        request comes)."""
        if self.sweeper is None:
            self.sweeper = ExpirySweeper(self.ai).start()
        self.tokens.watch()

    def rpc_pool(self):
        if self.rpc is None:
            self.rpc = RpcPool(nameko_config(self.settings), timeout=self.settings.command_wait_seconds + 5)
        return self.rpc

    def status_pool(self):
        if self.status_rpc is None:
            self.status_rpc = RpcPool(nameko_config(self.settings), size=2, timeout=STATUS_RPC_TIMEOUT)
        return self.status_rpc

    def service_watch(self):
        """Presence and cached status of the services (``/readyz``, ``/metrics``, commands)."""
        def status_of(service: str) -> dict:
            with self.status_pool().client() as rpc:
                return getattr(rpc, service).status()

        with self._lock:
            if self.watch is None:
                self.watch = ServiceWatch(nameko_config(self.settings)["AMQP_URI"], status_of)
        return self.watch

    def line_layout(self):
        if self.layout is None:
            self.layout = load_layout(self.settings.line_file)
        return self.layout

    def event_relay(self):
        """The process's ``line_events`` consumer, started on first use."""
        with self._lock:
            relay = self._relay()
        if not relay.start():
            raise errors.ApiError(503, "UNAVAILABLE", "the live event feed is not connected yet")
        return self.relay

    def stream_hub(self):
        """The process's websocket StreamHub, started on first use and fed by the relay."""
        with self._lock:
            if self.hub is None:
                s = self.settings
                limits = HubLimits(max_clients=s.ws_max_clients, max_message_bytes=s.ws_max_message_bytes,
                                   send_timeout=s.ws_send_timeout_seconds)
                self.hub = StreamHub(lambda after, limit: read_log(self.db, after, limit), limits,
                                     on_count=self.metrics.ws_clients.set,
                                     on_fanout=self.metrics.ws_fanout.observe,
                                     on_overflow=self.metrics.ws_overflows.inc,
                                     authorised=self._authorised).start()
                self._relay().add_listener(self.hub)
                self.tokens.add_listener(self.hub.revoke)
                self.people.watch(self.hub.revoke)  # an ended session's streams close (4401)
        return self.hub

    def _authorised(self, credential: bytes) -> bool:
        # A session that ends later is caught by the people watch.
        return credential.startswith(SESSION_CREDENTIAL) or self.tokens.knows(credential)

    def _relay(self):
        if self.relay is None:
            self.relay = EventRelay(nameko_config(self.settings)["AMQP_URI"])
        return self.relay

    def close(self) -> None:
        for part in (self.relay, self.hub, self.sweeper, self.tokens, self.people):
            if part is not None:
                part.stop()
        if self.watch is not None:
            self.watch.close()
        for pool in (self.rpc, self.status_rpc):
            if pool is not None:
                pool.close()
