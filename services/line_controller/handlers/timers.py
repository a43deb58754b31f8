"""Timer messages: the timers only enqueue; these handlers do the work in the loop."""

from __future__ import annotations

from datetime import timedelta

from .. import manual_actions as ma
from .. import messages as m
from ..machine_faults import stopped_pieces, suspend_stopped_cycles
from ..task_outcomes import apply_task_failure


def schedule_tick(tick: m.ScheduleTick, ctx):
    """A periodic nudge: overdue tasks become StepTimeout messages (one per
    task, de-duplicated by id), shelved alarms whose time is up return; the
    scheduling round runs after every message."""
    ctx.db.expire_shelves()
    _overdue_cycles(ctx)
    for task in ctx.db.overdue_tasks():
        ctx.follow_ups.append(m.new_message("StepTimeout", {"taskId": task.id},
                                            id=f"timeout-{task.id}"))


def _overdue_cycles(ctx) -> None:
    """A machine whose cycle runs past ``cycle_overdue_factor`` × its cycleSeconds
    (a cycle that never reports done): an alarm and the operator's question
    (CYCLE_OVERDUE). Nothing moves by itself; the answer aborts the cycle first.
    Only time the loop could hear the cycle's end counts (``ctx.heard_since``).
    A bound not passed yet is left in ``ctx.cycle_bounds`` (when the tick is due)."""
    if ctx.recovering:
        return
    db = ctx.db
    for equipment_id, spec, bound, passes in open_cycle_bounds(db, ctx.layout, ctx.cycle_overdue_factor,
                                                               ctx.heard_since):
        if db.now <= passes:
            ctx.cycle_bounds.append(passes)
            continue
        if not stopped_pieces(db, equipment_id):
            continue
        alarm = db.raise_alarm(ma.CYCLE_OVERDUE, f"{equipment_id}: no cycle has ended for more than "
                               f"{bound:g} s ({ctx.cycle_overdue_factor:g} × its {spec.cycle_seconds:g} s cycle)",
                               equipment_id=equipment_id,
                               facts={"equipment_id": equipment_id, "bound_seconds": bound,
                                      "factor": ctx.cycle_overdue_factor, "cycle_seconds": spec.cycle_seconds})
        suspend_stopped_cycles(db, equipment_id, kind=ma.CYCLE_OVERDUE, alarm_id=alarm.id,
                               reason=f"over {bound:g} s")


def open_cycle_bounds(db, layout, factor: float, heard_since):
    """Per machine with cycles open: (its id, spec, overdue bound in seconds, the
    moment the bound passes). Its clock runs from its oldest open cycle's request
    or its last cycle's end, and from no earlier than ``heard_since``."""
    for row in db.machines_without_progress():
        try:
            spec = layout.equipment_by_id(row.equipment_id)
        except KeyError:  # no longer in the layout
            continue
        bound = factor * spec.cycle_seconds
        since = max(row.since, heard_since) if heard_since else row.since
        yield row.equipment_id, spec, bound, since + timedelta(seconds=bound)


def step_timeout(evt: m.StepTimeout, ctx):
    ctx.target = ("task", str(evt.task_id))
    task = ctx.db.conclude_task(evt.task_id, error=(
        "ACTION_TIMEOUT", f"no result within the deadline of task {evt.task_id}"))
    if task is None:  # answered (or cancelled) meanwhile
        ctx.outcome = "STALE"
        return None
    ctx.requests.extend(apply_task_failure(ctx.db, task, "ACTION_TIMEOUT"))
    return None


HANDLERS = {m.ScheduleTick: schedule_tick, m.StepTimeout: step_timeout}
