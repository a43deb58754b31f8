"""Building a :class:`~.state.SystemState` from the DB: eight SELECTs, built once,
run on the round's connection (the scheduler's only I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from shared.db.models import (
    ALARM_ACTIVE,
    JOB_TERMINAL,
    TASK_TERMINAL,
    WORK_ORDER_TERMINAL,
    Alarm,
    Dock,
    Equipment,
    EquipmentSlot,
    Job,
    ManualAction,
    Task,
    WorkOrder,
)
from shared.layout import Layout

from ..consistency_checks import BUFFER_PIECE_UNKNOWN, RECOVERY_PREFIX
from ..manual_actions import MACHINE_IN_QUESTION
from . import state


def _route(raw: Iterable[Mapping] | None) -> tuple[state.Step, ...]:
    return tuple(state.Step.from_json(s) for s in raw or ())


def _next_step(route: tuple[state.Step, ...], step_index: int) -> state.Step | None:
    return route[step_index] if 0 <= step_index < len(route) else None


# The statements are built once: a round only binds parameters and runs them
# on the session's connection (Core rows, no ORM result processing).
_JOB_COLS = (
    Job.id, Job.work_order_id, Job.seq_no, Job.status, Job.position_type,
    Job.position_ref_id, Job.temp_slot_no, Job.step_index, Job.created_at,
)
_JOBS_OFF_DOCK = select(*_JOB_COLS).where(
    Job.status.not_in(JOB_TERMINAL),
    or_(Job.status != "PENDING", Job.position_type != "ON_DOCK"),
)
_DOCK_HEAD = (
    select(*_JOB_COLS)
    .join(WorkOrder, WorkOrder.id == Job.work_order_id)
    .where(Job.status == "PENDING", Job.position_type == "ON_DOCK", WorkOrder.status == "RUNNING")
    .order_by(WorkOrder.priority, WorkOrder.created_at, Job.created_at, Job.seq_no, Job.id)
    .limit(bindparam("dock_head"))
)
_DOCK = select(Dock.pieces_waiting).where(Dock.id == 1)
_ORDERS = select(
    WorkOrder.id, WorkOrder.status, WorkOrder.priority, WorkOrder.created_at, WorkOrder.route,
).where(or_(
    WorkOrder.status.not_in(WORK_ORDER_TERMINAL),
    WorkOrder.id.in_(bindparam("order_ids", expanding=True)),
))
_EQUIPMENT_SLOTS = (
    select(Equipment.id, Equipment.kind, Equipment.batch, Equipment.status,
           EquipmentSlot.slot_no, EquipmentSlot.status, EquipmentSlot.current_job_id,
           EquipmentSlot.occupied_at)
    .outerjoin(EquipmentSlot, EquipmentSlot.equipment_id == Equipment.id)
    .order_by(Equipment.id, EquipmentSlot.slot_no)
)
_OPEN_TASKS = (
    select(Task.id, Task.kind, Task.status, Task.job_id, Task.equipment_id, Task.slot_no)
    .where(Task.status.not_in(TASK_TERMINAL))
    .order_by(Task.id)
)
_OPEN_ALARMS = (
    select(Alarm.id, Alarm.code, Alarm.equipment_id, Alarm.job_id, Alarm.task_id, Task.slot_no,
           Task.params["bufferSlot"].as_integer())
    .outerjoin(Task, Task.id == Alarm.task_id)
    .where(Alarm.status.in_(ALARM_ACTIVE))
    .order_by(Alarm.id)
)

# Open manual actions that put a machine (a fault, a restart-recovery finding) or a
# buffer slot (a piece there no job holds, until an operator has taken it off) in question.
_ACTIONS_IN_QUESTION = select(
    ManualAction.kind, ManualAction.equipment_id, ManualAction.context["bufferSlot"].as_integer(),
).where(
    ManualAction.status == "OPEN",
    or_(ManualAction.kind.in_(MACHINE_IN_QUESTION), ManualAction.kind.startswith(RECOVERY_PREFIX)),
)


def _in_question(conn) -> dict[str, frozenset]:
    """The machines and the buffer slots an open manual action holds (SystemState's fields)."""
    rows = conn.execute(_ACTIONS_IN_QUESTION).all()
    return {"equipment_in_question": frozenset(eq_id for _kind, eq_id, _slot in rows if eq_id is not None),
            "buffer_slots_held": frozenset(slot for kind, _eq, slot in rows
                                           if kind == BUFFER_PIECE_UNKNOWN and slot is not None)}


def _equipment(conn) -> tuple[state.EquipmentView, ...]:
    """Every machine with its slots, from one SELECT."""
    kinds: dict[str, tuple] = {}
    slots: dict[str, list[state.SlotView]] = {}
    for eq_id, kind, batch, status, slot_no, slot_status, job_id, occupied_at in conn.execute(
        _EQUIPMENT_SLOTS
    ):
        kinds[eq_id] = (kind, batch, status)
        eq_slots = slots.setdefault(eq_id, [])
        if slot_no is not None:
            eq_slots.append(state.SlotView(equipment_id=eq_id, slot_no=slot_no, status=slot_status,
                                     current_job_id=job_id, occupied_at=occupied_at))
    return tuple(
        state.EquipmentView(id=eq_id, kind=kind, batch=batch, status=status, slots=tuple(slots[eq_id]))
        for eq_id, (kind, batch, status) in kinds.items()
    )


def build_system_state(session: Session, layout: Layout, now: datetime) -> state.SystemState:
    """Read one snapshot from the DB. Reads only; eight SELECTs, no writes.

    Live jobs are read whole except those still at the docking station: of
    those only the head of the dock queue (``buffer_size`` pieces, the most a
    refill can take) is read, so a 10 000-piece order costs no more than a
    small one.
    """
    conn = session.connection()
    job_rows = [
        *conn.execute(_JOBS_OFF_DOCK).all(),
        *conn.execute(_DOCK_HEAD, {"dock_head": layout.buffer_slots}).all(),
    ]

    order_ids = sorted({r[1] for r in job_rows})
    orders = tuple(
        state.OrderView(id=oid, status=status, priority=priority, created_at=created_at,
                  route=_route(route))
        for oid, status, priority, created_at, route in conn.execute(_ORDERS, {"order_ids": order_ids})
    )
    routes = {o.id: o.route for o in orders}
    jobs = tuple(
        state.JobView(
            id=jid, order_id=oid, seq_no=seq_no, status=status, position_type=pos,
            position_ref_id=ref, temp_slot_no=temp, step_index=step, created_at=created_at,
            next_step=_next_step(routes.get(oid, ()), step),
        )
        for jid, oid, seq_no, status, pos, ref, temp, step, created_at in job_rows
    )

    equipment = _equipment(conn)

    open_tasks = tuple(
        state.TaskView(id=tid, kind=kind, status=status, job_id=job_id, equipment_id=eq_id, slot_no=slot_no)
        for tid, kind, status, job_id, eq_id, slot_no in conn.execute(_OPEN_TASKS)
    )
    faults = tuple(
        state.FaultView(id=aid, code=code, equipment_id=eq_id, job_id=job_id, task_id=task_id,
                  slot_no=slot_no, buffer_slot=buffer_slot)
        for aid, code, eq_id, job_id, task_id, slot_no, buffer_slot in conn.execute(_OPEN_ALARMS)
    )
    return state.SystemState(
        now=now, buffer_size=layout.buffer_slots, orders=orders, jobs=jobs,
        equipment=equipment, open_tasks=open_tasks, faults=faults,
        dock_pieces=conn.execute(_DOCK).scalar(),
        **_in_question(conn),
    )
