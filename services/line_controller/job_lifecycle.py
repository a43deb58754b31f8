"""A job's life cycle as the loop changes it: hold, restore, next step, scrap
and take-out (a finished piece leaves the cell by robot).

These are the rules shared by the handlers, the task outcomes and the manual
actions; each is a few conditional transitions of :class:`DBState`.
"""

from __future__ import annotations

from shared import events as ev
from shared.db.models import JOB_HELD

from .dbstate import KEEP, DBState
from .hardware_port import HardwareRequest

OUT_TIMEOUT_SECONDS = 150.0


def take_out(db: DBState, job, terminal: str) -> list[HardwareRequest]:
    """Finish a job whose piece sits on its buffer slot: COMPLETED / SCRAPPED
    (the slot is free in the DB at once, seed 暂存台) and a ``BUFFER_TO_DOCK``
    task that takes the piece out of the cell. That task is a robot task, so
    no other robot action (a refill into that slot) is chosen before it ends.
    Its params carry no ``jobIds``: the job is terminal, its result is not stale."""
    slot = job.temp_slot_no
    finished = db.finish_job(job.id, terminal)
    if slot is None or job.position_type != "ON_BUFFER":
        return []
    return take_out_again(db, finished, slot)


def take_out_again(db: DBState, job, buffer_slot: int | None, *, reissues: int = 0) -> list[HardwareRequest]:
    """The ``BUFFER_TO_DOCK`` task for a terminal job's piece on ``buffer_slot``
    (also once more, when a restart lost the first one's outcome and it did not happen)."""
    if buffer_slot is None:
        return []
    task = db.create_task(ev.BUFFER_TO_DOCK, job_id=job.id, work_order_id=job.work_order_id,
                          params={"bufferSlot": buffer_slot, "finished": job.status,
                                  **({"reissues": reissues} if reissues else {})},
                          timeout_seconds=OUT_TIMEOUT_SECONDS)
    db.start_task(task.id)
    return [HardwareRequest("buffer_to_dock", task.id, ev.ROBOT_ACTION_FAILED,
                            {"slot_no": buffer_slot, "job_id": job.id})]


def advance_after_step(db: DBState, job) -> list[HardwareRequest]:
    """The job's current step is done: next step, or COMPLETED/SCRAPPED (the
    piece is then taken out: the requests to send), or an operator's decision
    for an inspection without a verdict."""
    route = db.route(job.work_order_id)
    step = route[job.step_index] if job.step_index < len(route) else {"op": "?"}
    if step["op"] == "inspect":
        disposition = (job.context or {}).get("disposition")
        if disposition == "SCRAP":
            return take_out(db, job, "SCRAPPED")
        if disposition == "REWORK":
            back = max(0, job.step_index - 1)
            db.complete_step(job.id, job.step_index, back, {"disposition": None})
            return []
        if disposition != "PASS":
            # No verdict yet: hold the piece until INSPECTION_DECISION is resolved.
            db.set_job_status(job.id, (job.status,), "SUSPENDED", held_status="QUEUED")
            return []
    nxt = job.step_index + 1
    if nxt >= len(route):
        return take_out(db, db.complete_step(job.id, job.step_index, nxt), "COMPLETED")
    db.complete_step(job.id, job.step_index, nxt, {"disposition": None} if step["op"] == "inspect" else None)
    return []


def restore_job(db: DBState, job_id: int, before: dict, *, status: str, held_status=KEEP,
                piece_at_dock: bool = True):
    """Put a job back where it was before a failed action (an operator confirmed it is
    there). Back on the dock, its piece counts at the dock again (``DBState.place_job``)."""
    job = db.job(job_id)
    return db.place_job(job_id, (job.status,), status, before["positionType"],
                        before["positionRefId"], before["tempSlotNo"], held_status=held_status,
                        piece_at_dock=piece_at_dock)


def hold_job(db: DBState, job_id: int, status: str):
    """PAUSED/SUSPENDED, remembering the status to return to."""
    job = db.job(job_id)
    if job.status in JOB_HELD:
        return job
    return db.set_job_status(job_id, (job.status,), status, held_status=job.status)


def mark_slot_done(db: DBState, slot) -> None:
    """A machine finished the piece in ``slot``: slot DONE, job WAITING_UNLOAD
    (or, for a held job, WAITING_UNLOAD is what it returns to). A cancelled
    piece's slot stays as it is until an operator has taken it out."""
    job = db.job(slot.current_job_id)
    if job is not None and job.status == "CANCELLED":
        return
    db.slot_done(slot.equipment_id, slot.slot_no, slot.current_job_id)


def free_equipment_slot(db: DBState, position_ref_id: str, job_id: int) -> None:
    """The piece of ``job_id`` is off the machine: the slot at ``position_ref_id``
    (``equipment:slot``) is emptied if it still holds that job."""
    equipment_id, _, n = position_ref_id.rpartition(":")
    slot = db.slot(equipment_id, int(n))
    if slot is not None and slot.current_job_id == job_id:
        db.set_equipment_slot(equipment_id, int(n), ("OCCUPIED", "DONE"), "EMPTY", None)


def scrap_job(db: DBState, job) -> None:
    """Out of the cell as scrap; an equipment slot still holding it is emptied (a
    refill's piece that never reached the buffer counts at the dock again:
    ``DBState.finish_job``)."""
    if job.position_type == "ON_EQUIPMENT":
        free_equipment_slot(db, job.position_ref_id, job.id)
    db.finish_job(job.id, "SCRAPPED")
