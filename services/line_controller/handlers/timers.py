"""Timer messages: the timers only enqueue; these handlers do the work in the loop."""

from __future__ import annotations

from .. import messages as m
from ..task_outcomes import apply_task_failure


def schedule_tick(tick: m.ScheduleTick, ctx):
    """A periodic nudge: overdue tasks become StepTimeout messages (one per
    task, de-duplicated by id), shelved alarms whose time is up return; the
    scheduling round runs after every message."""
    ctx.db.expire_shelves()
    for task in ctx.db.overdue_tasks():
        ctx.follow_ups.append(m.new_message("StepTimeout", {"taskId": task.id},
                                            id=f"timeout-{task.id}"))


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
