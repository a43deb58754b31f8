"""The three-layer scheduler of seed 004 (Generator / Filter / Policy) over a
``SystemState`` snapshot. Pure domain: no nameko, no Flask; the only I/O is
:func:`build_system_state`'s reads. See ``docs/scheduler.md``.

The package re-exports every action type and snapshot view (each module's
``__all__``), the scheduler and ``build_system_state``."""

from . import action_types, state
from .action_types import *  # noqa: F403 - the action vocabulary, action_types.__all__
from .build_state import build_system_state
from .scheduler import Rejection, Scheduler, default_scheduler
from .state import *  # noqa: F403 - the snapshot and its views, state.__all__

__all__ = [*action_types.__all__, *state.__all__, "Rejection", "Scheduler", "build_system_state",
           "default_scheduler"]
