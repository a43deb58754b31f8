"""Operator commands (API, nameko shell, recovery)."""

from __future__ import annotations

from shared import serialize
from shared.db.models import JOB_HELD, JOB_TERMINAL

from .. import manual_actions as ma
from .. import messages as m
from ..consistency_checks import is_recovery
from ..dbstate import Rejected
from ..job_lifecycle import hold_job, take_out
from .recovery_answers import resolve_recovery

AT_REST = ("PENDING", "QUEUED", "WAITING_UNLOAD")


def _existing(ctx, target_type: str, label: str, read, row_id):
    """The row a command is about (and its audit target), or NOT_FOUND."""
    ctx.target = (target_type, str(row_id))
    row = read(row_id)
    if row is None:
        raise Rejected("NOT_FOUND", f"{label} {row_id} does not exist")
    return row


def _order(ctx, order_id):
    return _existing(ctx, "work_order", "work order", ctx.db.work_order, order_id)


def _job(ctx, job_id):
    return _existing(ctx, "job", "job", ctx.db.job, job_id)


def _invalid(message):
    return Rejected("INVALID_TRANSITION", message)


def create_order(cmd: m.CreateOrder, ctx):
    try:
        product = ctx.layout.product(cmd.product_id)
    except KeyError:
        raise Rejected("VALIDATION_ERROR", f"productId: no product {cmd.product_id!r}") from None
    order = ctx.db.create_work_order(code=cmd.code, product_id=product.id,
                                     route=[s.to_json() for s in product.route],
                                     quantity=cmd.quantity, priority=cmd.priority)
    ctx.target = ("work_order", str(order.id))
    return serialize.work_order(order)


def start_order(cmd: m.StartOrder, ctx):
    """CREATED → RUNNING; the order's pieces become jobs waiting at the dock."""
    order = _order(ctx, cmd.work_order_id)
    if order.status != "CREATED":
        raise _invalid(f"work order {order.id} is {order.status}, not CREATED")
    ctx.db.create_jobs(order.id, order.quantity)
    return serialize.work_order(ctx.db.transition_order(order.id, ("CREATED",), "RUNNING",
                                                        "WorkOrderStarted", started=True))


def pause_order(cmd: m.PauseOrder, ctx):
    """RUNNING → PAUSED. Jobs at rest are PAUSED; a job in the middle of an
    action finishes it, and no new action starts for the order's jobs."""
    order = _order(ctx, cmd.work_order_id)
    if order.status != "RUNNING":
        raise _invalid(f"work order {order.id} is {order.status}, not RUNNING")
    for job in ctx.db.jobs_of_order(order.id, AT_REST):
        ctx.db.set_job_status(job.id, (job.status,), "PAUSED", held_status=job.status)
    return serialize.work_order(ctx.db.transition_order(order.id, ("RUNNING",), "PAUSED",
                                                        "WorkOrderPaused"))


def resume_order(cmd: m.ResumeOrder, ctx):
    order = _order(ctx, cmd.work_order_id)
    if order.status != "PAUSED":
        raise _invalid(f"work order {order.id} is {order.status}, not PAUSED")
    for job in ctx.db.jobs_of_order(order.id, ("PAUSED",)):
        ctx.db.set_job_status(job.id, ("PAUSED",), job.held_status or "QUEUED", held_status=None)
    return serialize.work_order(ctx.db.transition_order(order.id, ("PAUSED",), "RUNNING",
                                                        "WorkOrderResumed"))


def cancel_order(cmd: m.CancelOrder, ctx):
    """Any non-terminal order → CANCELLED: its live jobs CANCELLED, their open
    tasks CANCELLED (late results are then stale). Pieces at rest on the
    buffer leave the cell by robot (``BUFFER_TO_DOCK``, like finished ones);
    pieces on equipment keep their slot (nothing is loaded over them) and,
    with pieces the robot held, become one manual action to take them out —
    resolving it frees those slots."""
    order = _order(ctx, cmd.work_order_id)
    if order.status in ("COMPLETED", "CANCELLED"):
        raise _invalid(f"work order {order.id} is {order.status}")
    live = [j for j in ctx.db.jobs_of_order(order.id) if j.status not in JOB_TERMINAL]
    busy = {t.job_id for t in ctx.db.cancel_open_tasks([j.id for j in live])}
    in_cell = []
    for job in live:
        if job.position_type == "ON_BUFFER" and job.id not in busy:
            ctx.requests.extend(take_out(ctx.db, job, "CANCELLED"))
            continue
        if job.position_type != "ON_DOCK":
            in_cell.append({"jobId": job.id, "positionType": job.position_type,
                            "positionRefId": job.position_ref_id})
        ctx.db.finish_job(job.id, "CANCELLED")
    if in_cell:
        ma.open_manual_action(ctx.db, ma.REMOVE_CANCELLED_PIECES,
                              {"order_code": order.code, "count": len(in_cell)},
                              context={"workOrderId": order.id, "pieces": in_cell})
    return serialize.work_order(ctx.db.transition_order(
        order.id, ("CREATED", "RUNNING", "PAUSED"), "CANCELLED", "WorkOrderCancelled", finished=True))


def suspend_job(cmd: m.SuspendJob, ctx):
    job = _job(ctx, cmd.job_id)
    if job.status in JOB_TERMINAL or job.status in JOB_HELD or job.status == "MOVING":
        raise _invalid(f"job {job.id} is {job.status}")
    if ctx.db.running_tasks_of_job(job.id):
        raise _invalid(f"job {job.id} has a hardware action in progress")
    return serialize.job(hold_job(ctx.db, job.id, "SUSPENDED"))


def resume_job(cmd: m.ResumeJob, ctx):
    job = _job(ctx, cmd.job_id)
    if job.status != "SUSPENDED":
        raise _invalid(f"job {job.id} is {job.status}, not SUSPENDED")
    open_actions = [a for a in ctx.db.open_manual_actions()
                    if a.job_id == job.id or job.id in (a.context or {}).get("jobIds", [])]
    if open_actions:
        raise _invalid(f"job {job.id} waits for manual action {open_actions[0].id}")
    return serialize.job(ctx.db.set_job_status(job.id, ("SUSPENDED",), job.held_status or "QUEUED",
                                               held_status=None))


def rework_job(cmd: m.ReworkJob, ctx):
    """Send a piece at rest (dock or buffer) back to ``stepIndex`` (default: its current step)."""
    job = _job(ctx, cmd.job_id)
    if job.status not in ("QUEUED", "SUSPENDED", "ERROR", "PENDING") or \
            job.position_type not in ("ON_BUFFER", "ON_DOCK"):
        raise _invalid(f"job {job.id} is {job.status} {job.position_type}; rework needs a piece "
                       f"at rest on the dock or the buffer")
    route = ctx.db.work_order(job.work_order_id).route
    step = job.step_index if cmd.step_index is None else cmd.step_index
    if step > min(job.step_index, len(route) - 1):
        raise Rejected("VALIDATION_ERROR", f"stepIndex: must be 0..{min(job.step_index, len(route) - 1)}")
    reworks = int((job.context or {}).get("reworkCount", 0)) + 1
    status = "QUEUED" if job.position_type == "ON_BUFFER" else "PENDING"
    ctx.db.set_job_status(job.id, (job.status,), job.status, held_status=None, error_code=None,
                          context_patch={"reworkCount": reworks, "disposition": None})
    return serialize.job(ctx.db.complete_step(job.id, job.step_index, step, status=status))


def resolve_manual_action(cmd: m.ResolveManualAction, ctx):
    db = ctx.db
    action = _existing(ctx, "manual_action", "manual action", db.manual_action, cmd.manual_action_id)
    if action.status != "OPEN":
        raise _invalid(f"manual action {action.id} is {action.status}")
    if cmd.resolution not in (action.choices or []):
        raise Rejected("VALIDATION_ERROR",
                       f"resolution: must be one of {', '.join(action.choices or [])}")
    resolved = db.resolve_manual_action(action.id, cmd.resolution, ctx.actor, cmd.note)
    resolve = resolve_recovery if is_recovery(action.kind) else ma.resolve_manual_action
    ctx.requests.extend(resolve(db, action, cmd.resolution))
    _clear_alarm(db, action, ctx.actor)
    return serialize.manual_action(resolved)


def _clear_alarm(db, action, actor):
    """An action's alarm is cleared with the last open action raised for it."""
    if action.alarm_id is not None and not any(
            a.alarm_id == action.alarm_id for a in db.open_manual_actions()):
        alarm = db.alarm(action.alarm_id)
        if alarm.status != "CLEARED":
            db.resolve_alarm(alarm.id, actor)


def confirm_recovery(cmd: m.ConfirmRecovery, ctx):
    """Accept the recorded state for recovery actions (given ids, else all open
    ones); jobs held by them continue by themselves."""
    db = ctx.db
    open_recovery = {a.id: a for a in db.open_manual_actions() if is_recovery(a.kind)}
    ids = list(cmd.manual_action_ids) if cmd.manual_action_ids is not None else list(open_recovery)
    unknown = [i for i in ids if i not in open_recovery]
    if unknown:
        raise Rejected("NOT_FOUND", f"manualActionIds: {unknown} are not open recovery actions")
    for action_id in ids:
        action = open_recovery[action_id]
        db.resolve_manual_action(action_id, "CONFIRMED", ctx.actor, cmd.note)
        ctx.requests.extend(resolve_recovery(db, action, "CONFIRM"))
        _clear_alarm(db, action, ctx.actor)
    ctx.target = ("recovery", None)
    return {"confirmed": ids}


def _alarm(ctx, alarm_id):
    return _existing(ctx, "alarm", "alarm", ctx.db.alarm, alarm_id)


def acknowledge_alarm(cmd: m.AcknowledgeAlarm, ctx):
    alarm = _alarm(ctx, cmd.alarm_id)
    if alarm.status != "RAISED":
        raise _invalid(f"alarm {alarm.id} is {alarm.status}")
    return serialize.alarm(ctx.db.acknowledge_alarm(alarm.id, ctx.actor))


def shelve_alarm(cmd: m.ShelveAlarm, ctx):
    """Hide an alarm from the active list for a while (ISA-18.2 shelving). Only
    the alarm changes: the line, its jobs and the manual actions do not."""
    alarm = _alarm(ctx, cmd.alarm_id)
    if alarm.status == "CLEARED":
        raise _invalid(f"alarm {alarm.id} is CLEARED")
    return serialize.alarm(ctx.db.shelve_alarm(alarm.id, cmd.minutes, cmd.reason, ctx.actor))


def unshelve_alarm(cmd: m.UnshelveAlarm, ctx):
    alarm = _alarm(ctx, cmd.alarm_id)
    if alarm.status != "SHELVED":
        raise _invalid(f"alarm {alarm.id} is {alarm.status}, not SHELVED")
    return serialize.alarm(ctx.db.unshelve_alarm(alarm.id, ctx.actor))


HANDLERS = {
    m.CreateOrder: create_order, m.StartOrder: start_order, m.PauseOrder: pause_order,
    m.ResumeOrder: resume_order, m.CancelOrder: cancel_order, m.SuspendJob: suspend_job,
    m.ResumeJob: resume_job, m.ReworkJob: rework_job,
    m.ResolveManualAction: resolve_manual_action, m.ConfirmRecovery: confirm_recovery,
    m.AcknowledgeAlarm: acknowledge_alarm, m.ShelveAlarm: shelve_alarm,
    m.UnshelveAlarm: unshelve_alarm,
}
