"""Shifts, stops and OEE (PRODUCT.md, "Shifts, downtime and OEE"; docs/oee.md).

Per line (also under ``/api/lines/{lineId}``): ``/oee`` (by shift, day or hour),
``/stops`` and ``/stops/pareto``, ``/states`` (the state timeline with the
calendar's states), and the operator's commands, each through the line's loop
(one writer) and audited: a stop's reason, a stop split in two, planned
downtime. Plant-wide: ``/api/plant/shifts``, ``/api/plant/oee`` and the reason
tree. ``Accept: text/csv`` on ``oee`` and ``stops``. Reads come from the line's
records (``shared.oee``, ``shared.downtime``); ``/api/stats`` is untouched."""

from __future__ import annotations

from gateway import oee_schemas as s
from gateway.api.blueprint import Blueprint, LineBlueprint
from gateway.api.common import (
    check_id,
    command_view,
    parse_instant,
    query_view,
    read_session,
    reply,
    run_command,
    window_of,
)
from gateway.api.csv_reply import by_columns, csv_response, wants_csv
from gateway.auth import visible_lines
from gateway.context import current_line, gateway_context
from gateway.errors import ApiError
from gateway.lines import LinePort
from shared import downtime, oee
from shared.product_ideals import product_ideal_seconds
from shared.wire import iso

blp = LineBlueprint("oee", __name__, description="a line's states, stops and OEE")
plant_blp = Blueprint("plant_oee", __name__, url_prefix="/api", description="the plant's shifts and OEE")

OEE_COLUMNS = ("lineId", "shift", "date", "from", "to", "shiftSeconds", "plannedDowntimeSeconds",
               "plannedBusySeconds", "downSeconds", "actualProductionSeconds", "stops", "microStops",
               "microStopSeconds", "produced", "good", "scrapped", "idealSeconds", "availability", "performance",
               "quality", "oee", "mtbfSeconds", "mttrSeconds")
STOP_COLUMNS = ("lineId", "id", "equipmentId", "from", "to", "seconds", "cause", "reasonCode", "comment",
                "assignedBy", "assignedAt", "splitFrom")


def _calendar():
    return gateway_context().plant.calendar


def _microstop() -> float:
    return gateway_context().settings.microstop_seconds


def line_oee(line: LinePort, window, by: str) -> list[dict]:
    ideals = product_ideal_seconds(line.layout)
    scale = line.ideal_scale()
    ideals = {p: None if v is None else v / scale for p, v in ideals.items()}
    items = line.read(lambda session: oee.oee_items(session.connection(), _calendar(), ideals, window.start,
                                                    window.end, by, window.now, _microstop()), [])
    return [{"lineId": line.id, **item} for item in items]


def _oee_reply(window, by: str, items: list[dict], plant: list[dict], name: str):
    if wants_csv():
        return csv_response(by_columns(plant + items, OEE_COLUMNS), OEE_COLUMNS, name)
    return reply({"from": iso(window.start), "to": iso(min(window.end, window.now)), "by": by,
                  "timezone": _calendar().timezone, "items": items, "plant": plant})


@query_view(blp, "/oee", s.OeeArgsSchema, s.OeeSchema)
def get_oee(args):
    """OEE per shift, day or hour over ``from``/``to`` (default the last 8 hours),
    each item with the times and counts it is computed from."""
    window = window_of(args)
    line = current_line()
    return _oee_reply(window, args["by"], line_oee(line, window, args["by"]), [], f"oee-{line.id}")


@query_view(plant_blp, "/plant/oee", s.OeeArgsSchema, s.OeeSchema)
def get_plant_oee(args):
    """Every (visible) line's items, and the plant's per period: the lines' inputs
    added up and the figures made from those sums."""
    window, by = window_of(args), args["by"]
    items = [i for line in visible_lines() for i in line_oee(line, window, by)]
    periods: dict[tuple, list[dict]] = {}
    for item in items:
        periods.setdefault((item["from"], item["to"], item["shift"], item["date"]), []).append(item)
    plant = [{"lineId": None, "from": a, "to": b, "shift": shift, "date": day, **oee.summed(group)}
             for (a, b, shift, day), group in sorted(periods.items(), key=lambda kv: kv[0][:2])]
    return _oee_reply(window, by, items, plant, "oee-plant")


@query_view(blp, "/stops", s.StopListArgsSchema, s.StopListSchema)
def list_stops(args):
    """The stops over the window, oldest first (``unassigned=true``: those without a reason)."""
    window, line = window_of(args), current_line()
    with read_session() as session:
        found = downtime.stops(session.connection(), window.start, window.end, window.now, _microstop(),
                               args.get("unassigned"))
    items = [line.of_line(stop.to_json()) for stop in found[:args["limit"]]]
    if wants_csv():
        return csv_response(by_columns(items, STOP_COLUMNS), STOP_COLUMNS, f"stops-{line.id}")
    return reply({"items": items, "nextCursor": None, "truncated": len(found) > args["limit"]})


@query_view(blp, "/stops/pareto", s.WindowArgsSchema, s.ParetoSchema)
def get_pareto(args):
    """Time and count of the stops per reason, the most time first."""
    window = window_of(args)
    end = min(window.end, window.now)
    with read_session() as session:
        found = downtime.stops(session.connection(), window.start, window.end, window.now, _microstop())
    return reply({"from": iso(window.start), "to": iso(end), "items": downtime.pareto(found, window.start, end)})


@query_view(blp, "/states", s.WindowArgsSchema, s.StateListSchema)
def get_states(args):
    """The line's state timeline, the calendar's states laid over what the loop recorded."""
    window = window_of(args)
    with read_session() as session:
        return reply({"items": downtime.timeline(session.connection(), _calendar(), window.start, window.end,
                                                 window.now)})


def _instant(name: str, raw: str):
    return iso(parse_instant(name, raw))


@command_view(blp, "/stops/<int:stop_id>/reason", s.StopReasonSchema, s.StopSchema)
def assign_reason(body, stop_id):
    """A reason of the plant's tree (and a comment) on a stop; no count changes."""
    if _calendar().reason(body["reasonCode"]) is None:
        raise ApiError(400, "VALIDATION_ERROR", f"reasonCode: {body['reasonCode'][:64]!r} is not a reason "
                       "of the plant's tree (GET /api/plant/downtime-reasons)")
    return run_command("AssignStopReason", {"stopId": check_id(stop_id, "stop"), **body})


@command_view(blp, "/stops/<int:stop_id>/split", s.SplitStopSchema, s.SplitResultSchema)
def split_stop(body, stop_id):
    """The stop in two at ``at``: both keep the cause and the reason it had."""
    return run_command("SplitStop", {"stopId": check_id(stop_id, "stop"), "at": _instant("at", body["at"])})


@command_view(blp, "/planned-downtime", s.PlannedDowntimeSchema, s.PlannedDowntimeResultSchema)
def add_planned_downtime(body):
    """Planned downtime beside the calendar (maintenance, a changeover): not planned busy time."""
    return run_command("AddPlannedDowntime", {"from": _instant("from", body["from_"]),
                                              "to": _instant("to", body["to"]), "reason": body["reason"]})


@query_view(plant_blp, "/plant/shifts", s.OeeArgsSchema(only=("from_", "to")), s.ShiftListSchema)
def get_shifts(args):
    """The shift instances over ``from``/``to`` (default the last 8 hours; the whole
    instances that overlap it), computed in the plant's time zone."""
    window = window_of(args)
    calendar = _calendar()
    return reply({"timezone": calendar.timezone,
                  "items": [i.to_json() for i in calendar.instances(window.start, window.end)]})


@query_view(plant_blp, "/plant/downtime-reasons", None, s.ReasonListSchema, 401, 403)
def get_reasons():
    """The plant's reason tree (parents before children), with names in zh-CN and en."""
    return reply({"items": [r.to_json() for r in _calendar().reason_tree]})

