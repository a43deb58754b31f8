"""``create_app(settings)``: the Flask application factory.

Nothing runs at import time; everything the views need hangs off
``app.extensions["linectl"]`` (settings, read-only DB sessions, the RPC pool).
Blueprints, one per area, live in ``gateway/api/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, request
from flask_smorest import Api
from sqlalchemy.orm import sessionmaker

from gateway import errors
from shared.config import Settings, nameko_config
from shared.db.engine import make_engine, make_sessionmaker

MAX_BODY_BYTES = 1024 * 1024  # the contract's 1 MiB; 413 beyond


@dataclass
class GatewayContext:
    settings: Settings
    db: sessionmaker
    rpc: object  # gateway.rpc.RpcPool, created lazily by rpc_pool()
    layout: object = None

    def rpc_pool(self):
        if self.rpc is None:
            from gateway.rpc import RpcPool

            self.rpc = RpcPool(nameko_config(self.settings), timeout=self.settings.command_wait_seconds + 5)
        return self.rpc


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
    engine = make_engine(settings.database_url, read_only=True)
    app.extensions["linectl"] = GatewayContext(
        settings=settings, db=make_sessionmaker(engine), rpc=rpc_pool
    )
    api = Api(app)
    errors.register(app, api)

    @app.before_request
    def _limit_body():
        # Refuse an oversized body before any view (or auth) looks at it.
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise errors.ApiError(413, "PAYLOAD_TOO_LARGE", "request bodies are limited to 1 MiB")

    from gateway.api import register_blueprints

    register_blueprints(api)
    return app
