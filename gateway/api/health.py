"""Liveness (``/healthz``), readiness (``/readyz``: the database answers, the
line_controller and the hardware service consume their queues and answer
``status()``, and the hardware reaches the PLC; a 503 names every part that is
down) and the data behind Prometheus metrics (``/metrics``, see
gateway.metrics). Presence and status come from ``gateway.service_watch``:
cached for a second at most and shared by concurrent callers, so probes and
scrapes cost at most one status RPC per service per interval, and a killed
service shows at once. A database error seen here makes the watch ask afresh:
after a PostgreSQL restart the services' transport sessions are new, or not
back yet, whatever the cache says."""

from __future__ import annotations

import logging

from sqlalchemy import text

from gateway.api.blueprint import Blueprint
from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.metrics import LineSnapshot
from shared.events import HARDWARE, LINE_CONTROLLER

log = logging.getLogger(__name__)

blp = Blueprint("health", __name__, description="liveness, readiness, metrics")


@blp.route("/healthz")
@blp.response(200)
def healthz():
    return {"status": "ok"}


def _check_database() -> str | None:
    try:
        with gateway_context().db() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        log.info("database check failed: %r", exc)
        gateway_context().service_watch().saw_trouble()
        return "database (unreachable)"
    return None


def service_status(service: str) -> tuple[dict | None, str | None]:
    """A service's ``status()`` (cached, shared), or why it could not be had."""
    return gateway_context().service_watch().status(service)


def line_controller_status() -> tuple[dict | None, str | None]:
    return service_status(LINE_CONTROLLER)


def ai_job_counts() -> dict[str, int] | None:
    try:
        return gateway_context().ai.counts()
    except Exception:  # noqa: BLE001 - the database is down: no AI figures this scrape
        gateway_context().service_watch().saw_trouble()
        return None


def line_snapshot() -> LineSnapshot:
    return LineSnapshot(line_controller=line_controller_status()[0],
                        hardware=service_status(HARDWARE)[0], ai_jobs=ai_job_counts())


@blp.route("/readyz")
@blp.response(200)
def readyz():
    down = [d for d in (_check_database(),) if d]
    for service in (LINE_CONTROLLER, HARDWARE):
        status, why = service_status(service)
        if why:
            down.append(why)
        elif service == HARDWARE and not status.get("plcConnected"):
            down.append("plc (the hardware service does not reach it)")
    if down:
        raise ApiError(503, "UNAVAILABLE", "not ready: " + "; ".join(down) + " down")
    return {"status": "ready"}
