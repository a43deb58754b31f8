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


def ai_queue_figures() -> dict | None:
    try:
        return gateway_context().ai.figures()
    except Exception:  # noqa: BLE001 - the database is down: no AI figures this scrape
        gateway_context().service_watch().saw_trouble()
        return None


# What the alert rules need from the line's tables, in one round trip: the newest
# event's age (the primary key's last entry), the open manual actions and the
# oldest one's age, and the orders that are not finished (each by its index).
_LINE_FIGURES = text(
    "SELECT (SELECT extract(epoch FROM now() - at) FROM event_log ORDER BY seq DESC LIMIT 1),"
    " (SELECT count(*) FROM manual_action WHERE status = 'OPEN'),"
    " (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM manual_action"
    "  WHERE status = 'OPEN'),"
    " (SELECT coalesce(json_object_agg(status, n), '{}') FROM (SELECT status, count(*) AS n"
    "  FROM work_order WHERE status IN ('CREATED', 'RUNNING', 'PAUSED') GROUP BY status) o)")
OPEN_ORDER_STATUSES = ("CREATED", "RUNNING", "PAUSED")


def line_figures() -> dict | None:
    """The line's figures from the database, or None when it does not answer."""
    try:
        with gateway_context().db() as session:
            event_age, open_actions, oldest_action, orders = session.execute(_LINE_FIGURES).one()
    except Exception as exc:  # noqa: BLE001 - any failure: linectl_database_up 0
        log.info("metrics: the database did not answer: %r", exc)
        return None
    return {"lastEventAgeSeconds": None if event_age is None else float(event_age),
            "openManualActions": int(open_actions), "oldestOpenManualActionSeconds": float(oldest_action),
            "workOrders": {status: int(orders.get(status, 0)) for status in OPEN_ORDER_STATUSES}}


def line_snapshot() -> LineSnapshot:
    ai = ai_queue_figures()
    return LineSnapshot(line_controller=line_controller_status()[0],
                        hardware=service_status(HARDWARE)[0],
                        ai_jobs=ai["byStatus"] if ai else None, ai_queue=ai, database=line_figures())


def plc_down(hardware_status: dict) -> str:
    """The PLC link in a 503: where, and why the hardware service does not reach it."""
    where = f"plc at {hardware_status['plcAddress']}" if hardware_status.get("plcAddress") else "plc"
    return f"{where} ({hardware_status.get('plcError') or 'the hardware service does not reach it'})"


@blp.route("/readyz")
@blp.response(200)
def readyz():
    down = [d for d in (_check_database(),) if d]
    for service in (LINE_CONTROLLER, HARDWARE):
        status, why = service_status(service)
        if why:
            down.append(why)
        elif service == HARDWARE and not status.get("plcConnected"):
            down.append(plc_down(status))
    if down:
        raise ApiError(503, "UNAVAILABLE", "not ready: " + "; ".join(down) + " down")
    return {"status": "ready"}
