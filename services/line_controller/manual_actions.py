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
from dataclasses import dataclass, field

from shared import events as ev
from shared.db.models import JOB_TERMINAL

from .dbstate import DBState, Rejected
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
MACHINE_FAULT_DURING_CYCLE = "MACHINE_FAULT_DURING_CYCLE"
CYCLE_OVERDUE = "CYCLE_OVERDUE"

# The alarm a machine's own fault report raises, open for as long as the PLC
# reports the fault (seed 004: a fault is equipment FAULT and an alarm).
EQUIPMENT_FAULT_ALARM = "EQUIPMENT_FAULT"
# Refused answers that need the machine while its PLC still reports the fault.
EQUIPMENT_FAULTED = "EQUIPMENT_FAULTED"
# The kinds that put a machine in question: nothing is loaded onto it or started
# on it while one is open (unloading is still allowed).
MACHINE_IN_QUESTION = (EQUIPMENT_FAULT, MACHINE_FAULT_DURING_CYCLE, CYCLE_OVERDUE)

ABORT_TIMEOUT_SECONDS = 30.0  # an abort is answered at once by the PLC

Resolver = Callable[[DBState, object, str], "list[HardwareRequest] | None"]


# ACTION_FAILED's variant for an action that failed as the one before it did
# (``task_outcomes._repeated``): the same RETRY again would be a guess.
REPEATED = "REPEATED"


@dataclass(frozen=True)
class ManualActionKind:
    kind: str
    text: str  # a str.format template, filled from the case's facts
    choices: tuple[str, ...]
    resolve: Resolver
    # facts["case"] → (text, choices) for a case worded and answered otherwise
    variants: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


def _live_job(db: DBState, action):
    """The action's job, unless it has none or it is finished (then the answer changes nothing)."""
    job = db.job(action.job_id) if action.job_id is not None else None
    return None if job is None or job.status in JOB_TERMINAL else job


def _retry_or_scrap_job(db: DBState, action, resolution: str):
    """RETRY: the job back where and what it was before the failed action; SCRAP: scrapped."""
    job = _live_job(db, action)
    if job is None:
        return None
    if resolution in ("RETRY", "RETRY_AFTER_CHECK"):
        before = (action.context or {})["before"]
        restore_job(db, job.id, before, status=before["status"], held_status=None)
    else:
        scrap_job(db, job)
    return None


def plc_reports_fault(db: DBState, equipment_id: str) -> bool:
    """Whether the machine's PLC still reports a fault: its fault alarm is open
    from the fault edge until the clear edge (``handlers.signals.machine_fault``)."""
    return bool(db.open_alarms(equipment_id=equipment_id, code=EQUIPMENT_FAULT_ALARM))


def _machine_needed(db: DBState, action, resolution: str) -> None:
    if plc_reports_fault(db, action.equipment_id):
        raise Rejected(EQUIPMENT_FAULTED, f"{action.equipment_id} still reports a fault: answer "
                       f"{resolution} once it is cleared (the action stays open)")


def _retry_or_scrap_start(db: DBState, action, resolution: str):
    """Its suspended jobs back to what they were (RETRY) or scrapped; the machine
    IDLE again, unless the PLC still reports a fault (SCRAP needs no machine):
    then it stays FAULT, and the PLC's clear edge makes it IDLE."""
    if resolution == "RETRY":
        _machine_needed(db, action, resolution)
    equipment = db.equipment(action.equipment_id)
    if equipment.status == "FAULT" and not plc_reports_fault(db, equipment.id):
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


def _stopped_cycle(db: DBState, action, resolution: str):
    """A cycle a fault stopped: the answer applies at once (``apply_stopped_cycle_answer``)."""
    if resolution == "RESTART_CYCLE":
        _machine_needed(db, action, resolution)
    apply_stopped_cycle_answer(db, action.equipment_id, (action.context or {}).get("pieces", []), resolution)
    return None


def _overdue_cycle(db: DBState, action, resolution: str):
    """A cycle still running far past its time: it is aborted first (``ABORT_CYCLE``);
    once the PLC has aborted it, the answer applies as for a stopped cycle."""
    if resolution == "RESTART_CYCLE":
        _machine_needed(db, action, resolution)
    pieces = (action.context or {}).get("pieces", [])
    task = db.create_task(ev.ABORT_CYCLE, job_id=None, equipment_id=action.equipment_id,
                          params={"answer": resolution, "pieces": pieces, "manualActionId": action.id},
                          timeout_seconds=ABORT_TIMEOUT_SECONDS)
    db.start_task(task.id)
    return [HardwareRequest("abort_cycle", task.id, ev.MACHINE_ABORT_FAILED,
                            {"equipment_id": action.equipment_id})]


def apply_stopped_cycle_answer(db: DBState, equipment_id: str, pieces: list[dict], resolution: str) -> None:
    """The pieces of a stopped cycle, still in their slots. RESTART_CYCLE: they are
    QUEUED there, so the next round starts them again (a new cycle; the stopped
    one is void). RETURN_TO_BUFFER / SCRAP: their slots DONE, so the robot unloads
    them; unloaded, they do this step again later (``afterFault``) or are
    scrapped (``task_outcomes.unloaded``)."""
    held = []
    for piece in pieces:
        job = db.job(piece["jobId"])
        slot = db.slot(equipment_id, piece["slotNo"])
        if (job is not None and job.status == "SUSPENDED" and slot is not None
                and slot.status == "OCCUPIED" and slot.current_job_id == job.id):
            held.append((job, slot))
    if resolution == "RESTART_CYCLE":
        for job, _slot in held:
            db.set_job_status(job.id, ("SUSPENDED",), "QUEUED", held_status=None)
        return
    db.abort_cycles(equipment_id, [job.id for job, _slot in held])
    for job, slot in held:
        db.set_job_status(job.id, ("SUSPENDED",), "WAITING_UNLOAD", held_status=None,
                          context_patch={"afterFault": resolution})
        db.set_equipment_slot(equipment_id, slot.slot_no, ("OCCUPIED",), "DONE", job.id)


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
        ("RETRY", "SCRAP"), _retry_or_scrap_job,
        {REPEATED: ("{task_kind} of job {job_id} failed the same way {failures} times in a row "
                    "({error_code}): a plain RETRY is not offered again. RETRY_AFTER_CHECK once the "
                    "cause has been found and removed and the piece is back where it was before the "
                    "action; SCRAP to take it out.", ("RETRY_AFTER_CHECK", "SCRAP"))}),
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
    ManualActionKind(
        MACHINE_FAULT_DURING_CYCLE,
        "{equipment_id} faulted during the cycle of {pieces}. RESTART_CYCLE runs the cycle again "
        "with the pieces in place (once the fault is cleared); RETURN_TO_BUFFER puts each piece back "
        "on its buffer slot to do this step again later; SCRAP takes the pieces out of the cell.",
        ("RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"), _stopped_cycle),
    ManualActionKind(
        CYCLE_OVERDUE,
        "{equipment_id} has been running the cycle of {pieces} for far longer than it should "
        "({reason}). It is aborted first; then RESTART_CYCLE runs it again with the pieces in place; "
        "RETURN_TO_BUFFER puts each piece back on its buffer slot to do this step again later; "
        "SCRAP takes the pieces out of the cell.",
        ("RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"), _overdue_cycle),
)}


def open_manual_action(db: DBState, kind: str, facts: Mapping, **columns):
    """Open a ``kind`` action: its text filled from ``facts``, its choices from the
    table; ``columns``: job_id, equipment_id, alarm_id, context. The facts are kept
    too (``facts`` in its JSON): the page says the same in its reader's language."""
    spec = MANUAL_ACTIONS[kind]
    text, choices = spec.variants.get(facts.get("case"), (spec.text, spec.choices))
    return db.create_manual_action(kind, text.format_map(facts), list(choices), facts=facts, **columns)


def resolve_manual_action(db: DBState, action, resolution: str) -> list[HardwareRequest]:
    """What an operator's answer does; a kind not in the table changes nothing."""
    spec = MANUAL_ACTIONS.get(action.kind)
    return (spec.resolve(db, action, resolution) if spec is not None else None) or []
