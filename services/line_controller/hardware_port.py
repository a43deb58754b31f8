"""The loop's port to the hardware service: what a scheduling round sends.

A scheduling round is: the loop reads a :class:`~services.line_controller.scheduler.SystemState`
snapshot inside the round's transaction (``build_system_state``), asks the
:class:`~services.line_controller.scheduler.Scheduler` to ``choose`` the actions to start now
(one action vocabulary: ``scheduler/action_types.py``), and the
:class:`~services.line_controller.actions.ActionExecutor` applies each one as
conditional transitions plus tasks and returns the :class:`HardwareRequest`
values to send once the round has committed. The hardware answers later with a
worker result message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class HardwareRequest:
    """One hardware RPC (``docs/architecture.md``), sent after the commit, never awaited."""
    rpc: str
    task_id: int
    failure_type: str  # the worker-result type to enqueue when the request is not accepted
    kwargs: dict = field(default_factory=dict)


class HardwarePort(Protocol):
    """Sends a request without waiting for the action; a refusal comes back as a
    ``*Failed`` message through the loop's inbox."""

    def request(self, req: HardwareRequest) -> None: ...

    def sending(self) -> set[str]:
        """The task ids of requests sent but neither accepted nor refused yet."""
        ...
