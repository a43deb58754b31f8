"""What an operator's answer to a restart-recovery action does (seed 004,
恢复策略; the actions are opened by ``handlers.recovery``). ``CONFIRM`` accepts
the state as recorded in the DB; the other answers say where the pieces are.
A job leaves SUSPENDED when the last open recovery action naming it is
resolved.
"""

from __future__ import annotations

from shared import events as ev
from shared.db.models import JOB_HELD, JOB_TERMINAL

from .. import consistency_checks as r
from ..dbstate import Rejected
from ..job_lifecycle import mark_slot_done, scrap_job, take_out_again
from ..task_outcomes import apply_task_success, unloaded


def _still_held(db, job_id, resolving_id) -> bool:
    return any(job_id in (a.context or {}).get("jobIds", []) for a in db.open_manual_actions()
               if r.is_recovery(a.kind) and a.id != resolving_id)


def _release(db, action, job_id, *, status=None, place: dict | None = None):
    """Back to work (``status``, default the held one; ``place``: where the piece
    is), unless another open recovery action still holds the job."""
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL:
        return None
    target = status or job.held_status or "QUEUED"
    held = job.status in JOB_HELD
    if _still_held(db, job_id, action.id) or job.status == "PAUSED":
        # Stay held; return to ``target`` when released.
        if place is not None:
            return db.place_job(job.id, (job.status,), job.status, place["positionType"],
                                place["positionRefId"], place["tempSlotNo"], held_status=target)
        return db.set_job_status(job.id, (job.status,), job.status, held_status=target) if held else job
    if place is not None:
        return db.place_job(job.id, (job.status,), target, place["positionType"],
                            place["positionRefId"], place["tempSlotNo"], held_status=None)
    if not held:
        return job
    return db.set_job_status(job.id, (job.status,), target, held_status=None)


def resolve_recovery(db, action, resolution: str) -> list:
    """Apply an operator's answer (``CONFIRM`` = accept the recorded state) to a
    RECOVERY_* action that has just been marked resolved; the hardware requests
    that follow from it (to send after the commit)."""
    context = action.context or {}
    job_ids = list(context.get("jobIds") or ([action.job_id] if action.job_id else []))
    if resolution in ("PIECE_REMOVED", "SCRAP"):
        for job_id in job_ids:
            _scrap(db, job_id, action, resolution)
        if action.kind == r.SLOT_MISMATCH and "slotNo" in context:
            _empty_slot(db, action.equipment_id, context["slotNo"])
        if action.kind == r.MACHINE_IDLE_BUT_DB_RUNNING:
            _equipment_idle(db, action.equipment_id)
        if action.kind == r.MACHINE_PIECE_MISSING:
            _idle_unless_processing(db, action.equipment_id)
        return []
    if action.kind == r.MACHINE_PIECE_MISSING and resolution == "PIECE_UNLOADED":
        return _piece_unloaded(db, action, job_ids)
    if action.kind == r.TASK_OUTCOME_UNKNOWN:
        return _resolve_task(db, action, db.task(context["taskId"]), job_ids, resolution)
    if action.kind == r.MACHINE_IDLE_BUT_DB_RUNNING:
        for job_id in job_ids:
            # CONFIRM: the cycle did not finish; loaded, not started (QUEUED on the
            # slot), the piece's cycle is started again. CYCLE_DONE: done, below.
            # A piece the machine has reported done since the question opened (a
            # start on its way at the restart ran after the check) waits for its
            # unload either way: its held status already says so.
            job = db.job(job_id)
            rerun = resolution == "CONFIRM" and job is not None and job.held_status != "WAITING_UNLOAD"
            _release(db, action, job_id, status="QUEUED" if rerun else None)
        if resolution == "CYCLE_DONE":
            for slot in db.slots(action.equipment_id):
                if slot.status == "OCCUPIED" and slot.current_job_id in job_ids:
                    mark_slot_done(db, slot)
        _equipment_idle(db, action.equipment_id)
    elif action.kind == r.MACHINE_RUNNING_BUT_DB_IDLE:
        equipment = db.equipment(action.equipment_id)
        if equipment is not None and equipment.status == "FAULT":
            db.set_equipment_status(equipment.id, "IDLE")
    elif action.kind == r.SLOT_MISMATCH:
        _resolve_slot(db, action, job_ids, resolution)
    else:
        for job_id in job_ids:
            _release(db, action, job_id)
    return []


def _resolve_task(db, action, task, job_ids, resolution):
    params = task.params or {}
    if task.kind == ev.BUFFER_TO_DOCK:
        # A finished piece on its way out (its job is terminal already): if it did
        # not leave, it is taken out again; nothing else depends on it.
        job = db.job(task.job_id)
        if resolution == "CONFIRM" and job is not None:
            return take_out_again(db, job, params.get("bufferSlot"))
        return []
    if resolution == "ACTION_DONE":
        for job_id in job_ids:
            _release(db, action, job_id)
        if any(db.job(j).status in JOB_HELD for j in params.get("jobIds", [])):
            raise Rejected("INVALID_TRANSITION", "another recovery action still holds this task's "
                           "jobs: resolve it first")
        return list(apply_task_success(db, task, {}) or [])
    before = params.get("before") or {}
    for job_id in job_ids:
        was = before.get(str(job_id))
        if was is None:  # a machine start: its pieces stay where they are
            _release(db, action, job_id)
        else:
            _release(db, action, job_id, status=was["status"], place=was)
    return []


def _resolve_slot(db, action, job_ids, resolution):
    context = action.context or {}
    if "positionRefId" in context:  # a job recorded on a slot that disagrees
        equipment_id, _, n = context["positionRefId"].partition(":")
        slot = db.slot(equipment_id, int(n)) if n.isdigit() else None
        if slot is None:
            raise Rejected("INVALID_TRANSITION", f"slot {context['positionRefId']} does not exist: "
                           "PIECE_REMOVED or SCRAP")
        holder = db.job(slot.current_job_id) if slot.current_job_id else None
        if holder is not None and holder.id not in job_ids and holder.status not in JOB_TERMINAL \
                and holder.position_ref_id == context["positionRefId"]:
            raise Rejected("INVALID_TRANSITION", f"slot {context['positionRefId']} holds job {holder.id}")
        if slot.current_job_id != job_ids[0]:
            db.set_equipment_slot(equipment_id, slot.slot_no, ("EMPTY", "OCCUPIED", "DONE"), "OCCUPIED",
                                  job_ids[0])
        for job_id in job_ids:
            _release(db, action, job_id)
        return
    # A slot holding a job recorded elsewhere.
    slot_no = context["slotNo"]
    if resolution == "PIECE_ON_MACHINE" and job_ids:
        job = db.job(job_ids[0])
        _release(db, action, job.id, status="PROCESSING", place={
            "positionType": "ON_EQUIPMENT", "positionRefId": f"{action.equipment_id}:{slot_no}",
            "tempSlotNo": job.temp_slot_no})
        slot = db.slot(action.equipment_id, slot_no)
        if slot.status == "DONE":
            db.set_equipment_slot(action.equipment_id, slot_no, ("DONE",), "OCCUPIED", job.id)
        return
    _empty_slot(db, action.equipment_id, slot_no)
    for job_id in job_ids:
        _release(db, action, job_id)


def _piece_unloaded(db, action, job_ids) -> list:
    """The piece the PLC does not see in its slot is on its own buffer slot: the
    robot unloaded it and the record of that was lost. A cycle recorded done
    (WAITING_UNLOAD): the unload's success applies (its step is done, it goes on
    or leaves the cell); a cycle not recorded done: the step is done again later."""
    requests = []
    for job_id in job_ids:
        job = db.job(job_id)
        if job is None or job.status in JOB_TERMINAL:
            continue
        if job.status == "PAUSED" or _still_held(db, job.id, action.id):
            raise Rejected("INVALID_TRANSITION", f"job {job.id} is held by its paused order or another "
                           "recovery action: resume or resolve that first")
        if job.temp_slot_no is None:
            raise Rejected("INVALID_TRANSITION", f"job {job.id} has no buffer slot: PIECE_REMOVED or SCRAP")
        done = (job.held_status or job.status) == "WAITING_UNLOAD"
        # as a robot unload leaves it (MOVING, then on the buffer), or back in the queue
        db.set_job_status(job.id, (job.status,), "MOVING" if done else "QUEUED", held_status=None)
        moved = db.move_job_to_buffer(job.id)
        if done:
            requests += unloaded(db, moved)
    _idle_unless_processing(db, action.equipment_id)
    return requests


def _idle_unless_processing(db, equipment_id):
    """A machine the DB has RUNNING with no piece left in process on it is IDLE."""
    if equipment_id is None:
        return
    jobs = [db.job(s.current_job_id) for s in db.slots(equipment_id)
            if s.status == "OCCUPIED" and s.current_job_id is not None]
    if not any(j is not None and "PROCESSING" in (j.status, j.held_status) for j in jobs):
        _equipment_idle(db, equipment_id)


def _scrap(db, job_id, action, resolution):
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL:
        return
    db.patch_job_context(job.id, {"disposition": "SCRAP", "recovery": {
        "manualActionId": action.id, "kind": action.kind, "resolution": resolution}})
    scrap_job(db, db.job(job.id))


def _empty_slot(db, equipment_id, slot_no):
    slot = db.slot(equipment_id, slot_no)
    if slot is not None and slot.status != "EMPTY":
        db.set_equipment_slot(equipment_id, slot_no, ("OCCUPIED", "DONE"), "EMPTY", None)


def _equipment_idle(db, equipment_id):
    """The machine is not running whatever the DB said: IDLE, so a cycle with pieces
    still to process is started again."""
    equipment = db.equipment(equipment_id) if equipment_id else None
    if equipment is not None and equipment.status == "RUNNING":
        db.set_equipment_status(equipment_id, "IDLE")
