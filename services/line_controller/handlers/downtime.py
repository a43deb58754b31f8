"""The operator's word on downtime: a stop's reason, a stop split in two,
planned downtime (:mod:`..downtime_messages`). None changes a count: only the
stops' reasons, or the plan beside the calendar."""

from __future__ import annotations

from .. import downtime_messages as dm
from ..dbstate.line_tracking import stop_json
from ..payloads import instant


def assign_stop_reason(cmd: dm.AssignStopReason, ctx):
    ctx.target = ("stop", str(cmd.stop_id))
    return stop_json(ctx.db.assign_stop_reason(cmd.stop_id, cmd.reason_code, cmd.comment, ctx.actor))


def split_stop(cmd: dm.SplitStop, ctx):
    ctx.target = ("stop", str(cmd.stop_id))
    first, second = ctx.db.split_stop(cmd.stop_id, instant("at", cmd.at), ctx.actor)
    return {"id": first.id, "stops": [stop_json(first), stop_json(second)]}


def add_planned_downtime(cmd: dm.AddPlannedDowntime, ctx):
    planned = ctx.db.add_planned_downtime(instant("from", cmd.start), instant("to", cmd.end),
                                          cmd.reason.strip(), ctx.actor)
    ctx.target = ("planned_downtime", str(planned["id"]))
    return planned


HANDLERS = {dm.AssignStopReason: assign_stop_reason, dm.SplitStop: split_stop,
            dm.AddPlannedDowntime: add_planned_downtime}
