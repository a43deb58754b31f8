"""Start-up consistency checks (seed 004, 恢复策略), one function per check.

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
from typing import Any

from shared.db.models import JOB_LIVE

# What the checks find, named here too: callers know one module (``consistency_checks as r``).
from .recovery_findings import (  # noqa: F401
    BUFFER_PIECE_MISSING,
    BUFFER_PIECE_UNKNOWN,
    BUFFER_SLOT_OUT_OF_RANGE,
    CHOICES,
    DOCK_COUNT_MISMATCH,
    DUPLICATE_BUFFER_SLOT,
    MACHINE_IDLE_BUT_DB_RUNNING,
    MACHINE_PIECE_MISSING,
    MACHINE_RUNNING_BUT_DB_IDLE,
    PLC_UNREACHABLE,
    RECOVERY_KINDS,
    RECOVERY_PREFIX,
    SAFE_TO_REPEAT,
    SLOT_MISMATCH,
    SOURCE_EMPTY,
    TASK_OUTCOME_UNKNOWN,
    DockRecord,
    Inconsistency,
    JobRow,
    SlotRow,
    TaskRow,
    is_recovery,
)


def find_inconsistencies(
    jobs: Iterable[JobRow],
    slots: Iterable[SlotRow],
    tasks: Iterable[TaskRow],
    plc_state: Mapping[str, Any] | None,
    buffer_slots: int,
    equipment_running: Iterable[str] | None = None,
    buffer_busy: Iterable[int] = (),
    dock: DockRecord | None = None,
    machine_busy: Iterable[tuple[str, int]] = (),
) -> list[Inconsistency]:
    """Every check, in this order: the DB with itself (equipment slots, the
    buffer, running tasks), then the DB against the PLC (machines, then, when
    the picture has them, the buffer sensors and the dock's count).

    ``equipment_running``: the equipment the DB records RUNNING (a machine
    was started). When given, only those are expected to run on the PLC: a
    batch machine with pieces loaded but not started yet is not an
    inconsistency. None checks every machine with a piece in process.
    ``buffer_busy``: buffer slots an open task or an uncleared failure is
    about (a piece may be on its way there or away): their own question or
    result settles them, so the sensors are not compared there.
    ``dock``: the DB's record of the dock (None: not compared).
    ``machine_busy``: (equipment, slot) pairs an open task or an uncleared failure
    is about, as ``buffer_busy`` for the machines' slots."""
    started = None if equipment_running is None else set(equipment_running)
    jobs = [j for j in jobs if j.status in JOB_LIVE]
    slots = list(slots)
    found = [*jobs_not_in_their_slot(jobs, slots), *slots_holding_another_job(jobs, slots),
             *buffer_slots_out_of_range(jobs, buffer_slots), *buffer_slots_held_twice(jobs, buffer_slots),
             *tasks_with_unknown_outcome(tasks)]
    if plc_state is None or not plc_state.get("connected", False):
        return found + pieces_in_process_unchecked(jobs)
    plc_machines = {m["id"]: m for m in plc_state.get("equipment", [])}
    missing = machine_pieces_missing(jobs, slots, plc_machines, set(machine_busy))
    # A piece not in its slot is asked about once, where it is; not also whether its cycle ended.
    gone = {j for inc in missing for j in inc.job_ids}
    processing = {eq: ids for eq, ids in ((eq, [j for j in ids if j not in gone])
                                          for eq, ids in _processing_by_machine(jobs, slots).items()) if ids}
    found += (missing + machines_idle_but_db_running(processing, plc_machines, started)
              + machines_running_but_db_idle(processing, plc_machines))
    sensors = buffer_sensors(plc_state)
    if sensors is not None:
        busy = set(buffer_busy)
        found += (buffer_pieces_missing(jobs, sensors, busy)
                  + buffer_pieces_unknown(jobs, sensors, busy, buffer_slots))
    plc_dock = plc_state.get("dock")
    if dock is not None and plc_dock is not None:
        found += dock_count_disagrees(dock, int(plc_dock["pieces"]))
    return found


def buffer_sensors(plc_state: Mapping[str, Any] | None) -> dict[int, bool] | None:
    """Buffer slot → whether its sensor shows a piece; None when the picture has no buffer."""
    if not plc_state or not plc_state.get("connected") or plc_state.get("buffer") is None:
        return None
    return {int(b["slotNo"]): bool(b["occupied"]) for b in plc_state["buffer"]}


def jobs_not_in_their_slot(jobs: list[JobRow], slots: list[SlotRow]) -> list[Inconsistency]:
    """A job recorded on equipment whose slot is missing, empty or holds another job."""
    slot_by_key = {(s.equipment_id, s.slot_no): s for s in slots}
    found = []
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
                facts={"case": "JOB_SLOT_MISSING" if slot is None else "JOB_SLOT_DIFFERS", "job_id": j.id,
                       "position_ref_id": j.position_ref_id,
                       "slot_status": None if slot is None else slot.status,
                       "slot_job_id": None if slot is None else slot.current_job_id},
            ))
    return found


def slots_holding_another_job(jobs: list[JobRow], slots: list[SlotRow]) -> list[Inconsistency]:
    """A slot holding a job that is not live or is recorded somewhere else."""
    by_id = {j.id: j for j in jobs}
    found = []
    for s in slots:
        if s.current_job_id is None:
            continue
        j = by_id.get(s.current_job_id)
        if j is None or j.position_type != "ON_EQUIPMENT" or j.position_ref_id != f"{s.equipment_id}:{s.slot_no}":
            where = ("is not a live job" if j is None
                     else f"is recorded at {j.position_type} {j.position_ref_id or ''}".rstrip())
            found.append(Inconsistency(
                SLOT_MISMATCH,
                f"Slot {s.equipment_id}:{s.slot_no} holds job {s.current_job_id}, which {where}.",
                job_ids=(s.current_job_id,) if j else (), equipment_id=s.equipment_id,
                context={"slotNo": s.slot_no},
                facts={"case": "SLOT_JOB_NOT_LIVE" if j is None else "SLOT_JOB_ELSEWHERE",
                       "equipment_id": s.equipment_id, "slot_no": s.slot_no, "slot_job_id": s.current_job_id,
                       "position_type": None if j is None else j.position_type,
                       "position_ref_id": None if j is None else j.position_ref_id},
            ))
    return found


def buffer_slots_out_of_range(jobs: list[JobRow], buffer_slots: int) -> list[Inconsistency]:
    return [Inconsistency(
        BUFFER_SLOT_OUT_OF_RANGE,
        f"Job {j.id} holds buffer slot {j.temp_slot_no}; the buffer has slots 1..{buffer_slots}.",
        job_ids=(j.id,), context={"tempSlotNo": j.temp_slot_no},
        facts={"job_id": j.id, "buffer_slot": j.temp_slot_no, "buffer_slots": buffer_slots},
    ) for j in jobs if j.temp_slot_no is not None and not 1 <= j.temp_slot_no <= buffer_slots]


def buffer_slots_held_twice(jobs: list[JobRow], buffer_slots: int) -> list[Inconsistency]:
    """A buffer slot (in range) that more than one live job holds."""
    holders: dict[int, list[int]] = defaultdict(list)
    for j in jobs:
        if j.temp_slot_no is not None and 1 <= j.temp_slot_no <= buffer_slots:
            holders[j.temp_slot_no].append(j.id)
    return [Inconsistency(
        DUPLICATE_BUFFER_SLOT,
        f"Jobs {', '.join(map(str, sorted(ids)))} all hold buffer slot {slot_no}.",
        job_ids=tuple(sorted(ids)), context={"tempSlotNo": slot_no},
        facts={"job_ids": sorted(ids), "buffer_slot": slot_no},
    ) for slot_no, ids in sorted(holders.items()) if len(ids) > 1]


def tasks_with_unknown_outcome(tasks: Iterable[TaskRow]) -> list[Inconsistency]:
    """Tasks that were running when the process died."""
    return [Inconsistency(
        TASK_OUTCOME_UNKNOWN,
        f"Task {t.id} ({t.kind}) was running when the line controller or the hardware service restarted; "
        "whether the hardware finished it is unknown.",
        job_ids=(t.job_id,) if t.job_id else (), equipment_id=t.equipment_id, task_id=t.id,
        facts={"task_id": t.id, "task_kind": t.kind, "job_id": t.job_id, "equipment_id": t.equipment_id},
    ) for t in tasks if t.status == "RUNNING"]


def pieces_in_process_unchecked(jobs: list[JobRow]) -> list[Inconsistency]:
    """The PLC could not be read: pieces in process are in question."""
    processing = sorted({j.id for j in jobs if j.status == "PROCESSING"})
    if not processing:
        return []
    return [Inconsistency(
        PLC_UNREACHABLE,
        "The PLC could not be read, so machines with pieces in process cannot be checked.",
        job_ids=tuple(processing), facts={"job_ids": processing},
    )]


def _processing_by_machine(jobs: list[JobRow], slots: list[SlotRow]) -> dict[str, list[int]]:
    """Equipment → the PROCESSING jobs in its OCCUPIED slots, as the DB records them."""
    by_id = {j.id: j for j in jobs}
    running_in_db: dict[str, list[int]] = defaultdict(list)
    for s in slots:
        j = by_id.get(s.current_job_id) if s.current_job_id else None
        if s.status == "OCCUPIED" and j is not None and j.status == "PROCESSING":
            running_in_db[s.equipment_id].append(j.id)
    return running_in_db


def machines_idle_but_db_running(processing: dict[str, list[int]], plc_machines: Mapping[str, Mapping],
                                 started: set[str] | None) -> list[Inconsistency]:
    """A machine the DB has processing (and started) that the PLC reports neither running nor done."""
    found = []
    for eq_id, job_ids in sorted(processing.items()):
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
                facts={"equipment_id": eq_id, "job_ids": list(job_ids)},
            ))
    return found


def machines_running_but_db_idle(processing: dict[str, list[int]],
                                 plc_machines: Mapping[str, Mapping]) -> list[Inconsistency]:
    return [Inconsistency(
        MACHINE_RUNNING_BUT_DB_IDLE,
        f"The PLC reports {eq_id} running, but no piece is being processed there in the database.",
        equipment_id=eq_id, facts={"equipment_id": eq_id},
    ) for eq_id, m in sorted(plc_machines.items()) if m.get("running") and eq_id not in processing]


def machine_pieces_missing(jobs: list[JobRow], slots: list[SlotRow], plc_machines: Mapping[str, Mapping],
                           busy: set[tuple[str, int]]) -> list[Inconsistency]:
    """A job the DB has in a machine slot (the slot OCCUPIED or DONE with it, the
    job recorded there) where the PLC's ``OCCUPIED`` shows no piece: what an
    asynchronous standby that lost an unload, or a hand that took the piece out,
    leaves. A slot a task or a failure is about is left to its own result or question."""
    by_id = {j.id: j for j in jobs}
    found = []
    for s in slots:
        j = by_id.get(s.current_job_id) if s.current_job_id else None
        if (j is None or s.status == "EMPTY" or (s.equipment_id, s.slot_no) in busy
                or j.position_type != "ON_EQUIPMENT" or j.position_ref_id != f"{s.equipment_id}:{s.slot_no}"):
            continue
        plc_slot = next((p for p in plc_machines.get(s.equipment_id, {}).get("slots", [])
                         if p.get("slotNo") == s.slot_no), None)
        if plc_slot is not None and plc_slot.get("occupied") is False:
            found.append(machine_piece_missing(j, s.equipment_id, s.slot_no))
    return found


def machine_piece_missing(job: JobRow, equipment_id: str, slot_no: int, *, case: str | None = None,
                          task_id: int | None = None) -> Inconsistency:
    """The question where the piece of ``job`` is, which the DB has in ``equipment_id``
    slot ``slot_no``: found by the check, or (``case`` SOURCE_EMPTY, ``task_id``) by
    an unload that found the slot empty. The same finding either way (one question)."""
    if case == SOURCE_EMPTY:
        text = (f"The robot found no piece to unload in {equipment_id} slot {slot_no} (SOURCE_EMPTY), "
                f"where the database records job {job.id}: where is the piece?")
    else:
        text = (f"Job {job.id} is recorded in {equipment_id} slot {slot_no}, but the PLC's OCCUPIED "
                "there shows no piece: where is it?")
    facts = {"job_id": job.id, "equipment_id": equipment_id, "slot_no": slot_no,
             "buffer_slot": job.temp_slot_no}
    if case is not None:
        facts.update(case=case, task_id=task_id)
    return Inconsistency(MACHINE_PIECE_MISSING, text, job_ids=(job.id,), equipment_id=equipment_id,
                         context={"slotNo": slot_no}, facts=facts)


def buffer_pieces_missing(jobs: list[JobRow], sensors: Mapping[int, bool], busy: set[int]) -> list[Inconsistency]:
    """A job the DB has on a buffer slot whose sensor shows no piece."""
    return [Inconsistency(
        BUFFER_PIECE_MISSING,
        f"Job {j.id} is recorded on buffer slot {j.temp_slot_no}, but the PLC's sensor there shows no piece.",
        job_ids=(j.id,), context={"tempSlotNo": j.temp_slot_no},
        facts={"job_id": j.id, "buffer_slot": j.temp_slot_no},
    ) for j in jobs if j.position_type == "ON_BUFFER" and j.temp_slot_no not in busy
        and sensors.get(j.temp_slot_no) is False]


def buffer_pieces_unknown(jobs: list[JobRow], sensors: Mapping[int, bool], busy: set[int],
                          buffer_slots: int) -> list[Inconsistency]:
    """A buffer sensor showing a piece on a slot no live job holds (``temp_slot_no``,
    the buffer's only record): the DB does not know that piece."""
    held = {j.temp_slot_no for j in jobs if j.temp_slot_no is not None}
    return [Inconsistency(
        BUFFER_PIECE_UNKNOWN,
        f"The PLC's sensor shows a piece on buffer slot {n}, which no job holds in the database.",
        context={"bufferSlot": n}, facts={"buffer_slot": n},
    ) for n, occupied in sorted(sensors.items())
        if occupied and 1 <= n <= buffer_slots and n not in held and n not in busy]


def dock_count_disagrees(dock: DockRecord, plc_pieces: int) -> list[Inconsistency]:
    """The PLC counts fewer pieces at the dock than the DB, by more than the
    refills the count may still hold: pieces left the dock that no record accounts
    for (a restored database, pieces taken by hand). More pieces than recorded is
    no question (a pallet came; the count follows the PLC)."""
    if dock.pieces is None or plc_pieces >= dock.pieces - dock.may_have_left:
        return []
    missing = dock.pieces - dock.may_have_left - plc_pieces
    return [Inconsistency(
        DOCK_COUNT_MISMATCH,
        f"The PLC counts {plc_pieces} piece(s) at the dock; the database expected at least "
        f"{dock.pieces - dock.may_have_left}: {missing} piece(s) left the dock without a record.",
        context={"dockPieces": dock.pieces, "plcPieces": plc_pieces},
        facts={"plc_pieces": plc_pieces, "db_pieces": dock.pieces, "missing": missing},
    )]


def safe_to_repeat(task: TaskRow, job: JobRow | None, slot_no: int | None,
                   sensors: Mapping[int, bool] | None) -> bool:
    """Whether an action of unknown outcome is sent again rather than asked about:
    a kind that is harmless to repeat (``SAFE_TO_REPEAT``), its piece where it was
    when the action was sent (by the records: on the same buffer slot, still in
    that step), and, where the PLC's buffer sensors were read, a piece there."""
    if task.kind not in SAFE_TO_REPEAT or job is None or slot_no is None:
        return False
    in_place = (job.position_type == "ON_BUFFER" and job.temp_slot_no == slot_no
                and job.status in ("PROCESSING", "SUSPENDED", "PAUSED"))
    return in_place and (sensors is None or sensors.get(slot_no) is True)
