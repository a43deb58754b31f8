"""The actions a scheduling round can choose, as small frozen dataclasses.

Each names what the loop must do and nothing more: the loop turns it into
conditional DB transitions plus one task per hardware request (the task
``kind`` is ``task_kind``, the hardware action code of ``shared.events``).
``uses_robot`` tells whether it occupies the one robot; only
:class:`StartMachine` does not (the PLC starts the cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.events import (
    BUFFER_TO_EQUIPMENT,
    DOCK_TO_BUFFER,
    EQUIPMENT_TO_BUFFER,
    MARK,
    SCAN,
    START_MACHINE,
    SWAP,
)

__all__ = ["Action", "Load", "Mark", "Refill", "RefillAssignment", "Scan", "StartMachine", "Swap",
           "Unload"]


class _OnePiece:
    """A robot action on one piece, ``job_id``."""

    uses_robot = True

    @property
    def job_ids(self) -> tuple[int, ...]:
        return (self.job_id,)


@dataclass(frozen=True)
class _ToolOnBuffer(_OnePiece):
    """A robot-held tool's action on the piece on ``buffer_slot``."""

    job_id: int
    buffer_slot: int


@dataclass(frozen=True)
class Unload(_OnePiece):
    """Take a finished piece off ``equipment_id:slot_no`` back to its own
    buffer slot (``buffer_slot`` is the job's ``temp_slot_no``)."""

    job_id: int
    equipment_id: str
    slot_no: int
    buffer_slot: int

    task_kind = EQUIPMENT_TO_BUFFER


@dataclass(frozen=True)
class Load(_OnePiece):
    """Put a waiting piece from its buffer slot onto ``equipment_id:slot_no``."""

    job_id: int
    buffer_slot: int
    equipment_id: str
    slot_no: int

    task_kind = BUFFER_TO_EQUIPMENT


@dataclass(frozen=True)
class Swap:
    """Unload the finished piece and load the next one into the same slot in
    one robot visit (hardware ``swap``)."""

    unload: Unload
    load: Load

    task_kind = SWAP
    uses_robot = True

    def __post_init__(self):
        if (self.unload.equipment_id, self.unload.slot_no) != (self.load.equipment_id, self.load.slot_no):
            raise ValueError("a swap unloads and loads the same equipment slot")

    @property
    def equipment_id(self) -> str:
        return self.unload.equipment_id

    @property
    def slot_no(self) -> int:
        return self.unload.slot_no

    @property
    def job_ids(self) -> tuple[int, ...]:
        return (self.unload.job_id, self.load.job_id)


@dataclass(frozen=True)
class Scan(_ToolOnBuffer):
    """Read the barcode of the piece on ``buffer_slot`` (robot-held scanner)."""

    task_kind = SCAN


@dataclass(frozen=True)
class Mark(_ToolOnBuffer):
    """Laser-mark the piece on ``buffer_slot`` (robot-held marker)."""

    task_kind = MARK


@dataclass(frozen=True)
class StartMachine:
    """Start the cycle of ``equipment_id`` for the loaded pieces ``jobs``
    (``(slot_no, job_id)`` pairs, by slot). A PLC action: no robot."""

    equipment_id: str
    jobs: tuple[tuple[int, int], ...]

    task_kind = START_MACHINE
    uses_robot = False

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple(job_id for _, job_id in self.jobs)


@dataclass(frozen=True)
class RefillAssignment:
    job_id: int
    buffer_slot: int


@dataclass(frozen=True)
class Refill:
    """Bring pieces from the docking station to the given free buffer slots.
    One ``dock_to_buffer`` task per assignment; the robot runs them in order."""

    assignments: tuple[RefillAssignment, ...]

    task_kind = DOCK_TO_BUFFER
    uses_robot = True

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple(a.job_id for a in self.assignments)

    @property
    def buffer_slots(self) -> tuple[int, ...]:
        return tuple(a.buffer_slot for a in self.assignments)


Action = Unload | Load | Swap | Scan | Mark | StartMachine | Refill
