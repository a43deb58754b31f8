"""Start-up consistency checks (seed 004, 恢复策略).

After a restart PostgreSQL is the truth, but it may disagree with itself or
with the PLC (the process died between a hardware request and its result, a
database was restored, someone moved a piece by hand). Nothing is guessed
away: every disagreement becomes an :class:`Inconsistency` that the loop turns
into suspended jobs, an alarm and a manual action for an operator. Consistent
parts resume by themselves.

This module only *finds* inconsistencies, from plain snapshots of the DB rows
and the PLC state; it imports no framework and writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LIVE_JOB = ("PENDING", "QUEUED", "MOVING", "PROCESSING", "WAITING_UNLOAD", "PAUSED", "SUSPENDED", "ERROR")

# Manual-action kinds, one per check.
SLOT_MISMATCH = "RECOVERY_SLOT_MISMATCH"
DUPLICATE_BUFFER_SLOT = "RECOVERY_DUPLICATE_BUFFER_SLOT"
BUFFER_SLOT_OUT_OF_RANGE = "RECOVERY_BUFFER_SLOT_OUT_OF_RANGE"
MACHINE_IDLE_BUT_DB_RUNNING = "RECOVERY_MACHINE_IDLE_BUT_DB_RUNNING"
MACHINE_RUNNING_BUT_DB_IDLE = "RECOVERY_MACHINE_RUNNING_BUT_DB_IDLE"
TASK_OUTCOME_UNKNOWN = "RECOVERY_TASK_OUTCOME_UNKNOWN"
PLC_UNREACHABLE = "RECOVERY_PLC_UNREACHABLE"

RECOVERY_KINDS = (
    SLOT_MISMATCH, DUPLICATE_BUFFER_SLOT, BUFFER_SLOT_OUT_OF_RANGE,
    MACHINE_IDLE_BUT_DB_RUNNING, MACHINE_RUNNING_BUT_DB_IDLE, TASK_OUTCOME_UNKNOWN,
    PLC_UNREACHABLE,
)

# What an operator may answer. CONFIRM accepts the state as recorded in the DB.
CHOICES: dict[str, tuple[str, ...]] = {
    SLOT_MISMATCH: ("CONFIRM", "PIECE_ON_MACHINE", "PIECE_REMOVED", "SCRAP"),
    DUPLICATE_BUFFER_SLOT: ("CONFIRM", "PIECE_REMOVED", "SCRAP"),
    BUFFER_SLOT_OUT_OF_RANGE: ("CONFIRM", "PIECE_REMOVED", "SCRAP"),
    MACHINE_IDLE_BUT_DB_RUNNING: ("CONFIRM", "CYCLE_DONE", "PIECE_REMOVED", "SCRAP"),
    MACHINE_RUNNING_BUT_DB_IDLE: ("CONFIRM",),
    TASK_OUTCOME_UNKNOWN: ("CONFIRM", "ACTION_DONE", "PIECE_REMOVED", "SCRAP"),
    PLC_UNREACHABLE: ("CONFIRM",),
}


@dataclass(frozen=True)
class Inconsistency:
    kind: str
    text: str
    job_ids: tuple[int, ...] = ()
    equipment_id: str | None = None
    task_id: int | None = None
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def choices(self) -> tuple[str, ...]:
        return CHOICES[self.kind]


@dataclass(frozen=True)
class JobRow:
    id: int
    status: str
    position_type: str
    position_ref_id: str | None
    temp_slot_no: int | None


@dataclass(frozen=True)
class SlotRow:
    equipment_id: str
    slot_no: int
    status: str
    current_job_id: int | None


@dataclass(frozen=True)
class TaskRow:
    id: int
    kind: str
    status: str
    job_id: int | None
    equipment_id: str | None


def find_inconsistencies(
    jobs: Iterable[JobRow],
    slots: Iterable[SlotRow],
    tasks: Iterable[TaskRow],
    plc_state: Mapping[str, Any] | None,
    buffer_slots: int,
    equipment_running: Iterable[str] | None = None,
) -> list[Inconsistency]:
    """``equipment_running``: the equipment the DB records RUNNING (a machine
    was started). When given, only those are expected to run on the PLC: a
    batch machine with pieces loaded but not started yet is not an
    inconsistency. None checks every machine with a piece in process."""
    started = None if equipment_running is None else set(equipment_running)
    jobs = [j for j in jobs if j.status in LIVE_JOB]
    slots = list(slots)
    found: list[Inconsistency] = []
    by_id = {j.id: j for j in jobs}
    slot_by_key = {(s.equipment_id, s.slot_no): s for s in slots}

    # 1. Job on equipment vs the slot's record, both ways.
    for j in jobs:
        if j.position_type != "ON_EQUIPMENT":
            continue
        eq, _, no = (j.position_ref_id or "").partition(":")
        slot = slot_by_key.get((eq, int(no))) if no.isdigit() else None
        if slot is None or slot.current_job_id != j.id or slot.status == "EMPTY":
            found.append(Inconsistency(
                SLOT_MISMATCH,
                f"Job {j.id} is recorded on {j.position_ref_id}, but that slot "
                + ("does not exist" if slot is None else
                   f"is {slot.status} holding {slot.current_job_id or 'nothing'}") + ".",
                job_ids=(j.id,), equipment_id=eq or None,
                context={"positionRefId": j.position_ref_id},
            ))
    for s in slots:
        if s.current_job_id is None:
            continue
        j = by_id.get(s.current_job_id)
        if j is None or j.position_type != "ON_EQUIPMENT" or j.position_ref_id != f"{s.equipment_id}:{s.slot_no}":
            where = "is not a live job" if j is None else f"is recorded at {j.position_type} {j.position_ref_id or ''}".rstrip()
            found.append(Inconsistency(
                SLOT_MISMATCH,
                f"Slot {s.equipment_id}:{s.slot_no} holds job {s.current_job_id}, which {where}.",
                job_ids=(s.current_job_id,) if j else (), equipment_id=s.equipment_id,
                context={"slotNo": s.slot_no},
            ))

    # 2. Buffer: duplicates and out-of-range slot numbers.
    holders: dict[int, list[int]] = defaultdict(list)
    for j in jobs:
        if j.temp_slot_no is None:
            continue
        if not 1 <= j.temp_slot_no <= buffer_slots:
            found.append(Inconsistency(
                BUFFER_SLOT_OUT_OF_RANGE,
                f"Job {j.id} holds buffer slot {j.temp_slot_no}; the buffer has slots 1..{buffer_slots}.",
                job_ids=(j.id,), context={"tempSlotNo": j.temp_slot_no},
            ))
        else:
            holders[j.temp_slot_no].append(j.id)
    for slot_no, ids in sorted(holders.items()):
        if len(ids) > 1:
            found.append(Inconsistency(
                DUPLICATE_BUFFER_SLOT,
                f"Jobs {', '.join(map(str, sorted(ids)))} all hold buffer slot {slot_no}.",
                job_ids=tuple(sorted(ids)), context={"tempSlotNo": slot_no},
            ))

    # 3. Tasks that were running when the process died: outcome unknown.
    for t in tasks:
        if t.status == "RUNNING":
            found.append(Inconsistency(
                TASK_OUTCOME_UNKNOWN,
                f"Task {t.id} ({t.kind}) was running when the line controller or the hardware service restarted; "
                "whether the hardware finished it is unknown.",
                job_ids=(t.job_id,) if t.job_id else (), equipment_id=t.equipment_id, task_id=t.id,
            ))

    # 4. The DB against the PLC.
    if plc_state is None or not plc_state.get("connected", False):
        processing = sorted({j.id for j in jobs if j.status == "PROCESSING"})
        if processing:
            found.append(Inconsistency(
                PLC_UNREACHABLE,
                "The PLC could not be read, so machines with pieces in process cannot be checked.",
                job_ids=tuple(processing),
            ))
        return found
    plc_machines = {m["id"]: m for m in plc_state.get("equipment", [])}
    running_in_db: dict[str, list[int]] = defaultdict(list)
    for s in slots:
        j = by_id.get(s.current_job_id) if s.current_job_id else None
        if s.status == "OCCUPIED" and j is not None and j.status == "PROCESSING":
            running_in_db[s.equipment_id].append(j.id)
    for eq_id, job_ids in sorted(running_in_db.items()):
        if started is not None and eq_id not in started:
            continue
        m = plc_machines.get(eq_id, {})
        done_on_plc = any(sl.get("done") for sl in m.get("slots", []))
        if not m.get("running") and not done_on_plc:
            found.append(Inconsistency(
                MACHINE_IDLE_BUT_DB_RUNNING,
                f"{eq_id} should be processing job(s) {', '.join(map(str, job_ids))}, "
                "but the PLC reports it neither running nor done.",
                job_ids=tuple(job_ids), equipment_id=eq_id,
            ))
    for eq_id, m in sorted(plc_machines.items()):
        if m.get("running") and eq_id not in running_in_db:
            found.append(Inconsistency(
                MACHINE_RUNNING_BUT_DB_IDLE,
                f"The PLC reports {eq_id} running, but no piece is being processed there in the database.",
                equipment_id=eq_id,
            ))
    return found
