"""Hand-built SystemStates for scheduler tests: a small mutable line that
renders into the immutable snapshot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.line_controller.scheduler import (
    EquipmentView,
    FaultView,
    JobView,
    OrderView,
    SlotView,
    Step,
    SystemState,
    TaskView,
)

T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)

MACHINING = (Step("process", "machining"),)
BRACKET = (
    Step("scan"),
    Step("process", "machining"),
    Step("process", "washing"),
    Step("inspect", "inspection"),
    Step("mark"),
)


class Line:
    def __init__(self, buffer_size: int = 8):
        self.buffer_size = buffer_size
        self.dock_pieces: int | None = None  # not reported: no limit
        self.orders: dict[int, OrderView] = {}
        self.jobs: dict[int, JobView] = {}
        self.machines: dict[str, dict] = {}
        self.tasks: list[TaskView] = []
        self.faults: list[FaultView] = []
        self._next_job = 1
        self._next_task = 1

    # -- orders and equipment -----------------------------------------------

    def order(self, order_id: int, route=MACHINING, priority: int = 5, status: str = "RUNNING",
              age: int = 0) -> int:
        """``age``: seconds before the newest; larger is older."""
        self.orders[order_id] = OrderView(
            id=order_id, status=status, priority=priority,
            created_at=T0 - timedelta(seconds=age), route=tuple(route),
        )
        return order_id

    def machine(self, eq_id: str, kind: str = "machining", slots: int = 1, batch: bool = False,
                status: str = "IDLE") -> str:
        self.machines[eq_id] = {
            "kind": kind, "batch": batch, "status": status,
            "slots": {n: ("EMPTY", None) for n in range(1, slots + 1)},
        }
        return eq_id

    # -- jobs ------------------------------------------------------------------

    def _job(self, order_id: int, status: str, position_type: str, ref: str | None,
             temp_slot: int | None, step: int) -> int:
        job_id = self._next_job
        self._next_job += 1
        route = self.orders[order_id].route
        self.jobs[job_id] = JobView(
            id=job_id, order_id=order_id, seq_no=job_id, status=status,
            position_type=position_type, position_ref_id=ref, temp_slot_no=temp_slot,
            step_index=step, created_at=self.orders[order_id].created_at,
            next_step=route[step] if step < len(route) else None,
        )
        return job_id

    def on_dock(self, order_id: int, count: int = 1) -> list[int]:
        return [self._job(order_id, "PENDING", "ON_DOCK", None, None, 0) for _ in range(count)]

    def on_buffer(self, order_id: int, slot: int, step: int = 0, status: str = "QUEUED") -> int:
        return self._job(order_id, status, "ON_BUFFER", str(slot), slot, step)

    def on_machine(self, order_id: int, eq_id: str, slot_no: int, buffer_slot: int,
                   slot_status: str = "DONE", job_status: str | None = None, step: int = 0) -> int:
        if job_status is None:
            job_status = {"DONE": "WAITING_UNLOAD", "OCCUPIED": "PROCESSING"}[slot_status]
        job_id = self._job(order_id, job_status, "ON_EQUIPMENT", f"{eq_id}:{slot_no}",
                           buffer_slot, step)
        self.machines[eq_id]["slots"][slot_no] = (slot_status, job_id)
        return job_id

    def task(self, kind: str, job_id: int | None = None, equipment_id: str | None = None,
             slot_no: int | None = None, status: str = "RUNNING") -> int:
        task_id = self._next_task
        self._next_task += 1
        self.tasks.append(TaskView(id=task_id, kind=kind, status=status, job_id=job_id,
                                   equipment_id=equipment_id, slot_no=slot_no))
        return task_id

    def lost_task(self, equipment_id: str | None = None, slot_no: int | None = None,
                  buffer_slot: int | None = None, code: str = "RECOVERY_TASK_OUTCOME_UNKNOWN") -> None:
        """An open alarm about a task whose outcome is unknown (or that failed)."""
        task_id = self._next_task
        self._next_task += 1
        self.faults.append(FaultView(id=len(self.faults) + 1, code=code, equipment_id=equipment_id,
                                     task_id=task_id, slot_no=slot_no, buffer_slot=buffer_slot))

    # -- the snapshot ------------------------------------------------------------

    def state(self) -> SystemState:
        equipment = tuple(
            EquipmentView(
                id=eq_id, kind=m["kind"], batch=m["batch"], status=m["status"],
                slots=tuple(SlotView(eq_id, n, st, job) for n, (st, job) in sorted(m["slots"].items())),
            )
            for eq_id, m in sorted(self.machines.items())
        )
        return SystemState(
            now=T0, buffer_size=self.buffer_size, orders=tuple(self.orders.values()),
            jobs=tuple(self.jobs.values()), equipment=equipment, open_tasks=tuple(self.tasks),
            dock_pieces=self.dock_pieces, faults=tuple(self.faults),
        )
