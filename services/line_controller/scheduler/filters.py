"""Filters: the second layer. Each removes the candidates that cannot be
done now, for one reason; a candidate survives only if every filter allows
it. Filters re-check what generators assumed, so a generator bug or a
hand-made candidate never reaches the robot. A new constraint is a new class
here, added to :func:`default_filters`."""

from __future__ import annotations

from typing import Protocol

from .action_types import Action, Load, Mark, Refill, Scan, StartMachine, Swap, Unload
from .state import SystemState


class Filter(Protocol):
    def allows(self, action: Action, state: SystemState) -> bool: ...


def _parts(action: Action, kind: type, swap_part: str) -> tuple:
    """``action`` itself if it is a ``kind``, a swap's ``swap_part`` half, else nothing."""
    if isinstance(action, kind):
        return (action,)
    return (getattr(action, swap_part),) if isinstance(action, Swap) else ()


def _unload_parts(action: Action) -> tuple[Unload, ...]:
    return _parts(action, Unload, "unload")


def _load_parts(action: Action) -> tuple[Load, ...]:
    return _parts(action, Load, "load")


def _equipment_ids(action: Action) -> tuple[str, ...]:
    if isinstance(action, Unload | Load | Swap | StartMachine):
        return (action.equipment_id,)
    return ()


class RobotFree:
    """One robot: nothing for it while a robot or tool task is open."""

    def allows(self, action, state):
        return not (action.uses_robot and state.robot_busy)


class ToolFree:
    """A scan or mark waits while a tool task is open. With one robot holding
    the tools this follows from :class:`RobotFree`; it stays a rule of its
    own so a second robot could not break tool exclusivity silently."""

    def allows(self, action, state):
        return not (isinstance(action, Scan | Mark) and state.tool_busy)


class EquipmentUp:
    """No action on equipment that is FAULT or OFFLINE (or unknown), except a
    plain unload from a FAULT machine: an operator's answer to a stopped cycle
    (RETURN_TO_BUFFER, SCRAP) takes the pieces off a machine still in fault."""

    def allows(self, action, state):
        for eq_id in _equipment_ids(action):
            eq = state.equipment_by_id.get(eq_id)
            if eq is None:
                return False
            if eq.down and not (isinstance(action, Unload) and eq.status == "FAULT"):
                return False
        return True


class EquipmentNotInQuestion:
    """Nothing is loaded onto or started on a machine an open manual action is
    about (a fault, a restart-recovery finding) until it is answered."""

    def allows(self, action, state):
        if isinstance(action, Load | Swap | StartMachine):
            return action.equipment_id not in state.equipment_in_question
        return True


class SlotReady:
    """The equipment slot is in the state the action needs, and no robot task
    is already working on it: an unload takes from a DONE slot holding that
    job, a plain load needs an EMPTY slot, a start needs OCCUPIED slots
    holding those jobs and no start already in flight."""

    def allows(self, action, state):
        if isinstance(action, StartMachine):
            eq = state.equipment_by_id.get(action.equipment_id)
            if eq is None or state.machine_start_open(eq.id) or not action.jobs:
                return False
            for slot_no, job_id in action.jobs:
                slot = eq.slot(slot_no)
                if (slot is None or slot.status != "OCCUPIED" or slot.current_job_id != job_id
                        or state.slot_has_open_task(eq.id, slot_no)):
                    return False
            return True
        for unload in _unload_parts(action):
            slot = self._slot(state, unload.equipment_id, unload.slot_no)
            if slot is None or slot.status != "DONE" or slot.current_job_id != unload.job_id:
                return False
        if isinstance(action, Load):
            slot = self._slot(state, action.equipment_id, action.slot_no)
            if slot is None or slot.status != "EMPTY":
                return False
        for part in (*_unload_parts(action), *_load_parts(action)):
            if state.slot_has_open_task(part.equipment_id, part.slot_no):
                return False
        return True

    @staticmethod
    def _slot(state, equipment_id, slot_no):
        eq = state.equipment_by_id.get(equipment_id)
        return eq.slot(slot_no) if eq is not None else None


class JobsNotHeld:
    """Every job the action moves exists, is not PAUSED / SUSPENDED / ERROR
    or terminal, belongs to a RUNNING order, and has no task in flight."""

    def allows(self, action, state):
        busy = state.jobs_with_open_task
        for job_id in action.job_ids:
            job = state.jobs_by_id.get(job_id)
            if job is None or job.held or not job.live or job_id in busy:
                return False
            if not state.order_running(job):
                return False
        return True


class JobsAtStep:
    """Every job is where, and at the route step, the action assumes: an
    unloaded piece is WAITING_UNLOAD on that slot; a loaded, scanned or marked
    piece is QUEUED on its own buffer slot with that step next; a started
    piece is QUEUED on that slot; a refilled piece is PENDING at the dock."""

    def allows(self, action, state):
        jobs = state.jobs_by_id
        for unload in _unload_parts(action):
            job = jobs.get(unload.job_id)
            if (job is None or job.status != "WAITING_UNLOAD" or job.position_type != "ON_EQUIPMENT"
                    or job.position_ref_id != f"{unload.equipment_id}:{unload.slot_no}"
                    or job.temp_slot_no != unload.buffer_slot):
                return False
        for load in _load_parts(action):
            job = jobs.get(load.job_id)
            eq = state.equipment_by_id.get(load.equipment_id)
            if (job is None or eq is None or not job.waiting_on_buffer
                    or job.temp_slot_no != load.buffer_slot
                    or not job.next_step.on_equipment or job.next_step.equipment_kind != eq.kind):
                return False
        if isinstance(action, Scan | Mark):
            job = jobs.get(action.job_id)
            op = "scan" if isinstance(action, Scan) else "mark"
            if (job is None or not job.waiting_on_buffer or job.temp_slot_no != action.buffer_slot
                    or job.next_step.op != op):
                return False
        if isinstance(action, StartMachine):
            for slot_no, job_id in action.jobs:
                job = jobs.get(job_id)
                if (job is None or job.status != "QUEUED" or job.position_type != "ON_EQUIPMENT"
                        or job.position_ref_id != f"{action.equipment_id}:{slot_no}"):
                    return False
        if isinstance(action, Refill):
            if not all(jobs.get(j) is not None and jobs[j].on_dock for j in action.job_ids):
                return False
        return True


class BufferCapacity:
    """The buffer table holds at most ``buffer_size`` pieces, one per slot:
    a refill only fills free slots within 1..size, each once; every other
    action uses the buffer slot its job already holds."""

    def allows(self, action, state):
        occupancy = state.buffer_occupancy
        if isinstance(action, Refill):
            slots = action.buffer_slots
            free = set(state.free_buffer_slots)
            return (
                bool(slots)
                and len(set(slots)) == len(slots)
                and len(set(action.job_ids)) == len(slots)
                and all(s in free for s in slots)
                and len(occupancy) + len(slots) <= state.buffer_size
            )
        for part in (*_unload_parts(action), *_load_parts(action)):
            if occupancy.get(part.buffer_slot) != part.job_id:
                return False
        if isinstance(action, Scan | Mark) and occupancy.get(action.buffer_slot) != action.job_id:
            return False
        return True


class BatchNotRunning:
    """Nothing goes into batch equipment while its batch runs (or is being
    started)."""

    def allows(self, action, state):
        for load in _load_parts(action):
            eq = state.equipment_by_id.get(load.equipment_id)
            if eq is not None and eq.batch and (eq.status == "RUNNING" or state.machine_start_open(eq.id)):
                return False
        return True


class BatchReady:
    """A batch machine starts once: it is not running, every finished piece of
    the last batch is out, no robot task is working on it, and either every
    slot is loaded or no piece now waiting on the buffer could still join
    (pieces still upstream are not waited for: that could wait forever).
    Non-batch equipment starts as soon as a piece is loaded."""

    def allows(self, action, state):
        if not isinstance(action, StartMachine):
            return True
        eq = state.equipment_by_id.get(action.equipment_id)
        if eq is None or not eq.batch:
            return True
        if eq.status == "RUNNING" or any(s.status == "DONE" for s in eq.slots):
            return False
        if any(t.uses_robot for t in state.equipment_with_open_task.get(eq.id, ())):
            return False
        if all(s.status != "EMPTY" for s in eq.slots):
            return True
        return not any(
            j.next_step.on_equipment and j.next_step.equipment_kind == eq.kind and not j.held
            for j in state.waiting_jobs
        )


class PositionsSettled:
    """Nothing goes into a position a failed or lost action touched (an
    equipment slot, a buffer slot) while its alarm is open: whether a piece is
    there is the operator's answer, not the scheduler's guess."""

    def allows(self, action, state):
        for load in _load_parts(action):
            if (load.equipment_id, load.slot_no) in state.slots_in_question:
                return False
        if isinstance(action, Refill):
            return not set(action.buffer_slots) & state.buffer_slots_in_question
        return True


def default_filters() -> list[Filter]:
    return [
        RobotFree(), ToolFree(), EquipmentUp(), EquipmentNotInQuestion(), SlotReady(), JobsNotHeld(), JobsAtStep(),
        BufferCapacity(), PositionsSettled(), BatchNotRunning(), BatchReady(),
    ]
