"""Worker results: the hardware's answer to a task, matched by correlation id = task id.

Only a task still RUNNING takes a result; anything else (finished, failed,
cancelled, or its job already terminal) is a stale result: logged and ignored.
"""

from __future__ import annotations

import dataclasses

from shared import events as ev

from .. import consistency_checks as r
from .. import messages as m
from ..task_outcomes import apply_task_failure, apply_task_success
from . import recovery


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
    if result.error_code == ev.OUTCOME_UNKNOWN:
        return _outcome_unknown(result, ctx)
    task = _conclude(result, ctx, error=(result.error_code, result.error_message))
    if task is not None and not recovery.piece_not_at_source(ctx.db, task, result.error_code):
        ctx.requests.extend(apply_task_failure(ctx.db, task, result.error_code,
                                               finished_at=result.finished_at))


def _outcome_unknown(result: m.ActionFailed, ctx):
    """The PLC took the action, then came back without it (it restarted): sent again
    if that is harmless (a SCAN with its piece in place), else where the pieces are
    is for the operator to say, with the same question as after a restart of ours
    (CONFIRM: it did not happen; ACTION_DONE: it did; ...)."""
    ctx.target = ("task", result.correlation_id)
    cid = result.correlation_id
    task = ctx.db.task(int(cid)) if cid.isdigit() else None
    if task is None or task.status != "RUNNING":
        ctx.outcome = "STALE"
        return None
    (finding,) = r.tasks_with_unknown_outcome([r.TaskRow(task.id, task.kind, task.status, task.job_id,
                                                         task.equipment_id)])
    finding = dataclasses.replace(finding, text=(
        f"Task {task.id} ({task.kind}) was acknowledged by the PLC, then the PLC came back without it "
        "(it restarted, or the link stayed down past the action's deadline); whether it finished is unknown."))
    recovery.outcome_unknown(ctx.db, task, finding)
    return None


HANDLERS = {
    m.RobotActionSucceeded: succeeded, m.ToolActionSucceeded: succeeded, m.MachineStartSucceeded: succeeded,
    m.RobotActionFailed: failed, m.ToolActionFailed: failed, m.MachineStartFailed: failed,
    m.MachineAbortSucceeded: succeeded, m.MachineAbortFailed: failed,
}
