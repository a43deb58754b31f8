"""``SystemState``: the immutable snapshot one scheduling round works on.

The loop builds it from the DB (:func:`~.build_state.build_system_state`) at
the start of every round; generators, filters and policies only read it. Everything is a
frozen dataclass or a tuple, and the derived indexes (buffer occupancy, jobs by
id, open tasks by equipment slot, ...) are computed once per snapshot, lazily.

Conventions the loop and the scheduler share (see ``docs/scheduler.md``):

* ``job.step_index`` is the index of the step the job is at: the step it waits
  for (on the buffer, ``QUEUED``) or the one it is doing (on equipment). The
  loop advances it when a step finishes (unload, tool action done).
* A job on equipment whose slot is ``OCCUPIED`` and whose status is ``QUEUED``
  has been loaded but its machine cycle has not started yet; ``PROCESSING``
  means the cycle runs; ``WAITING_UNLOAD`` with the slot ``DONE`` means done.
* Buffer occupancy is the ``temp_slot_no`` of every live (non-terminal) job,
  also while the job is on equipment or on the robot: it returns to that slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from shared.db.models import JOB_HELD, JOB_TERMINAL
from shared.events import ABORT_CYCLE, MARK, SCAN, START_MACHINE

__all__ = ["EquipmentView", "FaultView", "JobView", "OrderView", "SlotView", "Step", "SystemState",
           "TaskView"]

# Task kinds are the hardware action codes (shared.events); every kind but a
# machine start needs the robot (tools are held by the robot).
MACHINE_TASK_KINDS = frozenset({START_MACHINE, ABORT_CYCLE})
TOOL_TASK_KINDS = frozenset({SCAN, MARK})
EQUIPMENT_DOWN = frozenset({"FAULT", "OFFLINE"})
# Given no work until an operator acts: held, or in error.
JOB_WAITING_FOR_OPERATOR = frozenset({*JOB_HELD, "ERROR"})


@dataclass(frozen=True)
class Step:
    """One route step: ``op`` is process | inspect | scan | mark."""

    op: str
    equipment_kind: str | None = None

    @property
    def on_equipment(self) -> bool:
        return self.equipment_kind is not None and self.op in ("process", "inspect")

    @classmethod
    def from_json(cls, data: Mapping) -> Step:
        return cls(op=str(data["op"]), equipment_kind=data.get("equipmentKind"))


@dataclass(frozen=True)
class OrderView:
    id: int
    status: str
    priority: int  # 0 = most urgent
    created_at: datetime
    route: tuple[Step, ...]

    @property
    def running(self) -> bool:
        return self.status == "RUNNING"


@dataclass(frozen=True)
class JobView:
    id: int
    order_id: int
    seq_no: int
    status: str
    position_type: str
    position_ref_id: str | None
    temp_slot_no: int | None
    step_index: int
    created_at: datetime
    # route[step_index] of its order, None once the route is done.
    next_step: Step | None

    @property
    def live(self) -> bool:
        return self.status not in JOB_TERMINAL

    @property
    def held(self) -> bool:
        return self.status in JOB_WAITING_FOR_OPERATOR

    @property
    def on_dock(self) -> bool:
        return self.status == "PENDING" and self.position_type == "ON_DOCK"

    @property
    def waiting_on_buffer(self) -> bool:
        """On its buffer slot, waiting for its next step."""
        return (
            self.status == "QUEUED"
            and self.position_type == "ON_BUFFER"
            and self.temp_slot_no is not None
            and self.next_step is not None
        )


@dataclass(frozen=True)
class SlotView:
    equipment_id: str
    slot_no: int
    status: str  # EMPTY | OCCUPIED | DONE
    current_job_id: int | None = None
    occupied_at: datetime | None = None


@dataclass(frozen=True)
class EquipmentView:
    id: str
    kind: str
    batch: bool
    status: str  # IDLE | RUNNING | FAULT | OFFLINE
    slots: tuple[SlotView, ...]

    @property
    def down(self) -> bool:
        return self.status in EQUIPMENT_DOWN

    def slot(self, slot_no: int) -> SlotView | None:
        for s in self.slots:
            if s.slot_no == slot_no:
                return s
        return None


@dataclass(frozen=True)
class TaskView:
    """An open (PENDING or RUNNING) task: a hardware action in flight."""

    id: int
    kind: str
    status: str
    job_id: int | None = None
    equipment_id: str | None = None
    slot_no: int | None = None

    @property
    def uses_robot(self) -> bool:
        return self.kind not in MACHINE_TASK_KINDS


@dataclass(frozen=True)
class FaultView:
    """An alarm that is not cleared yet. For an alarm about a task (a failed
    action, or one whose outcome a restart lost), the positions that task
    touched: where a piece may be, or not be, until an operator has said."""

    id: int
    code: str
    equipment_id: str | None = None
    job_id: int | None = None
    task_id: int | None = None
    slot_no: int | None = None      # the task's equipment slot
    buffer_slot: int | None = None  # the task's buffer slot (refill, take-out)


@dataclass(frozen=True)
class SystemState:
    now: datetime
    buffer_size: int
    orders: tuple[OrderView, ...]
    jobs: tuple[JobView, ...]
    equipment: tuple[EquipmentView, ...]
    open_tasks: tuple[TaskView, ...] = ()
    faults: tuple[FaultView, ...] = ()
    # Pieces at the dock no refill has claimed; None: not reported yet (no limit).
    dock_pieces: int | None = None
    # Equipment an open manual action is about (a fault, a recovery question):
    # nothing is loaded onto it or started on it until the operator has answered.
    equipment_in_question: frozenset[str] = frozenset()
    # Buffer slots an open recovery action holds (a piece there no job holds).
    buffer_slots_held: frozenset[int] = frozenset()

    # -- indexes (computed once per snapshot) ---------------------------------

    @cached_property
    def orders_by_id(self) -> dict[int, OrderView]:
        return {o.id: o for o in self.orders}

    @cached_property
    def jobs_by_id(self) -> dict[int, JobView]:
        return {j.id: j for j in self.jobs}

    @cached_property
    def equipment_by_id(self) -> dict[str, EquipmentView]:
        return {e.id: e for e in self.equipment}

    @cached_property
    def equipment_by_kind(self) -> dict[str, tuple[EquipmentView, ...]]:
        out: dict[str, list[EquipmentView]] = {}
        for e in self.equipment:
            out.setdefault(e.kind, []).append(e)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def buffer_occupancy(self) -> dict[int, int]:
        """Buffer slot → the live job holding it (the lowest job id if a
        recovery inconsistency put two jobs on one slot)."""
        out: dict[int, int] = {}
        for j in sorted(self.jobs, key=lambda j: j.id):
            if j.live and j.temp_slot_no is not None:
                out.setdefault(j.temp_slot_no, j.id)
        return out

    @cached_property
    def free_buffer_slots(self) -> tuple[int, ...]:
        taken = self.buffer_occupancy
        return tuple(n for n in range(1, self.buffer_size + 1)
                     if n not in taken and n not in self.buffer_slots_in_question)

    @cached_property
    def slots_in_question(self) -> frozenset[tuple[str, int]]:
        """Equipment slots a task with an uncleared alarm touched: nothing is
        loaded there until the operator has said whether a piece is in it."""
        return frozenset((f.equipment_id, f.slot_no) for f in self.faults
                         if f.task_id is not None and f.equipment_id and f.slot_no is not None)

    @cached_property
    def buffer_slots_in_question(self) -> frozenset[int]:
        """Buffer slots a refill or take-out with an uncleared alarm touched, and
        those an open recovery action holds."""
        return self.buffer_slots_held | frozenset(f.buffer_slot for f in self.faults
                                                  if f.task_id is not None and f.buffer_slot is not None)

    @cached_property
    def robot_busy(self) -> bool:
        """An open robot task, or a piece recorded on the robot (a failed move
        leaves it there until an operator says where it is): the robot holds
        one piece at most."""
        return (any(t.uses_robot for t in self.open_tasks)
                or any(j.live and j.position_type == "ON_ROBOT" for j in self.jobs))

    @cached_property
    def tool_busy(self) -> bool:
        return any(t.kind in TOOL_TASK_KINDS for t in self.open_tasks)

    @cached_property
    def jobs_with_open_task(self) -> frozenset[int]:
        return frozenset(t.job_id for t in self.open_tasks if t.job_id is not None)

    @cached_property
    def equipment_with_open_task(self) -> dict[str, tuple[TaskView, ...]]:
        out: dict[str, list[TaskView]] = {}
        for t in self.open_tasks:
            if t.equipment_id is not None:
                out.setdefault(t.equipment_id, []).append(t)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def waiting_jobs(self) -> tuple[JobView, ...]:
        """Jobs on the buffer waiting for their next step, of running orders,
        with no action in flight."""
        busy = self.jobs_with_open_task
        return tuple(
            j for j in self.jobs
            if j.waiting_on_buffer and j.id not in busy and self.order_running(j)
        )

    @cached_property
    def dock_jobs(self) -> tuple[JobView, ...]:
        """Jobs at the docking station of running orders, most urgent first:
        order priority, order age, piece number."""
        cands = [j for j in self.jobs if j.on_dock and self.order_running(j)]
        return tuple(sorted(cands, key=self.job_rank))

    # -- helpers ---------------------------------------------------------------

    def order_of(self, job: JobView) -> OrderView | None:
        return self.orders_by_id.get(job.order_id)

    def order_running(self, job: JobView) -> bool:
        order = self.order_of(job)
        return order is not None and order.running

    @cached_property
    def _job_ranks(self) -> dict[int, tuple]:
        out = {}
        for job in self.jobs:
            order = self.order_of(job)
            if order is None:  # an order outside the snapshot ranks after every real one
                out[job.id] = (10, job.created_at, job.created_at, job.seq_no, job.id)
            else:
                out[job.id] = (order.priority, order.created_at, job.created_at, job.seq_no, job.id)
        return out

    def job_rank(self, job: JobView) -> tuple:
        """Order priority, then order age, then piece age (lower is first)."""
        return self._job_ranks[job.id]

    def slot_has_open_task(self, equipment_id: str, slot_no: int) -> bool:
        return any(
            t.slot_no in (slot_no, None)
            for t in self.equipment_with_open_task.get(equipment_id, ())
            if t.uses_robot
        )

    def machine_start_open(self, equipment_id: str) -> bool:
        return any(
            t.kind in MACHINE_TASK_KINDS for t in self.equipment_with_open_task.get(equipment_id, ())
        )
