"""The JSON of line-control objects, used by the loop (event payloads,
command results) and the gateway (query responses) alike, so a job looks the
same in a websocket frame and in ``GET /api/jobs/{id}``.

Each shape is declared once in ``shared.wire`` (the API schemas derive from it
too); here are the serializers by entity, and the composite answers. Each takes
anything with the model's attribute names (an ORM object or a ``Row``) and
returns camelCase JSON-ready dicts; times are ISO-8601 UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared import wire
from shared.db.models import JOB_TERMINAL
from shared.wire import iso

work_order = wire.WORK_ORDER.dump
job = wire.JOB.dump
slot = wire.SLOT.dump
task = wire.TASK.dump
alarm = wire.ALARM.dump
manual_action = wire.MANUAL_ACTION.dump
event_frame = wire.EVENT_FRAME.dump
_task_brief = wire.TASK_BRIEF.dump


def equipment(e, slots) -> dict:
    """A machine with its slots, by slot number."""
    return {**wire.EQUIPMENT.dump(e),
            "slots": [wire.SLOT_STATE.dump(s) for s in sorted(slots, key=lambda s: s.slot_no)]}


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
