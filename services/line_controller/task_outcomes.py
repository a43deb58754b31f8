"""What a concluded task does to the state: its success moves its jobs on, its
failure holds them for an operator (an alarm and a manual action), and an
action the hardware never executed is put back as if it had not been asked.
"""

from __future__ import annotations

from datetime import UTC, datetime

from shared import events as ev
from shared.db.models import JOB_HELD

from . import manual_actions as ma
from .dbstate import DBState
from .hardware_port import HardwareRequest
from .job_lifecycle import advance_after_step, restore_job, take_out, take_out_again
from .machine_faults import suspend_stopped_cycles
from .manual_actions import apply_stopped_cycle_answer, plc_reports_fault

# A take-out answered NOT_EXECUTED is sent again; after this many, an operator takes it.
MAX_TAKE_OUT_REISSUES = 3


def _succeeded_start(db: DBState, task, job_ids) -> None:
    # Running unless its MachineDone overtook this result (no piece of it still processing).
    equipment = db.equipment(task.equipment_id)
    if plc_reports_fault(db, equipment.id):
        # The fault came after the PLC took the start: the cycle it began has stopped.
        suspend_stopped_cycles(db, equipment.id, job_ids=set(job_ids), reason="fault")
        return
    still = [j for j in (db.job(i) for i in job_ids)
             if j.status == "PROCESSING" or j.held_status == "PROCESSING"]
    if still and equipment.status == "IDLE":
        db.set_equipment_status(task.equipment_id, "RUNNING")


def apply_task_success(db: DBState, task, data: dict) -> list[HardwareRequest]:
    """``task`` has just been concluded SUCCEEDED; move its jobs on. Returns
    the hardware requests this causes (a finished piece taken out)."""
    params = task.params or {}
    job_ids = params.get("jobIds", [])
    kind = task.kind
    if kind == ev.DOCK_TO_BUFFER:
        db.move_job_to_buffer(job_ids[0], params["bufferSlot"], "QUEUED")
    elif kind == ev.BUFFER_TO_EQUIPMENT:
        db.move_job_to_equipment(job_ids[0], "ON_ROBOT", task.equipment_id, task.slot_no, "QUEUED")
    elif kind == ev.EQUIPMENT_TO_BUFFER:
        return unloaded(db, db.move_job_to_buffer(job_ids[0]))
    elif kind == ev.SWAP:
        moved = db.move_job_to_buffer(job_ids[0])
        db.move_job_to_equipment(job_ids[1], "ON_ROBOT", task.equipment_id, task.slot_no, "QUEUED")
        return unloaded(db, moved)
    elif kind in (ev.SCAN, ev.MARK):
        code = (data or {}).get("code") if kind == ev.SCAN else None
        patch = {"barcode": code} if kind == ev.SCAN else {"markedText": params.get("text")}
        # The code read is the piece's serial from now on (PRODUCT.md, "Piece traceability").
        job = db.patch_job_context(job_ids[0], patch, serial=code if isinstance(code, str) and code else None)
        return advance_after_step(db, job)
    elif kind == ev.START_MACHINE:
        _succeeded_start(db, task, job_ids)
    elif kind == ev.ABORT_CYCLE:  # the overdue cycle is stopped: the operator's answer applies now
        if db.equipment(task.equipment_id).status == "RUNNING":
            db.set_equipment_status(task.equipment_id, "IDLE")
        apply_stopped_cycle_answer(db, task.equipment_id, params.get("pieces", []), params["answer"])
    return []


def unloaded(db: DBState, job) -> list[HardwareRequest]:
    """A piece is back on its buffer slot: its step is done, unless an operator
    answered a stopped cycle (``afterFault``): then it does this step again
    later (RETURN_TO_BUFFER), or it leaves the cell as scrap (SCRAP)."""
    after_fault = (job.context or {}).get("afterFault")
    if after_fault == "SCRAP":
        return take_out(db, job, "SCRAPPED")
    if after_fault == "RETURN_TO_BUFFER":
        db.set_job_status(job.id, (job.status,), "QUEUED", context_patch={"afterFault": None})
        return []
    return advance_after_step(db, job)


def _found_empty_at(task, finished_at: str | None):
    """When the robot found the dock empty, as a reading of the dock: no later than
    the task started. A pallet the watcher saw arrive after that may have come
    after the robot looked (the PLC brings one once the dock is empty), so its
    count stands; the two clocks (hardware, database) only decide within that
    window, and an error there leaves the count high, never low."""
    started = getattr(task, "started_at", None)
    if started is None or finished_at is None:
        return started or finished_at
    finished = datetime.fromisoformat(finished_at) if isinstance(finished_at, str) else finished_at
    return min(started, finished if finished.tzinfo else finished.replace(tzinfo=UTC))


def put_back_not_executed(db: DBState, task, *, counted: bool = True) -> list[HardwareRequest]:
    """The hardware answered NOT_EXECUTED (a clean stop came before the action
    reached the PLC): nothing moved, so every job goes back to where and what it
    was (a job held meanwhile stays held), with no alarm and no question. A
    take-out is issued again: its piece still sits on the buffer slot."""
    params = task.params or {}
    _put_jobs_back(db, params)  # a refill's piece is still at the dock: counted there again
    db.emit("ActionNotExecuted", {"taskId": task.id, "kind": task.kind, "jobIds": params.get("jobIds", [])})
    if task.kind == ev.BUFFER_TO_DOCK and task.job_id is not None:
        return take_out_again(db, db.job(task.job_id), params.get("bufferSlot"),
                              reissues=int(params.get("reissues", 0)) + int(counted))
    return []


def _put_jobs_back(db: DBState, params: dict, *, piece_at_dock: bool = True) -> None:
    """Nothing moved: each job of the task where and what it was before (a job
    held meanwhile stays held, and returns to its earlier status when released)."""
    for job_id in params.get("jobIds", []):
        before, job = params["before"][str(job_id)], db.job(job_id)
        if job.status in JOB_HELD:
            restore_job(db, job_id, before, status=job.status, held_status=before["status"],
                        piece_at_dock=piece_at_dock)
        else:
            restore_job(db, job_id, before, status=before["status"], held_status=None,
                        piece_at_dock=piece_at_dock)


def _reissued_too_often(task) -> bool:
    return task.kind == ev.BUFFER_TO_DOCK and int((task.params or {}).get("reissues", 0)) >= MAX_TAKE_OUT_REISSUES


def apply_task_failure(db: DBState, task, error_code: str, *,
                       finished_at: str | None = None) -> list[HardwareRequest]:
    """``task`` has just been concluded FAILED: its jobs SUSPENDED (nothing moved:
    the request was refused) or ERROR (where the piece is is uncertain), with an
    alarm and a manual action. A refill from an empty dock is no fault: its
    piece simply waits at the dock again; an action the hardware never executed
    is put back (:func:`put_back_not_executed`). Returns the requests to send."""
    params = task.params or {}
    if task.kind == ev.ABORT_CYCLE:
        return _failed_abort(db, task, error_code)
    if error_code == ev.NOT_SENT:
        # The PLC never took it (away, or the robot stopped, for longer than the
        # hardware's grace): it did not happen, and is sent again once the PLC
        # answers (the loop holds new work meanwhile). Not a reissue that counts.
        return put_back_not_executed(db, task, counted=False)
    if error_code == ev.NOT_EXECUTED and not _reissued_too_often(task):
        return put_back_not_executed(db, task)
    if task.kind == ev.DOCK_TO_BUFFER and error_code == "SOURCE_EMPTY":
        # The dock ran out (the PLC says so, and nothing moved): not a fault. The
        # piece goes back to waiting at the dock for the next pallet.
        db.observe_dock(0, _found_empty_at(task, finished_at))
        _put_jobs_back(db, params, piece_at_dock=False)  # it had no piece to give back
        db.emit("DockEmpty", {"taskId": task.id, "jobIds": params.get("jobIds", [])})
        return []
    first_job = (params.get("jobIds") or [None])[0]
    repeated = _repeated(db, task, first_job) if task.kind not in (ev.BUFFER_TO_DOCK, ev.START_MACHINE) else {}
    alarm = db.raise_alarm("ACTION_FAILED",  # the alarm code, named like the action kind
                           f"{task.kind} failed: {error_code} {task.error_message or ''}".strip()
                           + (f" ({repeated['failures']} times in a row)" if repeated else ""),
                           equipment_id=task.equipment_id, job_id=first_job, task_id=task.id,
                           facts={"task_kind": task.kind, "error_code": error_code,
                                  "error_message": task.error_message, "equipment_id": task.equipment_id,
                                  "job_id": first_job, **repeated})
    if task.kind == ev.BUFFER_TO_DOCK:
        ma.open_manual_action(db, ma.REMOVE_FINISHED_PIECE, {
            "job_id": task.job_id, "buffer_slot": params.get("bufferSlot"), "error_code": error_code},
            job_id=task.job_id, alarm_id=alarm.id, context={"taskId": task.id})
    elif task.kind == ev.START_MACHINE:
        _failed_start(db, task, error_code, alarm)
    else:
        _failed_move(db, task, error_code, alarm, repeated)
    return []


def _repeated(db: DBState, task, job_id) -> dict:
    """The facts of an action that failed as the job's action before it did (same
    kind, same error; an operator answered RETRY in between): ``case`` REPEATED and
    how many ``failures`` in a row. Its question then says so and offers no plain
    RETRY (``manual_actions``, ACTION_FAILED's REPEATED variant). Empty otherwise."""
    failures = db.failures_in_a_row(job_id, task) if job_id is not None else 0
    return {"case": ma.REPEATED, "failures": failures} if failures >= 2 else {}


def _failed_abort(db: DBState, task, error_code: str) -> list[HardwareRequest]:
    """The overdue cycle could not be aborted: the same question again, with why."""
    params = task.params or {}
    pieces = params.get("pieces", [])
    described = ", ".join(f"job {p['jobId']} (slot {p['slotNo']})" for p in pieces)
    alarm = db.raise_alarm(ma.CYCLE_OVERDUE, f"{task.equipment_id}: the overdue cycle could not be "
                           f"aborted ({error_code})", equipment_id=task.equipment_id, task_id=task.id,
                           facts={"case": "ABORT_FAILED", "equipment_id": task.equipment_id,
                                  "error_code": error_code})
    ma.open_manual_action(
        db, ma.CYCLE_OVERDUE, {"equipment_id": task.equipment_id, "pieces": described,
                               "reason": f"the abort failed: {error_code}", "case": "ABORT_FAILED",
                               "error_code": error_code,
                               "stopped": [{"job_id": p["jobId"], "slot_no": p["slotNo"]} for p in pieces]},
        equipment_id=task.equipment_id, alarm_id=alarm.id,
        job_id=pieces[0]["jobId"] if len(pieces) == 1 else None,
        context={"pieces": pieces, "jobIds": [p["jobId"] for p in pieces]})
    return []


def _failed_start(db: DBState, task, error_code: str, alarm) -> None:
    params = task.params or {}
    if db.equipment(task.equipment_id).status != "FAULT":  # its PLC may have reported the fault first
        db.set_equipment_status(task.equipment_id, "FAULT")
    for job_id in (params.get("jobs") or {}).values():
        job = db.job(job_id)
        if job is not None and job.status not in JOB_HELD:
            # loaded but not started: RETRY brings them back to QUEUED and they start again
            db.set_job_status(job_id, (job.status,), "SUSPENDED", held_status="QUEUED")
    ma.open_manual_action(
        db, ma.EQUIPMENT_FAULT, {"equipment_id": task.equipment_id, "error_code": error_code},
        equipment_id=task.equipment_id, alarm_id=alarm.id,
        context={"taskId": task.id, "jobIds": list((params.get("jobs") or {}).values())})


def _failed_move(db: DBState, task, error_code: str, alarm, repeated: dict) -> None:
    params = task.params or {}
    for job_id in params.get("jobIds", []):
        if error_code == "REJECTED":  # nothing moved: a refill's piece counts at the dock again
            before = params["before"][str(job_id)]
            restore_job(db, job_id, before, status="SUSPENDED", held_status=before["status"])
        else:
            job = db.job(job_id)
            # A step past its deadline is suspended for the operator; a reported failure is an ERROR.
            status = "SUSPENDED" if error_code == "ACTION_TIMEOUT" else "ERROR"
            db.set_job_status(job_id, (job.status,), status, held_status=None, error_code=error_code)
        ma.open_manual_action(
            db, ma.ACTION_FAILED, {"task_kind": task.kind, "job_id": job_id, "error_code": error_code,
                                   **repeated},
            job_id=job_id, equipment_id=task.equipment_id, alarm_id=alarm.id,
            context={"taskId": task.id, "before": params["before"][str(job_id)]})
