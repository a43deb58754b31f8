"""``create_app(settings)``: the Flask application factory.

Nothing runs at import time; everything the views need hangs off the app's
:class:`~gateway.context.GatewayContext`, reached by ``gateway_context()``
(settings, the plant and each line's parts, the AI job queue). Blueprints,
one per area, live in ``gateway/api/`` and are registered here, by name; a
line-control area twice, at ``/api`` (the default line) and at
``/api/lines/<lineId>`` (``gateway.api.blueprint.register_line_area``).

Every connection of the gateway's own runs as the PostgreSQL role
``linectl_gateway`` (``shared.db.roles``): it reads line control and writes
only the AI tables, whatever a view does. Line-control changes go by RPC to
the line_controller; AI jobs are served here, straight from PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from apispec import APISpec
from flask import Flask, make_response, request
from flask_smorest import Api

from gateway import errors, metrics, schemas, strict_json, ws
from gateway.api import (
    admin,
    ai,
    alarms,
    audit,
    events,
    health,
    jobs,
    line,
    manual,
    oee,
    orders,
    pieces,
    plant,
    runtime,
    session,
    stats,
)
from gateway.api.blueprint import register_line_area
from gateway.context import EXTENSION, GatewayContext, gateway_context
from gateway.headers import MAX_BODY_BYTES, security_headers
from gateway.runtime_lean import RuntimeLeanPath
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from services.identity.service import Identity
from shared.config import Settings
from shared.db import roles
from shared.db.engine import make_engine, make_sessionmaker
from shared.plant import plant_of

STATIC_DIR = Path(__file__).resolve().parent / "static"

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
AREAS = (health, session, plant, orders, jobs, line, alarms, stats, manual, events, pieces, oee, ai, runtime,
         admin, audit)
# The line-control areas: each also under /api/lines/<lineId>.
LINE_AREAS = (orders, jobs, line, alarms, stats, manual, events, pieces, oee)


class GatewayApi(Api):
    """flask-smorest's Api, building the OpenAPI document once per process.

    The document depends on the code alone (not on settings or the plant), and
    building it is most of ``create_app``'s time: every schema resolved, every
    line-control path copied for ``/api/lines/{lineId}``. A process that makes
    several apps (the suite makes hundreds) registers only the routes after the
    first, and serves the first one's document, which nothing changes."""

    # Documented error responses carry the gateway's envelope, not flask-smorest's.
    ERROR_SCHEMA = schemas.ErrorSchema
    _document: ClassVar[APISpec | None] = None

    def register_blueprint(self, blp, *, parameters=None, **options):
        if GatewayApi._document is None:
            return super().register_blueprint(blp, parameters=parameters, **options)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][options.get("name", blp.name)] = self
        self._app.register_blueprint(blp, **options)

    def finish_document(self) -> None:
        """After the last blueprint: this app serves the process's one document."""
        if GatewayApi._document is None:
            GatewayApi._document = self.spec
        self.spec = GatewayApi._document


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
    # People (sign-in, sessions, audit) share the AI pool: short writes of the gateway's own.
    return GatewayContext(settings=settings, db=make_sessionmaker(engine), rpc=rpc_pool, plant=plant_of(settings),
                          metrics=metrics.create(), ai=ai_queue, people=Identity(ai_engine, settings))


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


# Under TLS (LINECTL_TLS_CERT/KEY) browsers keep to HTTPS for a year.
HSTS = "max-age=31536000"


def _security_headers(response):
    for name, value in security_headers(request.host):
        response.headers.setdefault(name, value)
    if gateway_context().settings.tls:
        response.headers.setdefault("Strict-Transport-Security", HSTS)
    return response


# The page's languages (gateway/static/i18n/<tag>.json), the first the default.
PAGE_LANGUAGES = ("en", "zh-CN")


def page_language(accept_language) -> str:
    """The page's language for an ``Accept-Language`` header: the first range
    (by quality) that is Chinese or English; any Chinese reads 简体中文 here."""
    for tag, _quality in accept_language:
        primary = tag.split("-")[0].lower()
        if primary == "zh":
            return "zh-CN"
        if primary == "en":
            return "en"
    return PAGE_LANGUAGES[0]


def _operator_page():
    # The page picks its language itself (?lang=, then the one remembered in the
    # browser); it starts from <html lang>, set here from Accept-Language. Read
    # each time: a few kB, and an edited page shows at once.
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    language = page_language(request.accept_languages)
    response = make_response(html.replace('<html lang="en">', f'<html lang="{language}">', 1))
    response.headers["Cache-Control"] = "no-cache"
    response.vary.add("Accept-Language")
    return response


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
    metrics.install(app, ctx.metrics, health.scrape_snapshot)
    app.before_request(_limit_body)
    app.before_request(_strict_path_and_query)
    app.after_request(_security_headers)
    app.after_request(audit.audit_command)
    for area in AREAS:
        if area in LINE_AREAS:
            register_line_area(api, area.blp)
        else:
            api.register_blueprint(area.blp)
    api.register_blueprint(pieces.plant_blp)  # GET /api/plant/pieces: a serial on every line
    api.register_blueprint(oee.plant_blp)  # GET /api/plant/shifts, /api/plant/oee, the reason tree
    api.finish_document()
    ws.init_app(app)
    app.add_url_rule("/", "operator_page", _operator_page, methods=["GET"])
    # The runtimes' four hot POSTs skip Flask (gateway.runtime_lean); the rest,
    # and the OpenAPI document of all, stay Flask's.
    app.wsgi_app = RuntimeLeanPath(app.wsgi_app, ctx)
    return app
