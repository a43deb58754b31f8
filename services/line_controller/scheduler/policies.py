"""Policies: the third layer. Each gives a feasible action a sort key; the
scheduler orders actions by the policies' keys in turn (the first policy
decides, the next breaks its ties, ...). A new preference is a new class
here, placed in :func:`default_policies` where it should weigh."""

from __future__ import annotations

from typing import Protocol

from .action_types import Action, Load, Mark, Refill, Scan, StartMachine, Swap, Unload
from .state import SystemState


class Policy(Protocol):
    def key(self, action: Action, state: SystemState): ...


class ActionKindOrder:
    """Machine starts (no robot needed) first; then swap (unloads a finished
    piece and reloads the machine in one visit), then a plain unload (a
    finished machine is a blocked machine), then a plain load, then the
    buffer-side tool steps, and refill last."""

    RANK = {StartMachine: 0, Swap: 1, Unload: 2, Load: 3, Scan: 4, Mark: 4, Refill: 5}

    def key(self, action, state):
        return self.RANK[type(action)]


def _most_urgent(action: Action, state: SystemState) -> tuple:
    jobs = state.jobs_by_id
    return min((state.job_rank(jobs[j]) for j in action.job_ids if j in jobs), default=(10,))


class OrderPriority:
    """The more urgent order first (priority 0 = most urgent)."""

    def key(self, action, state):
        return _most_urgent(action, state)[0]


class Age:
    """Then the older order, then the older piece (created, piece number)."""

    def key(self, action, state):
        return _most_urgent(action, state)[1:]


class FillPartialBatch:
    """Between batch machines, load the one already holding pieces, so a
    batch fills and starts instead of two half-empty ones waiting."""

    def key(self, action, state):
        if not isinstance(action, Load):
            return 0
        eq = state.equipment_by_id.get(action.equipment_id)
        if eq is None or not eq.batch:
            return 0
        return -sum(1 for s in eq.slots if s.status == "OCCUPIED")


class Deterministic:
    """Last, a total order on what is left: equipment, slot, jobs."""

    def key(self, action, state):
        return (
            getattr(action, "equipment_id", ""),
            getattr(action, "slot_no", 0),
            action.job_ids,
        )


def default_policies() -> list[Policy]:
    return [ActionKindOrder(), OrderPriority(), Age(), FillPartialBatch(), Deterministic()]
