"""The plant above its lines: ``GET /api/lines`` (each line at a glance: its
controller, its PLC link, what is open on it), ``GET /api/lines/{lineId}``,
and ``GET /api/plant/stats`` (the plant's output over a window, with each
line's; the plant's counts are the sums of its lines'). Read-only: each line's
figures come from its own tables, read as the line views read them
(``gateway.lines``). A user limited to lines sees only theirs."""

from __future__ import annotations

from sqlalchemy import func, select, text

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import document_errors, query_view, reply, window_of
from gateway.api.health import UNS_HEARTBEAT_STALE_SECONDS
from gateway.auth import may_see_line, require, visible_lines
from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.event_log import newest_seq
from gateway.lines import LinePort
from shared import production_stats as ps
from shared.db.models import ALARM_ACTIVE, WORK_ORDER_TERMINAL, Alarm, ManualAction, WorkOrder
from shared.production_stats import Window
from shared.wire import iso

blp = Blueprint("plant", __name__, url_prefix="/api", description="the plant: its lines and their figures")

# What is open on a line, in one round trip: its orders not finished, its active
# alarms (the list the page shows: shelved ones are hidden), its open manual actions.
_OPEN_ON_LINE = select(
    select(func.count()).select_from(WorkOrder).where(WorkOrder.status.not_in(WORK_ORDER_TERMINAL))
    .scalar_subquery(),
    select(func.count()).select_from(Alarm).where(Alarm.status.in_(ALARM_ACTIVE)).scalar_subquery(),
    select(func.count()).select_from(ManualAction).where(ManualAction.status == "OPEN").scalar_subquery(),
)
OUTPUT_FIGURES = ("completed", "scrapped", "throughputPerHour", "scrapRate")


def line_summary(line: LinePort) -> dict:
    """One line at a glance. Its controller is UP while it runs (consumes its
    queue): the check a command passes before it is sent, so a card never says
    DOWN while commands go through, nor for a ``status()`` slow to answer. The
    PLC link, and the identity its PLC published, are the hardware service's
    ``status()`` (the watch's, cached)."""
    controller = line.service_watch().consumers(line.names.line_controller)
    hardware, _ = line.service_status(line.names.hardware)
    orders, alarms, actions = line.read(lambda session: session.execute(_OPEN_ON_LINE).one(), (0, 0, 0))
    return {"id": line.id, "name": line.line.name,
            "controller": "UP" if controller else "DOWN",
            "plc": "CONNECTED" if hardware and hardware.get("plcConnected") else "DISCONNECTED",
            "plcIdentity": (hardware or {}).get("plcIdentity"),
            "activeOrders": int(orders), "openAlarms": int(alarms), "openManualActions": int(actions)}


@blp.route("/lines", methods=["GET"])
@require("operator")
@blp.response(200, schemas.page_of(schemas.LineSummarySchema))
@document_errors(blp, 401, 403)
def list_lines():
    """The plant's lines, the default line first (a user limited to lines: theirs)."""
    return reply({"items": [line_summary(line) for line in visible_lines()], "nextCursor": None})


@blp.route("/lines/<lineId>", methods=["GET"])
@require("operator")
@blp.response(200, schemas.LineSummarySchema)
@document_errors(blp, 401, 403, 404)
def get_line_summary(lineId):  # the contract's name, as in every line path
    line = gateway_context().line(lineId)
    if not may_see_line(line.id):
        raise ApiError(403, "FORBIDDEN", f"line {line.id} is not one of your lines")
    return reply(line_summary(line))


def line_output(line: LinePort, window: Window) -> dict:
    """A line's output over the window: ``/api/lines/{lineId}/stats``' ``line`` figures."""
    figures = line.read(lambda session: ps.production_figures(session.connection(), line.layout, window,
                                                               ideal_scale=line.ideal_scale())["line"],
                        {"completed": 0, "scrapped": 0, "throughputPerHour": None, "scrapRate": None})
    return {"id": line.id, **{key: figures[key] for key in OUTPUT_FIGURES}}


def plant_output(lines: list[dict]) -> dict:
    """The plant's figures from its lines': counts and rates add up (the lines run
    side by side); the scrap rate is the plant's scrapped share."""
    completed = sum(line["completed"] for line in lines)
    scrapped = sum(line["scrapped"] for line in lines)
    rates = [line["throughputPerHour"] for line in lines if line["throughputPerHour"] is not None]
    finished = completed + scrapped
    return {"completed": completed, "scrapped": scrapped,
            "throughputPerHour": round(sum(rates), 3) if rates else None,
            "scrapRate": round(scrapped / finished, 4) if finished else None}


@query_view(blp, "/plant/stats", schemas.WindowArgsSchema, schemas.PlantStatsSchema)
def get_plant_stats(args):
    """Output over ``from``/``to`` (as ``/api/stats``): the plant's and each line's."""
    window = window_of(args)
    lines = [line_output(line, window) for line in visible_lines()]
    return reply({"from": iso(window.start), "to": iso(window.end), "plant": plant_output(lines), "lines": lines})


_UNS_NODES = text("SELECT line_id, acked_seq, connected, heartbeat_at > now() - make_interval(secs => :stale)"
                  " AS fresh FROM uns_node")


def _published_of(session) -> tuple[int, dict]:
    """The line's newest seq, and the publisher's node rows by line."""
    nodes = session.execute(_UNS_NODES, {"stale": UNS_HEARTBEAT_STALE_SECONDS})
    return newest_seq(session), {r.line_id: r for r in nodes}


@blp.route("/plant/uns", methods=["GET"])
@require("admin")
@blp.response(200, schemas.UnsStatusSchema)
@document_errors(blp, 401, 403)
def get_plant_uns():
    """The northbound publisher (docs/uns.md): whether every line's node is connected to
    the broker, and per line how far the broker has acknowledged its event log."""
    settings = gateway_context().settings
    lines, connected = [], settings.mqtt_enabled
    for line in gateway_context().lines.values():
        log_seq, nodes = line.read(_published_of, (0, {}))
        node = nodes.get(line.id)
        connected = connected and node is not None and bool(node.connected and node.fresh)
        published = int(node.acked_seq) if node is not None else None
        lines.append({"id": line.id, "publishedSeq": published, "logSeq": int(log_seq),
                      "backlog": max(0, log_seq - published) if published is not None else None})
    return reply({"connected": connected, "format": settings.mqtt_format if settings.mqtt_enabled else None,
                  "lines": lines})
