"""The scheduler: Generators propose, Filters remove what cannot be done now,
Policies rank what is left. Pure: it reads a :class:`SystemState` and returns
actions; the loop carries them out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .action_types import Action
from .filters import Filter, default_filters
from .generators import Generator, default_generators
from .policies import Policy, default_policies
from .state import SystemState


@dataclass(frozen=True)
class Rejection:
    action: Action
    filter: str  # the class name of the first filter that refused it


class Scheduler:
    def __init__(self, generators: Sequence[Generator], filters: Sequence[Filter],
                 policies: Sequence[Policy]):
        self.generators = tuple(generators)
        self.filters = tuple(filters)
        self.policies = tuple(policies)

    def candidates(self, state: SystemState) -> list[Action]:
        """Every proposal, once, in generator order."""
        return list(dict.fromkeys(a for g in self.generators for a in g.propose(state)))

    def _refusal(self, action: Action, state: SystemState) -> str | None:
        for f in self.filters:
            if not f.allows(action, state):
                return type(f).__name__
        return None

    def _feasible(self, state: SystemState) -> list[Action]:
        return [a for a in self.candidates(state) if self._refusal(a, state) is None]

    def _rank(self, action: Action, state: SystemState) -> tuple:
        return tuple(p.key(action, state) for p in self.policies)

    def plan(self, state: SystemState) -> list[Action]:
        """The feasible actions, best first."""
        return sorted(self._feasible(state), key=lambda a: self._rank(a, state))

    def rejected(self, state: SystemState) -> list[Rejection]:
        """The proposals the filters refused and why (for logs and tests)."""
        out = []
        for a in self.candidates(state):
            reason = self._refusal(a, state)
            if reason is not None:
                out.append(Rejection(a, reason))
        return out

    def choose(self, state: SystemState) -> list[Action]:
        """What to start this round: every feasible machine start (PLC
        actions, one per machine, independent of the robot) and at most one
        robot action, the best ranked. Starts come first in the list."""
        # Policies do not depend on feasibility, so ranking first and
        # filtering robot candidates only until the first feasible one gives
        # the same choice as plan()[...] at a fraction of the filter work.
        candidates = self.candidates(state)
        starts = sorted(
            (a for a in candidates if not a.uses_robot and self._refusal(a, state) is None),
            key=lambda a: self._rank(a, state),
        )
        ranked = sorted((a for a in candidates if a.uses_robot), key=lambda a: self._rank(a, state))
        robot = next((a for a in ranked if self._refusal(a, state) is None), None)
        return starts + ([robot] if robot is not None else [])


def default_scheduler() -> Scheduler:
    return Scheduler(default_generators(), default_filters(), default_policies())
