"""The JSON shapes of line-control objects, used by the loop (event payloads,
command results) and the gateway (query responses) alike, so a job looks the
same in a websocket frame and in ``GET /api/jobs/{id}``.

Each function takes anything with the model's attribute names (an ORM object
or a ``Row``) and returns camelCase JSON-ready dicts; times are ISO-8601 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.db.models import JOB_TERMINAL


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def work_order(o) -> dict:
    return {
        "id": o.id,
        "code": o.code,
        "productId": o.product_id,
        "quantity": o.quantity,
        "priority": o.priority,
        "status": o.status,
        "completedQty": o.completed_qty,
        "scrappedQty": o.scrapped_qty,
        "version": o.version,
        "createdAt": iso(o.created_at),
        "updatedAt": iso(o.updated_at),
        "startedAt": iso(o.started_at),
        "finishedAt": iso(o.finished_at),
    }


def job(j) -> dict:
    return {
        "id": j.id,
        "workOrderId": j.work_order_id,
        "seqNo": j.seq_no,
        "status": j.status,
        "heldStatus": j.held_status,
        "positionType": j.position_type,
        "positionRefId": j.position_ref_id,
        "tempSlotNo": j.temp_slot_no,
        "stepIndex": j.step_index,
        "context": j.context or {},
        "version": j.version,
        "errorCode": j.error_code,
        "createdAt": iso(j.created_at),
        "updatedAt": iso(j.updated_at),
        "finishedAt": iso(j.finished_at),
    }


def slot(s) -> dict:
    return {
        "equipmentId": s.equipment_id,
        "slotNo": s.slot_no,
        "status": s.status,
        "currentJobId": s.current_job_id,
    }


def equipment(e, slots) -> dict:
    return {
        "id": e.id,
        "name": e.name,
        "kind": e.kind,
        "batch": e.batch,
        "status": e.status,
        "slotCount": e.slot_count,
        "slots": [
            {"slotNo": s.slot_no, "status": s.status, "currentJobId": s.current_job_id}
            for s in sorted(slots, key=lambda s: s.slot_no)
        ],
    }


def task(t) -> dict:
    return {
        "id": t.id,
        "kind": t.kind,
        "status": t.status,
        "jobId": t.job_id,
        "workOrderId": t.work_order_id,
        "equipmentId": t.equipment_id,
        "slotNo": t.slot_no,
        "params": t.params or {},
        "errorCode": t.error_code,
        "errorMessage": t.error_message,
        "deadlineAt": iso(t.deadline_at),
        "createdAt": iso(t.created_at),
        "startedAt": iso(t.started_at),
        "finishedAt": iso(t.finished_at),
    }


def alarm(a) -> dict:
    return {
        "id": a.id,
        "code": a.code,
        "severity": a.severity,
        "status": a.status,
        "message": a.message,
        "equipmentId": a.equipment_id,
        "jobId": a.job_id,
        "taskId": a.task_id,
        "raisedAt": iso(a.raised_at),
        "acknowledgedAt": iso(a.acknowledged_at),
        "acknowledgedBy": a.acknowledged_by,
        "clearedAt": iso(a.cleared_at),
        "clearedBy": a.cleared_by,
        "shelvedUntil": iso(a.shelved_until),
        "shelveReason": a.shelve_reason,
        "shelvedBy": a.shelved_by,
        "shelvedAt": iso(a.shelved_at),
    }


def manual_action(m) -> dict:
    return {
        "id": m.id,
        "kind": m.kind,
        "status": m.status,
        "text": m.text,
        "choices": list(m.choices or []),
        "jobId": m.job_id,
        "equipmentId": m.equipment_id,
        "alarmId": m.alarm_id,
        "context": m.context or {},
        "resolution": m.resolution,
        "note": m.note,
        "resolvedBy": m.resolved_by,
        "resolvedAt": iso(m.resolved_at),
        "createdAt": iso(m.created_at),
    }


def event_frame(e) -> dict:
    return {"seq": e.seq, "txId": e.tx_id, "type": e.type, "at": iso(e.at), "payload": e.payload}


def hourly(start: datetime, end: datetime, by_hour: dict, keys: tuple[str, ...]) -> list[dict]:
    """``[{"from": hour, key: n, …}]`` for every clock hour (UTC) from ``start``'s
    to ``end``, zeros included; ``by_hour`` maps an hour to a row with ``keys``."""
    out, hour = [], start.replace(minute=0, second=0, microsecond=0)
    while hour < end:
        row = by_hour.get(hour)
        out.append({"from": iso(hour), **{k: getattr(row, k) if row else 0 for k in keys}})
        hour += timedelta(hours=1)
    return out


def loop_message(m) -> dict:
    """A command's outcome (``GET /api/commands/{id}``)."""
    out = {
        "commandId": m.id,
        "type": m.type,
        "status": m.status,
        "result": m.result,
        "createdAt": iso(m.created_at),
        "handledAt": iso(m.handled_at),
    }
    if m.error_code:
        out["error"] = {"code": m.error_code, "message": m.error_message or ""}
    return out


# Tasks that bring a piece into the cell or take it out serve no route step.
_ARRIVAL_TASKS = ("DOCK_TO_BUFFER",)
_DEPARTURE_TASKS = ("BUFFER_TO_DOCK",)


def _task_brief(t) -> dict:
    return {"id": t.id, "kind": t.kind, "status": t.status, "equipmentId": t.equipment_id,
            "startedAt": iso(t.started_at), "finishedAt": iso(t.finished_at)}


def job_route(job, route: list, tasks) -> dict:
    """``GET /api/jobs/{id}/route``: each step DONE / CURRENT / TODO with the
    tasks that served it (by the step the job was at when the task began), its
    first start and, once done, its last finish."""
    terminal = job.status in JOB_TERMINAL
    by_step: dict[int, list] = {}
    arrival, departure = [], []
    for t in tasks:
        if t.kind in _ARRIVAL_TASKS:
            arrival.append(t)
            continue
        if t.kind in _DEPARTURE_TASKS:
            departure.append(t)
            continue
        before = ((t.params or {}).get("before") or {}).get(str(job.id)) or {}
        if "stepIndex" in before:
            by_step.setdefault(int(before["stepIndex"]), []).append(t)
    steps = []
    for index, step in enumerate(route):
        served = by_step.get(index, [])
        if index < job.step_index or job.status == "COMPLETED":
            state = "DONE"
        elif index == job.step_index and not terminal:
            state = "CURRENT"
        else:
            state = "TODO"
        started = [t.started_at for t in served if t.started_at is not None]
        finished = [t.finished_at for t in served if t.finished_at is not None]
        steps.append({
            "index": index, "op": step.get("op"), "equipmentKind": step.get("equipmentKind"),
            "state": state,
            "startedAt": iso(min(started)) if started else None,
            "finishedAt": iso(max(finished)) if finished and state == "DONE" else None,
            "equipmentIds": sorted({t.equipment_id for t in served if t.equipment_id}),
            "tasks": [_task_brief(t) for t in served],
        })
    return {
        "jobId": job.id, "workOrderId": job.work_order_id, "status": job.status,
        "stepIndex": job.step_index,
        "arrival": [_task_brief(t) for t in arrival],
        "departure": [_task_brief(t) for t in departure],
        "finishedAt": iso(job.finished_at),
        "steps": steps,
    }
