"""``create_app(settings)``: the Flask application factory.

Nothing runs at import time; everything the views need hangs off the app's
:class:`~gateway.context.GatewayContext`, reached by ``gateway_context()``
(settings, read-only DB sessions, the RPC pool, the AI job queue). Blueprints,
one per area, live in ``gateway/api/`` and are registered here, by name.

Every connection of the gateway's own runs as the PostgreSQL role
``linectl_gateway`` (``shared.db.roles``): it reads line control and writes
only the AI tables, whatever a view does. Line-control changes go by RPC to
the line_controller; AI jobs are served here, straight from PostgreSQL.
"""

from __future__ import annotations

import threading
from pathlib import Path

from flask import Flask, request, send_from_directory
from flask_smorest import Api

from gateway import errors, metrics, schemas, strict_json, ws
from gateway.api import (
    admin,
    ai,
    alarms,
    events,
    health,
    jobs,
    line,
    manual,
    orders,
    runtime,
    session,
    stats,
)
from gateway.context import EXTENSION, GatewayContext
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from shared.config import Settings
from shared.db import roles
from shared.db.engine import make_engine, make_sessionmaker

STATIC_DIR = Path(__file__).resolve().parent / "static"

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

# One blueprint per area, in registration order (the order of /openapi.json).
AREAS = (health, session, orders, jobs, line, alarms, stats, manual, events, ai, runtime, admin)


def _content_security_policy(host: str) -> str:
    host = "".join(c for c in host if c.isalnum() or c in ".-:[]")  # never echo a header verbatim
    return ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
            f" connect-src 'self' ws://{host} wss://{host}; frame-ancestors 'none'; base-uri 'none';"
            " form-action 'self'; object-src 'none'")


class GatewayApi(Api):
    # Documented error responses carry the gateway's envelope, not flask-smorest's.
    ERROR_SCHEMA = schemas.ErrorSchema


def _context(settings: Settings, rpc_pool) -> GatewayContext:
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
    ai_queue = AiJobQueue(ai_engine, AiQueueConfig.from_settings(settings))
    return GatewayContext(settings=settings, db=make_sessionmaker(engine), rpc=rpc_pool,
                          metrics=metrics.create(), ai=ai_queue, _lock=threading.Lock())


def _limit_body():
    # Refuse an oversized body before any view (or auth) looks at it.
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise errors.ApiError(413, "PAYLOAD_TOO_LARGE", "request bodies are limited to 1 MiB")


def _strict_path_and_query():
    # NUL and lone surrogates never get past the edge, whatever the route.
    why = strict_json.bad_text(request.path)
    if why:
        raise errors.ApiError(400, "VALIDATION_ERROR", f"path: {why}")
    for key, value in request.args.items(multi=True):
        why = strict_json.bad_text(key) or strict_json.bad_text(value)
        if why:
            raise errors.ApiError(400, "VALIDATION_ERROR", f"{key[:40]!s}: {why}")


def _security_headers(response):
    # The page must not be framed (clickjacking of "Confirm recovery"), run
    # no inline or foreign script, and leak nothing in the Referer.
    headers = response.headers
    headers.setdefault("Content-Security-Policy", _content_security_policy(request.host))
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("X-Frame-Options", "DENY")
    return response


def _operator_page():
    return send_from_directory(STATIC_DIR, "index.html")


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
    ctx = app.extensions[EXTENSION] = _context(settings, rpc_pool)
    api = GatewayApi(app, spec_kwargs={"components": {"securitySchemes": {
        "bearerAuth": {"type": "http", "scheme": "bearer"}}}, "security": [{"bearerAuth": []}]})
    errors.register(app, api)
    metrics.install(app, ctx.metrics, health.line_snapshot)
    app.before_request(_limit_body)
    app.before_request(_strict_path_and_query)
    app.after_request(_security_headers)
    for area in AREAS:
        api.register_blueprint(area.blp)
    ws.init_app(app)
    app.add_url_rule("/", "operator_page", _operator_page, methods=["GET"])
    return app
