"""Production figures for the operator: OEE and output over a window
(``/api/stats``), the machine-state timeline (``/api/stats/timeline``) and how
often each alarm code came (``/api/stats/alarms``). Reads only; the figures
are defined in docs/stats.md and computed by ``shared.production_stats``."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import (
    QUERY_ERRORS,
    document_errors,
    read_session,
    reply,
    window_of,
)
from gateway.auth import require
from gateway.context import gateway_context
from gateway.errors import ApiError
from shared import production_stats as ps

blp = Blueprint("stats", __name__, description="production figures: OEE, timeline, alarm counts")


@blp.route("/api/stats", methods=["GET"])
@require("operator")
@blp.arguments(schemas.WindowArgsSchema, location="query")
@blp.response(200, schemas.StatsSchema)
@document_errors(blp, *QUERY_ERRORS)
def get_stats(args):
    window = window_of(args)
    with read_session() as session:
        figures = ps.production_figures(session.connection(), gateway_context().line_layout(), window,
                                        ideal_scale=ps.ideal_scale(gateway_context().settings))
    return reply(figures)


@blp.route("/api/stats/timeline", methods=["GET"])
@require("operator")
@blp.arguments(schemas.TimelineArgsSchema, location="query")
@blp.response(200, schemas.TimelineSchema)
@document_errors(blp, *QUERY_ERRORS, 404)
def get_timeline(args):
    window = window_of(args)
    equipment_id = args.get("equipmentId")
    if equipment_id is not None and equipment_id not in {e.id for e in gateway_context().line_layout().equipment}:
        raise ApiError(404, "NOT_FOUND", f"equipment {equipment_id[:64]!r} not found")
    with read_session() as session:
        return reply(ps.timeline(session.connection(), window, equipment_id, args["limit"]))


@blp.route("/api/stats/alarms", methods=["GET"])
@require("operator")
@blp.arguments(schemas.WindowArgsSchema, location="query")
@blp.response(200, schemas.AlarmCountsSchema)
@document_errors(blp, *QUERY_ERRORS)
def get_alarm_counts(args):
    window = window_of(args)
    with read_session() as session:
        return reply(ps.alarm_counts(session.connection(), window))
