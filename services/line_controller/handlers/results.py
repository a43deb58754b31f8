"""Worker results: the hardware's answer to a task, matched by correlation id = task id.

Only a task still RUNNING takes a result; anything else (finished, failed,
cancelled, or its job already terminal) is a stale result: logged and ignored.
"""

from __future__ import annotations

from .. import messages as m
from ..task_outcomes import apply_task_failure, apply_task_success


def _conclude(message, ctx, **outcome):
    """Conclude the task this result answers, or record the result as stale."""
    ctx.target = ("task", message.correlation_id)
    cid = message.correlation_id
    task = ctx.db.conclude_task(int(cid), **outcome) if cid.isdigit() else None
    if task is None:
        current = ctx.db.task(int(cid)) if cid.isdigit() else None
        ctx.outcome = "STALE"
        ctx.db.emit("WorkerResultStale", {
            "messageId": ctx.message.id, "type": ctx.message.type, "correlationId": cid,
            "taskStatus": current.status if current is not None else None})
    return task


def succeeded(result: m.ActionSucceeded, ctx):
    task = _conclude(result, ctx, result=result.data or {})
    if task is not None:
        ctx.requests.extend(apply_task_success(ctx.db, task, result.data or {}))


def failed(result: m.ActionFailed, ctx):
    task = _conclude(result, ctx, error=(result.error_code, result.error_message))
    if task is not None:
        ctx.requests.extend(apply_task_failure(ctx.db, task, result.error_code,
                                               finished_at=result.finished_at))


HANDLERS = {
    m.RobotActionSucceeded: succeeded, m.ToolActionSucceeded: succeeded, m.MachineStartSucceeded: succeeded,
    m.RobotActionFailed: failed, m.ToolActionFailed: failed, m.MachineStartFailed: failed,
}
