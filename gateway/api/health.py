"""Liveness (process up). Readiness and metrics are added with the gateway issue."""

from flask_smorest import Blueprint

blp = Blueprint("health", __name__, description="liveness and readiness")


@blp.route("/healthz")
@blp.response(200)
def healthz():
    return {"status": "ok"}
