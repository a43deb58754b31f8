"""Generators: the first layer. Each proposes candidate actions from the
snapshot without judging feasibility in full (that is the filters' job); a new
kind of move is a new class here, added to :func:`default_generators`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from .action_types import (
    Action,
    Load,
    Mark,
    Refill,
    RefillAssignment,
    Scan,
    StartMachine,
    Swap,
    Unload,
)
from .state import JobView, SystemState


class Generator(Protocol):
    def propose(self, state: SystemState) -> Iterator[Action]: ...


def _unload_for(state: SystemState, equipment_id: str, slot_no: int, job_id: int | None) -> Unload | None:
    job = state.jobs_by_id.get(job_id) if job_id is not None else None
    if job is None or job.temp_slot_no is None:
        return None
    return Unload(job_id=job.id, equipment_id=equipment_id, slot_no=slot_no, buffer_slot=job.temp_slot_no)


def _waiting_for_kind(state: SystemState, kind: str) -> Iterator[JobView]:
    for job in state.waiting_jobs:
        step = job.next_step
        if step is not None and step.on_equipment and step.equipment_kind == kind:
            yield job


class UnloadDone:
    """A DONE slot: take the finished piece back to its buffer slot."""

    def propose(self, state):
        for eq in state.equipment:
            for slot in eq.slots:
                if slot.status == "DONE":
                    unload = _unload_for(state, eq.id, slot.slot_no, slot.current_job_id)
                    if unload is not None:
                        yield unload


class SwapDone:
    """A DONE slot and a piece waiting for this kind of equipment: swap them
    in one visit."""

    def propose(self, state):
        for eq in state.equipment:
            for slot in eq.slots:
                if slot.status != "DONE":
                    continue
                unload = _unload_for(state, eq.id, slot.slot_no, slot.current_job_id)
                if unload is None:
                    continue
                for job in _waiting_for_kind(state, eq.kind):
                    if job.id != unload.job_id:
                        yield Swap(
                            unload=unload,
                            load=Load(job_id=job.id, buffer_slot=job.temp_slot_no,
                                      equipment_id=eq.id, slot_no=slot.slot_no),
                        )


class LoadWaiting:
    """A piece waiting for a machine step: onto the lowest EMPTY slot of each
    machine of that kind (not one in question after a lost or failed action)."""

    def propose(self, state):
        blocked = state.slots_in_question
        for job in state.waiting_jobs:
            step = job.next_step
            if not step.on_equipment:
                continue
            for eq in state.equipment_by_kind.get(step.equipment_kind, ()):
                slot = next((s for s in eq.slots
                             if s.status == "EMPTY" and (eq.id, s.slot_no) not in blocked), None)
                if slot is not None:
                    yield Load(job_id=job.id, buffer_slot=job.temp_slot_no,
                               equipment_id=eq.id, slot_no=slot.slot_no)


class ToolSteps:
    """A piece on the buffer whose next step is a scan or a mark."""

    def propose(self, state):
        for job in state.waiting_jobs:
            if job.next_step.op == "scan":
                yield Scan(job_id=job.id, buffer_slot=job.temp_slot_no)
            elif job.next_step.op == "mark":
                yield Mark(job_id=job.id, buffer_slot=job.temp_slot_no)


class StartLoaded:
    """Equipment with loaded pieces whose cycle has not started (slot
    OCCUPIED, job QUEUED on it): start them. Whether a batch machine should
    wait for more pieces is the :class:`~.filters.BatchReady` filter's call."""

    def propose(self, state):
        for eq in state.equipment:
            loaded = []
            for slot in eq.slots:
                job = state.jobs_by_id.get(slot.current_job_id) if slot.current_job_id else None
                if (slot.status == "OCCUPIED" and job is not None and job.status == "QUEUED"
                        and job.position_type == "ON_EQUIPMENT"):
                    loaded.append((slot.slot_no, job.id))
            if loaded:
                yield StartMachine(equipment_id=eq.id, jobs=tuple(loaded))


class RefillFromDock:
    """The seed's refill rule: when the buffer is empty (the start), fill every
    slot; afterwards, once at least ``threshold`` slots are free, bring
    ``batch_size``; never more than the dock holds (a short pallet is taken
    as it is, the rest follows when the next pallet arrives). Pieces are taken
    most urgent first and given the lowest free slots, so the choice is
    deterministic."""

    def __init__(self, threshold: int = 4, batch_size: int = 4):
        self.threshold = threshold
        self.batch_size = batch_size

    def propose(self, state):
        free = state.free_buffer_slots
        if len(free) == state.buffer_size:
            count = state.buffer_size
        elif len(free) >= self.threshold:
            count = self.batch_size
        else:
            return
        busy = state.jobs_with_open_task
        pieces = [j for j in state.dock_jobs if j.id not in busy]
        count = min(count, len(free), len(pieces))
        if state.dock_pieces is not None:  # never send the robot to an empty dock
            count = min(count, state.dock_pieces)
        if count:
            yield Refill(assignments=tuple(
                RefillAssignment(job_id=job.id, buffer_slot=slot)
                for job, slot in zip(pieces[:count], free[:count], strict=True)
            ))


def default_generators() -> list[Generator]:
    return [UnloadDone(), SwapDone(), LoadWaiting(), ToolSteps(), StartLoaded(), RefillFromDock()]
