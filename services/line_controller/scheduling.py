"""The scheduling hook: what the loop runs after every message.

A scheduling round is: ``Scheduler.plan(db)`` reads the state (through the
loop's :class:`DBState`, inside the round's transaction) and returns
:class:`Action` values; the loop's :class:`~services.line_controller.actions.ActionExecutor`
applies each one as conditional transitions (claim the job(s), create and
start a task) and returns the :class:`HardwareRequest` to send once the round
has committed. The hardware answers later with a worker result message.

The Generator/Filter/Policy scheduler (``scheduler/``) implements
:class:`Scheduler`; until it is wired in, the loop runs without one and a round
does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Refill:
    """Docking station → buffer slot (补料)."""
    job_id: int
    slot_no: int


@dataclass(frozen=True)
class Load:
    """Buffer → equipment slot (上料)."""
    job_id: int
    equipment_id: str
    slot_no: int


@dataclass(frozen=True)
class Unload:
    """Equipment slot → the job's own buffer slot (下料)."""
    job_id: int
    equipment_id: str
    slot_no: int


@dataclass(frozen=True)
class Swap:
    """Unload the finished piece and load the next one in one robot visit (换料)."""
    unload_job_id: int
    load_job_id: int
    equipment_id: str
    slot_no: int


@dataclass(frozen=True)
class Scan:
    job_id: int


@dataclass(frozen=True)
class Mark:
    job_id: int
    text: str | None = None


@dataclass(frozen=True)
class StartMachine:
    equipment_id: str


Action = Refill | Load | Unload | Swap | Scan | Mark | StartMachine


@dataclass(frozen=True)
class HardwareRequest:
    """One hardware RPC (``docs/architecture.md``), sent after the commit, never awaited."""
    rpc: str
    task_id: int
    failure_type: str  # the worker-result type to enqueue when the request is not accepted
    kwargs: dict = field(default_factory=dict)


class Scheduler(Protocol):
    def plan(self, db) -> list[Action]: ...


class HardwarePort(Protocol):
    """Sends a request without waiting for the action; a refusal comes back as a
    ``*Failed`` message through the loop's inbox."""

    def request(self, req: HardwareRequest) -> None: ...
