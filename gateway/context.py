"""The gateway's per-app state, :class:`GatewayContext`, and the one way to reach
it: :func:`gateway_context` (settings, the plant and a :class:`~gateway.lines.LinePort`
per line, metrics, the AI job queue, people and tokens). :func:`current_line` is
the line a request is about.

The background parts (each line's relay, hub, service watch, RPC pools) start
on first use, so importing or creating an app starts nothing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from flask import Flask, current_app, g
from sqlalchemy.orm import sessionmaker

from gateway import errors, metrics
from gateway.lines import LinePort, StreamHooks
from gateway.stream_client import HubLimits
from gateway.stream_hub import StreamHub, StreamSlots
from gateway.tokens import TokenStore
from services.ai_jobs.queue import AiJobQueue
from services.ai_jobs.sweeper import ExpirySweeper
from services.identity.service import Identity
from services.identity.watch import SESSION_CREDENTIAL
from shared.config import Settings
from shared.plant import Plant, plant_of

EXTENSION = "linectl"  # the key in ``app.extensions``


def gateway_context(app: Flask | None = None) -> GatewayContext:
    """The app's :class:`GatewayContext` (``current_app``'s when no app is given)."""
    return (app or current_app).extensions[EXTENSION]


def current_line() -> LinePort:
    """The request's line: the one its path names (set by ``gateway.api.blueprint``
    or ``/ws``), else the default line."""
    return g.get("line") or gateway_context().default_line


@dataclass
class GatewayContext:
    settings: Settings
    db: sessionmaker  # read-only sessions as they come (public): the database's own checks
    rpc: object = None  # the default line's command RpcPool, when the caller hands one
    plant: Plant = None  # shared.plant.plant_of(settings) unless given
    lines: dict[str, LinePort] = None  # by line id, in the plant's order; made by __post_init__
    metrics: metrics.GatewayMetrics = None
    ai: AiJobQueue = None
    people: Identity = None  # users, sessions, sign-in (services.identity)
    tokens: TokenStore = None  # made from the settings' tokens by __post_init__
    sweeper: ExpirySweeper = None  # started by start_background() in a serving process
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _streams: dict[str, int] = field(default_factory=dict)  # open streams by line
    _revoking: bool = False  # the hubs are told of revoked tokens and ended sessions

    def __post_init__(self):
        if self.tokens is None:
            self.tokens = TokenStore(self.settings.tokens, self.settings.tokens_file)
        if self.plant is None:
            self.plant = plant_of(self.settings)
        if self.lines is None:
            self.lines = self._ports()

    def _ports(self) -> dict[str, LinePort]:
        s = self.settings
        hooks = StreamHooks(
            limits=HubLimits(max_clients=s.ws_max_clients, max_message_bytes=s.ws_max_message_bytes,
                             send_timeout=s.ws_send_timeout_seconds),
            slots=StreamSlots(s.ws_max_clients),  # one cap for the process, whatever the line
            on_count=self._count_streams,
            on_fanout=lambda seconds: self.metrics.ws_fanout.observe(seconds),
            on_overflow=lambda: self.metrics.ws_overflows.inc(),
            authorised=self._authorised, on_hub=self._hub_started)
        engine = self.db.kw["bind"]
        default = self.plant.default_line
        return {line.id: LinePort(line, default=line is default, settings=s, engine=engine, hooks=hooks,
                                  rpc_pool=self.rpc if line is default else None)
                for line in self.plant.lines}

    # -- lines --------------------------------------------------------------------

    @property
    def default_line(self) -> LinePort:
        return self.lines[self.plant.default_line.id]

    def line(self, line_id: str) -> LinePort:
        """The line ``line_id``; 404 ``NOT_FOUND`` for a line the plant does not have."""
        port = self.lines.get(line_id)
        if port is None:
            raise errors.ApiError(404, "NOT_FOUND", f"line {line_id[:64]!r} not found")
        return port

    @property
    def several_lines(self) -> bool:
        return len(self.lines) > 1

    def service_watch(self):
        """The default line's ServiceWatch."""
        return self.default_line.service_watch()

    def saw_trouble(self) -> None:
        """A database or transport error: no line's watch trusts a "fine" from before it."""
        for port in self.lines.values():
            if port.watch is not None:  # a watch not made yet has nothing cached
                port.watch.saw_trouble()

    # -- streams --------------------------------------------------------------------

    def _count_streams(self, line_id: str, count: int) -> None:
        with self._lock:
            self._streams[line_id] = count
            total = sum(self._streams.values())
        self.metrics.ws_clients.set(total)

    def _hub_started(self, _hub: StreamHub) -> None:
        with self._lock:
            if self._revoking:
                return
            self._revoking = True
        self.tokens.add_listener(self._revoke)
        self.people.watch(self._revoke)  # an ended session's streams close (4401)

    def _revoke(self, credentials) -> None:
        for port in self.lines.values():
            if port.hub is not None:
                port.hub.revoke(credentials)

    def _authorised(self, credential: bytes) -> bool:
        # A session that ends later is caught by the people watch.
        return credential.startswith(SESSION_CREDENTIAL) or self.tokens.knows(credential)

    # -- the process ------------------------------------------------------------------

    def start_background(self) -> None:
        """What a serving process runs beside its requests: the AI expiry sweeper and
        the tokens file's watch (so that streams of a revoked token close though no
        request comes)."""
        if self.sweeper is None:
            self.sweeper = ExpirySweeper(self.ai).start()
        self.tokens.watch()

    def close(self) -> None:
        for port in self.lines.values():
            port.close()
        for part in (self.sweeper, self.tokens, self.people):
            if part is not None:
                part.stop()
