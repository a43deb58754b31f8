"""Production figures for the operator: OEE and output over a window
(``/api/stats``), the machine-state timeline (``/api/stats/timeline``) and how
often each alarm code came (``/api/stats/alarms``). Reads only; the figures
are defined in docs/stats.md and computed by ``shared.production_stats``."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import (
    QUERY_ERRORS,
    query_view,
    read_session,
    reply,
    window_of,
)
from gateway.context import current_line
from gateway.errors import ApiError
from shared import production_stats as ps

blp = LineBlueprint("stats", __name__, description="production figures: OEE, timeline, alarm counts")


def _over_window(args: dict, read) -> object:
    """``read(connection, window)`` over the request's window, as the reply."""
    window = window_of(args)
    with read_session() as session:
        return reply(read(session.connection(), window))


@query_view(blp, "/stats", schemas.WindowArgsSchema, schemas.StatsSchema)
def get_stats(args):
    line = current_line()
    return _over_window(args, lambda conn, window: ps.production_figures(
        conn, line.layout, window, ideal_scale=line.ideal_scale()))


@query_view(blp, "/stats/timeline", schemas.TimelineArgsSchema, schemas.TimelineSchema, *QUERY_ERRORS, 404)
def get_timeline(args):
    window = window_of(args)
    equipment_id = args.get("equipmentId")
    if equipment_id is not None and equipment_id not in {e.id for e in current_line().layout.equipment}:
        raise ApiError(404, "NOT_FOUND", f"equipment {equipment_id[:64]!r} not found")
    with read_session() as session:
        return reply(ps.timeline(session.connection(), window, equipment_id, args["limit"]))


@query_view(blp, "/stats/alarms", schemas.WindowArgsSchema, schemas.AlarmCountsSchema)
def get_alarm_counts(args):
    return _over_window(args, ps.alarm_counts)
