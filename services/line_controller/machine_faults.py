"""A machine that stops with pieces in its cycle (docs/state-machines.md,
"Faults on the floor"): the PLC reports a fault, or a cycle runs far past its
time. Nothing moves by itself: each stopped piece is ``SUSPENDED`` in its slot,
and one manual action per machine names them all; the operator's answer
(``manual_actions._stopped_cycle``) restarts, returns or scraps them.
"""

from __future__ import annotations

from shared import events as ev

from . import manual_actions as ma
from .dbstate import DBState


def _starts_in_flight(db: DBState, equipment_id: str) -> set[int]:
    """Jobs of a start not acknowledged yet: its result, not the fault, says what happened."""
    return {job_id for t in db.open_tasks() if t.kind == ev.START_MACHINE and t.equipment_id == equipment_id
            for job_id in (t.params or {}).get("jobIds", [])}


def stopped_pieces(db: DBState, equipment_id: str, job_ids=None) -> list[tuple[int, int]]:
    """(job id, slot) of each piece in a started cycle that has not reported done:
    an OCCUPIED slot whose job is PROCESSING (on a machine that runs its slots
    one after another, a slot still waiting its turn counts: it was started too)."""
    in_flight = _starts_in_flight(db, equipment_id)
    out = []
    for slot in db.slots(equipment_id):
        if slot.status != "OCCUPIED" or slot.current_job_id is None or slot.current_job_id in in_flight:
            continue
        if job_ids is not None and slot.current_job_id not in job_ids:
            continue
        job = db.job(slot.current_job_id)
        if job is not None and job.status == "PROCESSING":
            out.append((job.id, slot.slot_no))
    return out


def suspend_stopped_cycles(db: DBState, equipment_id: str, *, kind: str = ma.MACHINE_FAULT_DURING_CYCLE,
                           alarm_id: int | None = None, job_ids=None, reason: str | None = None):
    """Hold the stopped pieces in their slots and open the machine's action for
    them (none if no piece was in a cycle). Their hold returns to QUEUED (loaded,
    no cycle running): the machine is not PROCESSING while it waits for an answer."""
    pieces = stopped_pieces(db, equipment_id, job_ids)
    if not pieces:
        return None
    for job_id, _slot_no in pieces:
        db.set_job_status(job_id, ("PROCESSING",), "SUSPENDED", held_status="QUEUED")
    described = ", ".join(f"job {job_id} (slot {slot_no})" for job_id, slot_no in pieces)
    # "pieces" and "reason" fill the English text; "stopped" lets the page say the same in its language.
    facts = {"equipment_id": equipment_id, "pieces": described, "reason": reason or "",
             "stopped": [{"job_id": j, "slot_no": s} for j, s in pieces]}
    return ma.open_manual_action(
        db, kind, facts, equipment_id=equipment_id, alarm_id=alarm_id,
        job_id=pieces[0][0] if len(pieces) == 1 else None,
        context={"pieces": [{"jobId": j, "slotNo": s} for j, s in pieces],
                 "jobIds": [j for j, _s in pieces]})
