"""Worker results: the hardware's answer to a task, matched by correlation id = task id.

Only a task still RUNNING takes a result; anything else (finished, failed,
cancelled, or its job already terminal) is a stale result: logged and ignored.
"""

from __future__ import annotations

from .. import messages as m
from ..actions import apply_task_failure, apply_task_success


def _running_task(result, ctx):
    ctx.target = ("task", result.correlation_id)
    task_id = int(result.correlation_id) if result.correlation_id.isdigit() else None
    task = ctx.db.task_with_job_state(task_id) if task_id is not None else None
    if task is None or task.status != "RUNNING" or task.jobs_finished:
        ctx.outcome = "STALE"
        ctx.db.emit("WorkerResultStale", {
            "messageId": ctx.message.id, "type": ctx.message.type,
            "correlationId": result.correlation_id,
            "taskStatus": task.status if task is not None else None})
        return None
    return task


def succeeded(result, ctx):
    task = _running_task(result, ctx)
    if task is not None:
        apply_task_success(ctx.db, task, result.data or {})


def failed(result, ctx):
    task = _running_task(result, ctx)
    if task is not None:
        apply_task_failure(ctx.db, task, result.error_code, result.error_message)


HANDLERS = {
    cls.__name__: (succeeded if cls.__name__.endswith("Succeeded") else failed)
    for cls in m.WORKER_RESULTS
}
