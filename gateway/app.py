"""``create_app(settings)``: the Flask application factory.

Nothing runs at import time; everything the views need hangs off
``app.extensions["linectl"]`` (settings, read-only DB sessions, the RPC pool,
the AI job queue). Blueprints, one per area, live in ``gateway/api/``.

Every connection of the gateway's own runs as the PostgreSQL role
``linectl_gateway`` (``shared.db.roles``): it reads line control and writes
only the AI tables, whatever a view does. Line-control changes go by RPC to
the line_controller; AI jobs are served here, straight from PostgreSQL.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from flask import Flask, request, send_from_directory
from flask_smorest import Api
from sqlalchemy.orm import sessionmaker

from gateway import errors, metrics, schemas, strict_json
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from services.ai_jobs.sweeper import ExpirySweeper
from shared.config import Settings, nameko_config
from shared.db import roles
from shared.db.engine import make_engine, make_sessionmaker
from shared.layout import load_layout

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATUS_RPC_TIMEOUT = 2.0  # /readyz and /metrics must answer fast when the loop is down

MAX_BODY_BYTES = 1024 * 1024  # the contract's 1 MiB; 413 beyond
# AI requests are one short transaction each: a fixed pool per process serves
# many threads; a request that cannot get a connection in time gets 503. No
# overflow: overflow connections are opened and closed per request under load,
# and a backend start costs more than the request (measured: the 50-runtime
# rate halved with 10 + 10 overflow).
AI_POOL_SIZE = 16
AI_POOL_OVERFLOW = 0
AI_POOL_TIMEOUT = 5.0
# The read-only engine (REST reads, /api/stats): a longer read is cancelled (503).
READ_STATEMENT_TIMEOUT_MS = 10_000


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
    sweeper: ExpirySweeper = None  # started by start_background() in a serving process
    _lock: threading.Lock = None

    def start_background(self) -> None:
        """What a serving process runs beside its requests: the AI expiry sweeper."""
        if self.sweeper is None:
            self.sweeper = ExpirySweeper(self.ai).start()

    def rpc_pool(self):
        if self.rpc is None:
            from gateway.rpc import RpcPool

            self.rpc = RpcPool(nameko_config(self.settings), timeout=self.settings.command_wait_seconds + 5)
        return self.rpc

    def status_pool(self):
        if self.status_rpc is None:
            from gateway.rpc import RpcPool

            self.status_rpc = RpcPool(nameko_config(self.settings), size=2, timeout=STATUS_RPC_TIMEOUT)
        return self.status_rpc

    def service_watch(self):
        """Presence and cached status of the services (``/readyz``, ``/metrics``, commands)."""
        from gateway.service_watch import ServiceWatch

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
        from gateway.stream_hub import HubLimits, StreamHub
        from gateway.ws import read_log

        with self._lock:
            if self.hub is None:
                s = self.settings
                limits = HubLimits(max_clients=s.ws_max_clients, max_message_bytes=s.ws_max_message_bytes,
                                   send_timeout=s.ws_send_timeout_seconds)
                self.hub = StreamHub(lambda after, limit: read_log(self.db, after, limit), limits,
                                     on_count=self.metrics.ws_clients.set,
                                     on_fanout=self.metrics.ws_fanout.observe).start()
                self._relay().add_listener(self.hub)
        return self.hub

    def _relay(self):
        from gateway.relay import EventRelay

        if self.relay is None:
            self.relay = EventRelay(nameko_config(self.settings)["AMQP_URI"])
        return self.relay

    def close(self) -> None:
        for part in (self.relay, self.hub, self.sweeper):
            if part is not None:
                part.stop()
        if self.watch is not None:
            self.watch.close()
        for pool in (self.rpc, self.status_rpc):
            if pool is not None:
                pool.close()


def _content_security_policy(host: str) -> str:
    host = "".join(c for c in host if c.isalnum() or c in ".-:[]")  # never echo a header verbatim
    return ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
            f" connect-src 'self' ws://{host} wss://{host}; frame-ancestors 'none'; base-uri 'none';"
            " form-action 'self'; object-src 'none'")


class GatewayApi(Api):
    # Documented error responses carry the gateway's envelope, not flask-smorest's.
    ERROR_SCHEMA = schemas.ErrorSchema


def create_app(settings: Settings, *, rpc_pool=None) -> Flask:
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url")
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    app.config.update(
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        API_TITLE="linectl",
        API_VERSION="1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        JSON_SORT_KEYS=False,
    )
    role = settings.db_role(roles.GATEWAY)
    # A read that runs longer than this is cancelled (503): no request, however
    # wide its window or whatever lock it meets, holds a connection for longer.
    engine = make_engine(settings.database_url, read_only=True, role=role,
                         statement_timeout_ms=READ_STATEMENT_TIMEOUT_MS)
    # No pre-ping on the AI pool: it would add a round trip to every request. A
    # connection that died (PostgreSQL restarted) fails its request with 503,
    # and SQLAlchemy then discards the whole pool, so the next request is served.
    ai_engine = make_engine(settings.database_url, role=role, pool_size=AI_POOL_SIZE,
                            max_overflow=AI_POOL_OVERFLOW, pool_timeout=AI_POOL_TIMEOUT,
                            pool_pre_ping=False, pool_recycle=3600)
    ai = AiJobQueue(ai_engine, AiQueueConfig.from_settings(settings))
    ctx = GatewayContext(settings=settings, db=make_sessionmaker(engine), rpc=rpc_pool,
                         metrics=metrics.create(), ai=ai, _lock=threading.Lock())
    app.extensions["linectl"] = ctx
    api = GatewayApi(app, spec_kwargs={"components": {"securitySchemes": {
        "bearerAuth": {"type": "http", "scheme": "bearer"}}}, "security": [{"bearerAuth": []}]})
    errors.register(app, api)

    from gateway.api.health import line_snapshot

    metrics.install(app, ctx.metrics, line_snapshot)

    @app.before_request
    def _limit_body():
        # Refuse an oversized body before any view (or auth) looks at it.
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise errors.ApiError(413, "PAYLOAD_TOO_LARGE", "request bodies are limited to 1 MiB")

    @app.before_request
    def _strict_path_and_query():
        # NUL and lone surrogates never get past the edge, whatever the route.
        why = strict_json.bad_text(request.path)
        if why:
            raise errors.ApiError(400, "VALIDATION_ERROR", f"path: {why}")
        for key, value in request.args.items(multi=True):
            why = strict_json.bad_text(key) or strict_json.bad_text(value)
            if why:
                raise errors.ApiError(400, "VALIDATION_ERROR", f"{key[:40]!s}: {why}")

    @app.after_request
    def _security_headers(response):
        # The page must not be framed (clickjacking of "Confirm recovery"), run
        # no inline or foreign script, and leak nothing in the Referer.
        headers = response.headers
        headers.setdefault("Content-Security-Policy", _content_security_policy(request.host))
        headers.setdefault("X-Content-Type-Options", "nosniff")
        headers.setdefault("Referrer-Policy", "no-referrer")
        headers.setdefault("X-Frame-Options", "DENY")
        return response

    from gateway.api import register_blueprints

    register_blueprints(api)

    from gateway import ws

    ws.init_app(app)

    @app.get("/")
    def operator_page():
        return send_from_directory(STATIC_DIR, "index.html")

    return app
