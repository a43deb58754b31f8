"""Liveness (``/healthz``), readiness (``/readyz``: the database answers, and
for every line of the plant its line_controller and hardware service consume
their queues and answer ``status()``, and its hardware reaches its PLC; a 503
names every part that is down, and in a plant of several lines the line it
belongs to) and the data behind Prometheus metrics (``/metrics``, see
gateway.metrics). Presence and status come from each line's
``gateway.service_watch``: cached for a second at most and shared by
concurrent callers, so probes and scrapes cost at most one status RPC per
service per interval, and a killed service shows at once. A database error
seen here makes the watches ask afresh: after a PostgreSQL restart the
services' transport sessions are new, or not back yet, whatever the cache
says."""

from __future__ import annotations

import logging

from sqlalchemy import text

from gateway.api.blueprint import Blueprint
from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.lines import LinePort
from gateway.metrics import LineSnapshot, ScrapeSnapshot

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
        gateway_context().saw_trouble()
        return "database (unreachable)"
    return None


def ai_queue_figures() -> dict | None:
    try:
        return gateway_context().ai.figures()
    except Exception:  # noqa: BLE001 - the database is down: no AI figures this scrape
        gateway_context().saw_trouble()
        return None


# What the alert rules need from a line's tables, in one round trip: the newest
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


def line_figures(line: LinePort) -> dict | None:
    """The line's figures from the database, or None when it does not answer."""
    try:
        with line.db() as session:
            event_age, open_actions, oldest_action, orders = session.execute(_LINE_FIGURES).one()
    except Exception as exc:  # noqa: BLE001 - any failure: no figures of this line this scrape
        log.info("metrics: the database did not answer for line %s: %r", line.id, exc)
        return None
    return {"lastEventAgeSeconds": None if event_age is None else float(event_age),
            "openManualActions": int(open_actions), "oldestOpenManualActionSeconds": float(oldest_action),
            "workOrders": {status: int(orders.get(status, 0)) for status in OPEN_ORDER_STATUSES}}


# The northbound publisher's row of a line (services.uns, docs/uns.md) and the log's newest seq.
_UNS_FIGURES = text(
    "SELECT n.acked_seq, n.connected AND coalesce(n.heartbeat_at > now() - make_interval(secs => :stale), false),"
    " n.messages, n.purged_unpublished, (SELECT coalesce(max(seq), 0) FROM event_log)"
    " FROM public.uns_node n WHERE n.line_id = :line")
UNS_HEARTBEAT_STALE_SECONDS = 15  # a publisher that has not written its node's row for this long is gone


def uns_figures(line: LinePort) -> dict | None:
    """What the publisher stored of the line: None without a publisher (or a database)."""
    try:
        with line.db() as session:
            row = session.execute(_UNS_FIGURES, {"line": line.id, "stale": UNS_HEARTBEAT_STALE_SECONDS}).one_or_none()
    except Exception as exc:  # noqa: BLE001 - any failure: no publisher figures of this line this scrape
        log.info("metrics: no publisher figures for line %s: %r", line.id, exc)
        return None
    if row is None:
        return None
    acked, connected, messages, purged, newest = row
    return {"connected": bool(connected), "ackedSeq": int(acked), "backlog": max(0, int(newest) - int(acked)),
            "messages": int(messages), "purgedUnpublished": int(purged)}


def line_snapshot(line: LinePort, labelled: bool) -> LineSnapshot:
    return LineSnapshot(line_controller=line.service_status(line.names.line_controller)[0],
                        hardware=line.service_status(line.names.hardware)[0],
                        database=line_figures(line), line_id=line.id if labelled else None,
                        uns=uns_figures(line) if gateway_context().settings.mqtt_enabled else None)


def scrape_snapshot() -> ScrapeSnapshot:
    """Every line's snapshot (a ``line`` label on each series when the plant has several)."""
    ctx = gateway_context()
    ai = ai_queue_figures()
    return ScrapeSnapshot(lines=[line_snapshot(line, ctx.several_lines) for line in ctx.lines.values()],
                          ai_jobs=ai["byStatus"] if ai else None, ai_queue=ai)


def plc_down(hardware_status: dict) -> str:
    """The PLC link in a 503: where, and why the hardware service does not reach it."""
    where = f"plc at {hardware_status['plcAddress']}" if hardware_status.get("plcAddress") else "plc"
    return f"{where} ({hardware_status.get('plcError') or 'the hardware service does not reach it'})"


def line_down(line: LinePort) -> list[str]:
    """What of the line is down: its services by name, or its PLC link."""
    down = []
    for service in (line.names.line_controller, line.names.hardware):
        status, why = line.service_status(service)
        if why:
            down.append(why)
        elif service == line.names.hardware and not status.get("plcConnected"):
            down.append(plc_down(status))
    return down


@blp.route("/readyz")
@blp.response(200)
def readyz():
    ctx = gateway_context()
    down = [d for d in (_check_database(),) if d]
    for line in ctx.lines.values():
        # In a plant, each part down is named with its line.
        down += [f"line {line.id}: {why}" if ctx.several_lines else why for why in line_down(line)]
    if down:
        raise ApiError(503, "UNAVAILABLE", "not ready: " + "; ".join(down) + " down")
    return {"status": "ready"}
