"""PLC signals and other external events (from the hardware service's watcher)."""

from __future__ import annotations

from .. import consistency_checks as r
from .. import manual_actions as ma
from .. import messages as m
from ..dbstate import Rejected
from ..job_lifecycle import mark_slot_done
from ..machine_faults import suspend_stopped_cycles
from ..payloads import instant
from .recovery import check_against_plc


def _target_slot(ctx, equipment, slot_no, job_id=None):
    """The slot a non-batch done signal means: the one holding ``jobId``; else
    the only one; else ``slotNo`` when it is > 1; else the earliest-occupied
    one (FIFO)."""
    if job_id is not None:
        holding = [s for s in ctx.db.slots(equipment.id) if s.current_job_id == job_id]
        if holding:
            return holding[0]
    if equipment.slot_count == 1:
        return ctx.db.slot(equipment.id, 1)
    if slot_no is not None and slot_no > 1:
        if slot_no > equipment.slot_count:
            raise Rejected("VALIDATION_ERROR", f"slotNo: {equipment.id} has {equipment.slot_count} slots")
        return ctx.db.slot(equipment.id, slot_no)
    return ctx.db.earliest_occupied_slot(equipment.id)


def _unexpected(ctx, equipment, text, signal, slot_no=None):
    """A signal that matches nothing: no state change, an alarm for the operator.
    ``signal`` names which mismatch it is (the page words each its own way)."""
    ctx.db.raise_alarm("SIGNAL_UNEXPECTED", text, severity="WARNING", equipment_id=equipment.id,
                       facts={"equipment_id": equipment.id, "signal": signal, "slot_no": slot_no})


def _mismatch(ctx, equipment, slot, job_id):
    facts = {"equipment_id": equipment.id, "slot_no": slot.slot_no, "reported_job_id": job_id,
             "slot_job_id": slot.current_job_id}
    alarm = ctx.db.raise_alarm(
        "SIGNAL_JOB_MISMATCH",
        f"{equipment.id} slot {slot.slot_no} reports job {job_id}, the slot holds job {slot.current_job_id}",
        equipment_id=equipment.id, job_id=slot.current_job_id, facts=facts)
    ma.open_manual_action(
        ctx.db, ma.SIGNAL_MISMATCH, facts,
        job_id=slot.current_job_id, equipment_id=equipment.id,
        alarm_id=alarm.id, context={"slotNo": slot.slot_no, "reportedJobId": job_id})


def _equipment(ctx, machine_id):
    equipment = ctx.db.equipment(machine_id)
    ctx.target = ("equipment", machine_id)
    if equipment is None:
        raise Rejected("NOT_FOUND", f"machineId: no equipment {machine_id!r}")
    return equipment


def _machine_idle(ctx, equipment):
    if equipment.status == "RUNNING":
        ctx.db.set_equipment_status(equipment.id, "IDLE")


def machine_done(evt: m.MachineDone, ctx):
    equipment = _equipment(ctx, evt.machine_id)
    if equipment.kind == "inspection" and evt.passed is not None:
        return inspection_result(m.InspectionResult(evt.machine_id, evt.slot_no, evt.job_id,
                                                    evt.passed), ctx)
    if equipment.batch:
        slots = ctx.db.slots(equipment.id)
        occupied = [s for s in slots if s.status == "OCCUPIED"]
        if not occupied and evt.slot_no is not None and any(
                s.slot_no == evt.slot_no and s.status == "DONE" for s in slots):
            return None  # the same batch's done edge of another slot: already applied
        if not occupied:
            return _unexpected(ctx, equipment, f"{equipment.id} reports done with no piece loaded",
                               "DONE_NO_PIECE")
        if evt.job_id is not None and evt.job_id not in {s.current_job_id for s in occupied}:
            return _mismatch(ctx, equipment, occupied[0], evt.job_id)
        for slot in occupied:
            mark_slot_done(ctx.db, slot)
        _machine_idle(ctx, equipment)
        return None
    slot = _target_slot(ctx, equipment, evt.slot_no, evt.job_id)
    if slot is None or slot.status != "OCCUPIED":
        where = f"slot {slot.slot_no}" if slot is not None else "no occupied slot"
        return _unexpected(ctx, equipment, f"{equipment.id} reports done for {where}", "DONE_EMPTY_SLOT",
                           slot.slot_no if slot is not None else None)
    if evt.job_id is not None and evt.job_id != slot.current_job_id:
        return _mismatch(ctx, equipment, slot, evt.job_id)
    mark_slot_done(ctx.db, slot)
    if equipment.status == "RUNNING" and not any(s.status == "OCCUPIED" for s in ctx.db.slots(equipment.id)):
        _machine_idle(ctx, equipment)
    return None


def inspection_result(evt: m.InspectionResult, ctx):
    """The verdict goes into the job's context and decides what happens when the
    piece is back on the buffer: PASS → next step, SCRAP → scrapped, no verdict
    → an operator decides (INSPECTION_DECISION)."""
    equipment = _equipment(ctx, evt.machine_id)
    slot = _target_slot(ctx, equipment, evt.slot_no, evt.job_id)
    if (slot is not None and slot.status == "DONE" and evt.job_id in (None, slot.current_job_id)
            and "inspection" in (ctx.db.job(slot.current_job_id).context or {})):
        return None  # the verdict already came with the station's MachineDone
    if slot is None or slot.status != "OCCUPIED":
        return _unexpected(ctx, equipment, f"{equipment.id} reports an inspection with no piece loaded",
                           "INSPECTION_NO_PIECE")
    if evt.job_id is not None and evt.job_id != slot.current_job_id:
        return _mismatch(ctx, equipment, slot, evt.job_id)
    disposition = {True: "PASS", False: "SCRAP", None: "DECIDE"}[evt.passed]
    inspection = {"pass": evt.passed, "details": evt.details or {}, "equipmentId": equipment.id,
                  "at": ctx.db.now.isoformat()}
    ctx.db.patch_job_context(slot.current_job_id, {"inspection": inspection, "disposition": disposition})
    mark_slot_done(ctx.db, slot)
    _machine_idle(ctx, equipment)
    if disposition == "DECIDE":
        ma.open_manual_action(
            ctx.db, ma.INSPECTION_DECISION, {"job_id": slot.current_job_id, "equipment_id": equipment.id},
            job_id=slot.current_job_id, equipment_id=equipment.id, context={"inspection": inspection})
    return None


def pallet_arrived(evt: m.PalletArrived, ctx):
    """New pieces at the dock: the PLC's count is what refills may take (refills
    still on their way may already count in it: a refill that then finds the
    dock empty costs a robot move, nothing else); the round that follows refills."""
    ctx.db.emit("PalletArrived", {"count": evt.count})
    ctx.db.observe_dock(evt.count, evt.observed_at)


def refill_requested(evt: m.RefillRequested, ctx):
    ctx.db.emit("RefillRequested", {"reason": evt.reason})


def hardware_stopping(evt: m.HardwareStopping, ctx):
    """A hardware instance stops cleanly; the loop holds new robot work until the
    next instance starts (``EventLoop.hardware_away``). Recorded for the stream."""
    ctx.target = ("hardware", evt.instance_id)
    ctx.db.emit("HardwareStopping", {"instanceId": evt.instance_id, "startedAt": evt.started_at})


EQUIPMENT_FAULT_ALARM = ma.EQUIPMENT_FAULT_ALARM


def machine_fault(evt: m.MachineFault, ctx):
    """The PLC says a machine is in fault: FAULT (the scheduler gives it nothing,
    its time counts as FAULT) and an alarm, open while the PLC reports it. Pieces
    whose cycle it stopped are held in their slots, with one action for the
    operator (``machine_faults``). When the PLC says it is clear again the
    machine is IDLE and the alarm cleared; the clear alone restarts, moves or
    scraps nothing (an open action on the machine still holds it)."""
    equipment = _equipment(ctx, evt.machine_id)
    db = ctx.db
    raised = db.open_alarms(equipment_id=equipment.id, code=EQUIPMENT_FAULT_ALARM)
    if evt.fault is not None:
        if equipment.status != "FAULT":
            db.set_equipment_status(equipment.id, "FAULT")
        if not raised:
            db.raise_alarm(EQUIPMENT_FAULT_ALARM, f"{equipment.id} reports fault {evt.fault}",
                           equipment_id=equipment.id, facts={"equipment_id": equipment.id, "fault": evt.fault})
        suspend_stopped_cycles(db, equipment.id, reason=f"fault {evt.fault}")
        return None
    if not raised:
        return None  # not a fault this path raised (a failed start's, a recovery's): theirs to clear
    for alarm in raised:
        db.resolve_alarm(alarm.id, "plc")
    if equipment.status == "FAULT" and not db.open_manual_actions(
            (ma.EQUIPMENT_FAULT, *r.RECOVERY_KINDS), equipment_id=equipment.id):
        # A failed start's action or a recovery question keeps its FAULT until answered.
        db.set_equipment_status(equipment.id, "IDLE")
    return None


PLC_DISCONNECTED_ALARM = "PLC_DISCONNECTED"
PLC_IDENTITY_MISMATCH_ALARM = "PLC_IDENTITY_MISMATCH"  # also the hardware's error code for it


def stale_edge(ctx, edge: str, observed_at: str | None) -> bool:
    """An edge seen before the last one of its kind the loop applied: the two
    reached the loop out of order (separate deliveries). It changes nothing: a
    late "PLC lost" would hold a running line, a late fault would stop it."""
    seen, when = ctx.edges_seen.get(edge), instant("observedAt", observed_at)
    if seen is None or when is None or when > seen:
        return False
    ctx.outcome = "STALE"
    ctx.db.emit("SignalStale", {"messageId": ctx.message.id, "type": ctx.message.type,
                              "observedAt": observed_at, "lastApplied": seen.isoformat()})
    return True


def plc_connection(evt: m.PlcConnection, ctx):
    """The PLC link went down (an alarm: the line waits, it is not stuck silently)
    or came back: the alarm cleared, and what the PLC holds now checked against
    the records, as after a start (a PLC that restarted forgot its cycles)."""
    db = ctx.db
    ctx.target = ("plc", None)
    if stale_edge(ctx, "plc", evt.observed_at):
        return None
    raised = db.open_alarms(code=PLC_DISCONNECTED_ALARM)
    refused = db.open_alarms(code=PLC_IDENTITY_MISMATCH_ALARM)
    db.emit("PlcConnection", {"connected": evt.connected, "error": evt.error})
    if not evt.connected and evt.error_code == PLC_IDENTITY_MISMATCH_ALARM:
        # Another PLC answers at the address: refused, not merely away (the hardware sends it nothing).
        if not refused:
            db.raise_alarm(PLC_IDENTITY_MISMATCH_ALARM, f"{evt.error or 'the PLC is not this line’s'}; "
                           "the line waits for its own PLC.", facts={"error": evt.error})
        return None
    for alarm in refused:  # back, or merely away now
        db.resolve_alarm(alarm.id, "plc")
    if not evt.connected:
        if not raised:
            db.raise_alarm(PLC_DISCONNECTED_ALARM, f"The PLC does not answer ({evt.error or 'no reason given'}); "
                           "the line sends it nothing until it is back.", severity="WARNING",
                           facts={"error": evt.error})
        return None
    for alarm in raised:
        db.resolve_alarm(alarm.id, "plc")
    if evt.plc_state is None:
        return None
    # The checks compare the dock's record with the reading first, then the count follows it.
    # No disconnection on record: a new hardware instance's first picture, read
    # while the loop may have been sending it work.
    return check_against_plc(db, ctx.layout, evt.plc_state, while_sending=not raised)


ROBOT_FAULT_ALARM = "ROBOT_FAULT"


def robot_fault(evt: m.RobotFault, ctx):
    """The robot reports a fault (an emergency stop): an alarm while it lasts. The
    loop sends no robot or machine command meanwhile (``EventLoop.cell_stopped``);
    the action in flight fails as any robot failure does."""
    db = ctx.db
    ctx.target = ("robot", None)
    if stale_edge(ctx, "robot", evt.observed_at):
        return None
    raised = db.open_alarms(code=ROBOT_FAULT_ALARM)
    if evt.fault is not None:
        if not raised:
            db.raise_alarm(ROBOT_FAULT_ALARM, f"The robot reports fault {evt.fault}: the line waits "
                           "for it to be cleared.", facts={"fault": evt.fault})
        return None
    for alarm in raised:
        db.resolve_alarm(alarm.id, "plc")
    return None


HANDLERS = {
    m.HardwareStopping: hardware_stopping, m.MachineFault: machine_fault,
    m.PlcConnection: plc_connection, m.RobotFault: robot_fault,
    m.MachineDone: machine_done, m.InspectionResult: inspection_result,
    m.PalletArrived: pallet_arrived, m.RefillRequested: refill_requested,
}
