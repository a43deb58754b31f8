"""Liveness (``/healthz``), readiness (``/readyz``: the database and the
line_controller answer) and Prometheus metrics (``/metrics``, see gateway.metrics)."""

from __future__ import annotations

from flask_smorest import Blueprint
from sqlalchemy import text

from gateway.api.common import context
from gateway.errors import ApiError
from shared.events import LINE_CONTROLLER

blp = Blueprint("health", __name__, description="liveness, readiness, metrics")


@blp.route("/healthz")
@blp.response(200)
def healthz():
    return {"status": "ok"}


def _check_database() -> str | None:
    try:
        with context().db() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return f"database ({type(exc).__name__})"
    return None


def line_controller_status() -> tuple[dict | None, str | None]:
    """The loop's ``status()``, or why it could not be had."""
    try:
        with context().status_pool().client() as rpc:
            return getattr(rpc, LINE_CONTROLLER).status(), None
    except ApiError as exc:
        return None, f"line_controller ({exc.message})"
    except Exception as exc:  # noqa: BLE001
        return None, f"line_controller ({type(exc).__name__}: {exc})"


@blp.route("/readyz")
@blp.response(200)
def readyz():
    down = [d for d in (_check_database(),) if d]
    _, lc_down = line_controller_status()
    if lc_down:
        down.append(lc_down)
    if down:
        raise ApiError(503, "UNAVAILABLE", "not ready: " + "; ".join(down) + " down")
    return {"status": "ready"}
