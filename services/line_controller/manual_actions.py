"""The manual actions the line opens for an operator, outside restart recovery:
one row per kind with its text, its choices and what an answer does
(``docs/state-machines.md``, "Manual action"). Restart recovery has its own
table (``consistency_checks.CHOICES``, resolved by ``handlers.recovery``).

A kind's text is a template filled from the facts of the one case
(:func:`open_manual_action`); its resolver applies an operator's answer to an
action that has just been marked resolved and returns the hardware requests
that follow (to send after the commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared.db.models import JOB_TERMINAL

from .dbstate import DBState
from .hardware_port import HardwareRequest
from .job_lifecycle import (
    advance_after_step,
    free_equipment_slot,
    mark_slot_done,
    restore_job,
    scrap_job,
)

ACTION_FAILED = "ACTION_FAILED"
EQUIPMENT_FAULT = "EQUIPMENT_FAULT"
INSPECTION_DECISION = "INSPECTION_DECISION"
SIGNAL_MISMATCH = "SIGNAL_MISMATCH"
REMOVE_CANCELLED_PIECES = "REMOVE_CANCELLED_PIECES"
REMOVE_FINISHED_PIECE = "REMOVE_FINISHED_PIECE"

Resolver = Callable[[DBState, object, str], "list[HardwareRequest] | None"]


@dataclass(frozen=True)
class ManualActionKind:
    kind: str
    text: str  # a str.format template, filled from the case's facts
    choices: tuple[str, ...]
    resolve: Resolver


def _live_job(db: DBState, action):
    """The action's job, unless it has none or it is finished (then the answer changes nothing)."""
    job = db.job(action.job_id) if action.job_id is not None else None
    return None if job is None or job.status in JOB_TERMINAL else job


def _retry_or_scrap_job(db: DBState, action, resolution: str):
    """RETRY: the job back where and what it was before the failed action; SCRAP: scrapped."""
    job = _live_job(db, action)
    if job is None:
        return None
    if resolution == "RETRY":
        before = (action.context or {})["before"]
        restore_job(db, job.id, before, status=before["status"], held_status=None)
    else:
        scrap_job(db, job)
    return None


def _retry_or_scrap_start(db: DBState, action, resolution: str):
    """The machine IDLE again; its suspended jobs back to what they were (RETRY) or scrapped."""
    equipment = db.equipment(action.equipment_id)
    if equipment.status == "FAULT":
        db.set_equipment_status(equipment.id, "IDLE")
    for job_id in (action.context or {}).get("jobIds", []):
        job = db.job(job_id)
        if job is None or job.status != "SUSPENDED":
            continue
        if resolution == "RETRY":
            db.set_job_status(job.id, ("SUSPENDED",), job.held_status or "PROCESSING", held_status=None)
        else:
            scrap_job(db, job)
    return None


def _inspection_verdict(db: DBState, action, resolution: str):
    """The operator's verdict; applied now if the piece is back on the buffer, else when it is unloaded."""
    job = _live_job(db, action)
    if job is None:
        return None
    db.patch_job_context(job.id, {"disposition": resolution, "decidedBy": "operator"})
    if job.status == "SUSPENDED" and job.position_type == "ON_BUFFER":
        # Already back on the buffer, waiting for this decision.
        job = db.set_job_status(job.id, ("SUSPENDED",), "QUEUED", held_status=None)
        return advance_after_step(db, job)
    return None


def _mark_slot_done(db: DBState, action, resolution: str):
    if resolution == "MARK_DONE":
        slot = db.slot(action.equipment_id, (action.context or {})["slotNo"])
        if slot is not None and slot.status == "OCCUPIED":
            mark_slot_done(db, slot)
    return None


def _free_cancelled_slots(db: DBState, action, resolution: str):
    for piece in (action.context or {}).get("pieces", []):  # taken off their machines: the slots are free
        if piece["positionType"] == "ON_EQUIPMENT":
            free_equipment_slot(db, piece["positionRefId"], piece["jobId"])
    return None


def _acknowledged(db: DBState, action, resolution: str):
    return None  # its buffer slot is free in the DB already


MANUAL_ACTIONS: dict[str, ManualActionKind] = {k.kind: k for k in (
    ManualActionKind(
        ACTION_FAILED,
        "{task_kind} of job {job_id} failed ({error_code}). RETRY once the piece is back "
        "where it was before the action; SCRAP to take it out.",
        ("RETRY", "SCRAP"), _retry_or_scrap_job),
    ManualActionKind(
        EQUIPMENT_FAULT, "{equipment_id} did not start: {error_code}",
        ("RETRY", "SCRAP"), _retry_or_scrap_start),
    ManualActionKind(
        INSPECTION_DECISION, "Inspection of job {job_id} on {equipment_id} gave no verdict: decide.",
        ("PASS", "SCRAP", "REWORK"), _inspection_verdict),
    ManualActionKind(
        SIGNAL_MISMATCH,
        "{equipment_id} slot {slot_no}: the PLC reports job {reported_job_id} but the slot holds job "
        "{slot_job_id}. MARK_DONE treats the slot's job as done; IGNORE_SIGNAL drops the signal.",
        ("MARK_DONE", "IGNORE_SIGNAL"), _mark_slot_done),
    ManualActionKind(
        REMOVE_CANCELLED_PIECES,
        "Work order {order_code} was cancelled: take {count} piece(s) out of the cell.",
        ("DONE",), _free_cancelled_slots),
    ManualActionKind(
        REMOVE_FINISHED_PIECE,
        "Take the finished piece of job {job_id} off buffer slot {buffer_slot} "
        "({error_code}): the slot is free for the next piece.",
        ("DONE",), _acknowledged),
)}


def open_manual_action(db: DBState, kind: str, facts: Mapping, **columns):
    """Open a ``kind`` action: its text filled from ``facts``, its choices from the
    table; ``columns``: job_id, equipment_id, alarm_id, context."""
    spec = MANUAL_ACTIONS[kind]
    return db.create_manual_action(kind, spec.text.format_map(facts), list(spec.choices), **columns)


def resolve_manual_action(db: DBState, action, resolution: str) -> list[HardwareRequest]:
    """What an operator's answer does; a kind not in the table changes nothing."""
    spec = MANUAL_ACTIONS.get(action.kind)
    return (spec.resolve(db, action, resolution) if spec is not None else None) or []
