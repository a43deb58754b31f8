"""What the start-up checks find (seed 004, 恢复策略): the recovery kinds, what an
operator may answer to each, and the plain rows the checks read.

Kept apart from :mod:`.consistency_checks` (the checks themselves) so that the
answers' handlers and the scheduler can name a finding without the checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared import events as ev

# Manual-action kinds, one per check; every recovery kind starts with this.
RECOVERY_PREFIX = "RECOVERY"
SLOT_MISMATCH = "RECOVERY_SLOT_MISMATCH"
DUPLICATE_BUFFER_SLOT = "RECOVERY_DUPLICATE_BUFFER_SLOT"
BUFFER_SLOT_OUT_OF_RANGE = "RECOVERY_BUFFER_SLOT_OUT_OF_RANGE"
MACHINE_IDLE_BUT_DB_RUNNING = "RECOVERY_MACHINE_IDLE_BUT_DB_RUNNING"
MACHINE_RUNNING_BUT_DB_IDLE = "RECOVERY_MACHINE_RUNNING_BUT_DB_IDLE"
TASK_OUTCOME_UNKNOWN = "RECOVERY_TASK_OUTCOME_UNKNOWN"
PLC_UNREACHABLE = "RECOVERY_PLC_UNREACHABLE"
BUFFER_PIECE_MISSING = "RECOVERY_BUFFER_PIECE_MISSING"
BUFFER_PIECE_UNKNOWN = "RECOVERY_BUFFER_PIECE_UNKNOWN"
DOCK_COUNT_MISMATCH = "RECOVERY_DOCK_COUNT_MISMATCH"
MACHINE_PIECE_MISSING = "RECOVERY_MACHINE_PIECE_MISSING"

RECOVERY_KINDS = (
    SLOT_MISMATCH, DUPLICATE_BUFFER_SLOT, BUFFER_SLOT_OUT_OF_RANGE,
    MACHINE_IDLE_BUT_DB_RUNNING, MACHINE_RUNNING_BUT_DB_IDLE, TASK_OUTCOME_UNKNOWN,
    PLC_UNREACHABLE, BUFFER_PIECE_MISSING, BUFFER_PIECE_UNKNOWN, DOCK_COUNT_MISMATCH,
    MACHINE_PIECE_MISSING,
)
# A MACHINE_PIECE_MISSING found by the robot itself (an unload answered
# SOURCE_EMPTY), not by the check: its ``case`` (the page's wording).
SOURCE_EMPTY = "SOURCE_EMPTY"

# Actions whose outcome a restart made unknown that are sent again rather than
# asked about: repeating them is harmless. A SCAN reads a barcode and moves
# nothing; a MARK burns text into the piece (twice is a damaged piece), a move
# may have the piece in the gripper, a start runs a second cycle: those are asked.
SAFE_TO_REPEAT = (ev.SCAN,)


def is_recovery(kind: str) -> bool:
    """A restart-recovery action (answered by ``handlers.recovery``, confirmed by ``ConfirmRecovery``)."""
    return kind.startswith(RECOVERY_PREFIX)


# What an operator may answer. CONFIRM accepts the state as recorded in the DB.
CHOICES: dict[str, tuple[str, ...]] = {
    SLOT_MISMATCH: ("CONFIRM", "PIECE_ON_MACHINE", "PIECE_REMOVED", "SCRAP"),
    DUPLICATE_BUFFER_SLOT: ("CONFIRM", "PIECE_REMOVED", "SCRAP"),
    BUFFER_SLOT_OUT_OF_RANGE: ("CONFIRM", "PIECE_REMOVED", "SCRAP"),
    MACHINE_IDLE_BUT_DB_RUNNING: ("CONFIRM", "CYCLE_DONE", "PIECE_REMOVED", "SCRAP"),
    MACHINE_RUNNING_BUT_DB_IDLE: ("CONFIRM",),
    TASK_OUTCOME_UNKNOWN: ("CONFIRM", "ACTION_DONE", "PIECE_REMOVED", "SCRAP"),
    PLC_UNREACHABLE: ("CONFIRM",),
    BUFFER_PIECE_MISSING: ("CONFIRM", "PIECE_REMOVED", "SCRAP"),
    BUFFER_PIECE_UNKNOWN: ("CONFIRM",),
    DOCK_COUNT_MISMATCH: ("CONFIRM",),
    # Where is the piece? Still in the slot (the sensor is wrong: CONFIRM), on its
    # buffer slot (the robot unloaded it and the record was lost, as an asynchronous
    # standby loses its last commits: PIECE_UNLOADED), or out of the cell.
    MACHINE_PIECE_MISSING: ("CONFIRM", "PIECE_UNLOADED", "PIECE_REMOVED", "SCRAP"),
}


@dataclass(frozen=True)
class Inconsistency:
    kind: str
    text: str
    job_ids: tuple[int, ...] = ()
    equipment_id: str | None = None
    task_id: int | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    # What fills ``text`` (the page words it from these in its reader's language);
    # unlike ``context``, not part of what identifies the finding.
    facts: Mapping[str, Any] = field(default_factory=dict, compare=False)

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


@dataclass(frozen=True)
class DockRecord:
    """The DB's count of pieces at the dock (None: never read from the PLC), and
    how many refills' pieces may have left the dock although the count still
    holds them (the count may be high, never low: docs/state-machines.md)."""
    pieces: int | None
    may_have_left: int = 0
