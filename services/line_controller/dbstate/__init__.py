"""DBState: the production state as the event loop sees and changes it.

Only the loop uses this class, one instance per loop transaction, and it is the
only place with SQL for the production tables. It exposes domain transitions,
not CRUD: each is a conditional ``UPDATE … WHERE <expected state>`` (the
conditions are defensive; the loop's serial handling is what keeps the state
consistent), every job change increments ``job.version``, and every change
records an event (type + the changed object, ``shared.serialize`` shape) that
the loop writes to ``event_log`` in the same transaction.

A condition that does not hold raises :class:`ConditionFailed`; nothing is
retried blindly: the loop rolls back and the caller re-reads.
"""

from __future__ import annotations

from .base import KEEP, ConditionFailed, Rejected
from .cell_transitions import CellTransitions
from .job_transitions import JobTransitions
from .line_tracking import LineTracking
from .loop_records import LoopRecords
from .machine_tracking import MachineTracking
from .reads import Reads
from .recovery_reads import RecoveryReads
from .tasks_and_alarms import TasksAndAlarms

__all__ = ["KEEP", "ConditionFailed", "DBState", "Rejected"]


class DBState(Reads, RecoveryReads, JobTransitions, CellTransitions, TasksAndAlarms, MachineTracking,
              LineTracking, LoopRecords):
    """One loop transaction's view of the production state; each part in its own module."""
