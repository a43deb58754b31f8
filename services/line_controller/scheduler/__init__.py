"""The three-layer scheduler of seed 004 (Generator / Filter / Policy) over a
``SystemState`` snapshot. Pure domain: no nameko, no Flask; the only I/O is
:func:`build_system_state`'s reads. See ``docs/scheduler.md``."""

from .actions import (
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
from .scheduler import Rejection, Scheduler, default_scheduler
from .state import (
    EquipmentView,
    FaultView,
    JobView,
    OrderView,
    SlotView,
    Step,
    SystemState,
    TaskView,
    build_system_state,
)

__all__ = [
    "Action", "EquipmentView", "FaultView", "JobView", "Load", "Mark", "OrderView", "Refill",
    "RefillAssignment", "Rejection", "Scan", "Scheduler", "SlotView", "StartMachine", "Step",
    "Swap", "SystemState", "TaskView", "Unload", "build_system_state", "default_scheduler",
]
