"""build_system_state against a real, migrated PostgreSQL."""

from datetime import UTC, datetime, timedelta

from sqlalchemy import event

from services.line_controller.scheduler import (
    Load,
    Refill,
    StartMachine,
    Step,
    Swap,
    Unload,
    build_system_state,
    default_scheduler,
)
from shared.db.models import Alarm, Equipment, EquipmentSlot, Job, Task, WorkOrder
from shared.layout import parse_layout

LAYOUT = parse_layout({
    "line": {"bufferSlots": 8},
    "tools": [{"id": "SCANNER", "kind": "scanner"}, {"id": "MARKER", "kind": "marker"}],
    "equipment": [
        {"id": "MC1", "kind": "machining", "slots": 2},
        {"id": "WASH1", "kind": "washing", "slots": 4, "batch": True},
    ],
    "products": [{"id": "P", "route": [{"op": "process", "equipmentKind": "machining"},
                                         {"op": "process", "equipmentKind": "washing"}]}],
})
ROUTE = [{"op": "process", "equipmentKind": "machining"}, {"op": "process", "equipmentKind": "washing"}]
T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def add_line(session):
    for spec in LAYOUT.equipment:
        session.add(Equipment(id=spec.id, name=spec.id, kind=spec.kind, batch=spec.batch,
                              slot_count=spec.slots))
    session.flush()
    for spec in LAYOUT.equipment:
        for n in range(1, spec.slots + 1):
            session.add(EquipmentSlot(equipment_id=spec.id, slot_no=n))
    session.flush()


def add_order(session, code, priority=5, status="RUNNING", quantity=20, age=0):
    order = WorkOrder(code=code, product_id="P", route=ROUTE, quantity=quantity, priority=priority,
                      status=status, created_at=T0 - timedelta(seconds=age))
    session.add(order)
    session.flush()
    return order


def add_job(session, order, seq_no, **fields):
    job = Job(work_order_id=order.id, seq_no=seq_no, created_at=order.created_at, **fields)
    session.add(job)
    session.flush()
    return job


def set_slot(session, equipment_id, slot_no, status, job):
    slot = session.get(EquipmentSlot, (equipment_id, slot_no))
    slot.status = status
    slot.current_job_id = job.id
    slot.occupied_at = T0
    session.flush()


def test_an_alarm_about_a_task_puts_its_positions_in_question(session):
    add_line(session)
    order = add_order(session, "WO-1")
    job = add_job(session, order, 1, status="SUSPENDED", position_type="ON_ROBOT", temp_slot_no=2)
    load = Task(kind="BUFFER_TO_EQUIPMENT", status="FAILED", job_id=job.id, equipment_id="MC1", slot_no=1)
    take_out = Task(kind="BUFFER_TO_DOCK", status="FAILED", job_id=job.id, params={"bufferSlot": 6})
    session.add_all([load, take_out])
    session.flush()
    session.add_all([Alarm(code="RECOVERY_TASK_OUTCOME_UNKNOWN", message="x", equipment_id="MC1",
                           task_id=load.id),
                     Alarm(code="ACTION_FAILED", message="y", task_id=take_out.id),
                     Alarm(code="ACTION_FAILED", message="cleared", task_id=take_out.id, status="CLEARED")])
    session.commit()

    state = build_system_state(session, LAYOUT, T0)

    assert [(f.task_id, f.slot_no, f.buffer_slot) for f in state.faults] == [
        (load.id, 1, None), (take_out.id, None, 6)]
    assert state.slots_in_question == {("MC1", 1)}
    assert state.buffer_slots_in_question == {6}
    assert 6 not in state.free_buffer_slots and 2 not in state.free_buffer_slots


def test_snapshot_reads_orders_jobs_slots_tasks_and_faults(session):
    add_line(session)
    order = add_order(session, "WO-1", priority=2)
    done = add_job(session, order, 1, status="WAITING_UNLOAD", position_type="ON_EQUIPMENT",
                   position_ref_id="MC1:1", temp_slot_no=1, step_index=0)
    set_slot(session, "MC1", 1, "DONE", done)
    waiting = add_job(session, order, 2, status="QUEUED", position_type="ON_BUFFER",
                      position_ref_id="3", temp_slot_no=3, step_index=0)
    loaded = add_job(session, order, 3, status="QUEUED", position_type="ON_EQUIPMENT",
                     position_ref_id="WASH1:1", temp_slot_no=2, step_index=1)
    set_slot(session, "WASH1", 1, "OCCUPIED", loaded)
    add_job(session, order, 4, status="COMPLETED", position_type="OUT", step_index=2)
    for seq in range(5, 9):
        add_job(session, order, seq)  # PENDING on the dock
    session.add(Task(kind="SCAN", status="SUCCEEDED", job_id=waiting.id))
    session.add(Alarm(code="MACHINE_FAULT", message="x", equipment_id="WASH1"))
    session.commit()

    state = build_system_state(session, LAYOUT, T0)

    assert state.buffer_size == 8
    assert [(o.id, o.priority, o.route) for o in state.orders] == [
        (order.id, 2, (Step("process", "machining"), Step("process", "washing")))]
    jobs = state.jobs_by_id
    assert set(jobs) == {done.id, waiting.id, loaded.id, *range(loaded.id + 2, loaded.id + 6)}
    assert jobs[waiting.id].next_step == Step("process", "machining")
    assert jobs[loaded.id].next_step == Step("process", "washing")
    assert jobs[loaded.id].position_ref_id == "WASH1:1"
    assert state.buffer_occupancy == {1: done.id, 3: waiting.id, 2: loaded.id}
    assert state.free_buffer_slots == (4, 5, 6, 7, 8)
    mc1 = state.equipment_by_id["MC1"]
    assert [(s.slot_no, s.status, s.current_job_id) for s in mc1.slots] == [
        (1, "DONE", done.id), (2, "EMPTY", None)]
    assert state.equipment_by_id["WASH1"].batch is True
    assert state.open_tasks == () and not state.robot_busy
    assert [f.equipment_id for f in state.faults] == ["WASH1"]

    chosen = default_scheduler().choose(state)
    assert chosen == [
        StartMachine("WASH1", ((1, loaded.id),)),
        Swap(Unload(done.id, "MC1", 1, 1), Load(waiting.id, 3, "MC1", 1)),
    ]


def test_open_tasks_make_the_robot_busy(session):
    add_line(session)
    order = add_order(session, "WO-1")
    job = add_job(session, order, 1, status="MOVING", position_type="ON_ROBOT", temp_slot_no=1)
    session.add(Task(kind="DOCK_TO_BUFFER", status="RUNNING", job_id=job.id))
    session.add(Task(kind="SCAN", status="FAILED", job_id=job.id))
    add_job(session, order, 2)
    session.commit()

    state = build_system_state(session, LAYOUT, T0)

    assert [t.kind for t in state.open_tasks] == ["DOCK_TO_BUFFER"]
    assert state.robot_busy
    assert default_scheduler().choose(state) == []


def test_only_the_head_of_the_dock_queue_is_read_most_urgent_first(session):
    add_line(session)
    slow = add_order(session, "WO-SLOW", priority=5, quantity=100, age=100)
    urgent = add_order(session, "WO-URGENT", priority=0, quantity=5)
    paused = add_order(session, "WO-PAUSED", priority=0, status="PAUSED", quantity=5)
    for seq in range(1, 101):
        add_job(session, slow, seq)
    urgent_jobs = [add_job(session, urgent, seq) for seq in range(1, 6)]
    for seq in range(1, 6):
        add_job(session, paused, seq)
    session.commit()

    statements = []
    event.listen(session.bind, "before_cursor_execute",
                 lambda *args: statements.append(args[2]))
    state = build_system_state(session, LAYOUT, T0)

    assert all(s.lstrip().upper().startswith("SELECT") for s in statements)
    assert len(statements) <= 8  # jobs ×2, orders, equipment+slots, tasks, alarms, dock, machines in question
    dock = state.dock_jobs
    assert len(dock) == 8
    assert [j.id for j in dock[:5]] == [j.id for j in urgent_jobs]
    assert {j.order_id for j in dock[5:]} == {slow.id}
    assert {o.id for o in state.orders} == {slow.id, urgent.id, paused.id}

    refill = default_scheduler().choose(state)[0]
    assert isinstance(refill, Refill)
    assert refill.buffer_slots == tuple(range(1, 9))
    assert refill.job_ids == tuple(j.id for j in dock)


def test_terminal_orders_without_live_jobs_are_left_out(session):
    add_line(session)
    add_order(session, "WO-DONE", status="COMPLETED", quantity=1)
    cancelled = add_order(session, "WO-CANCELLED", status="CANCELLED", quantity=2)
    on_machine = add_job(session, cancelled, 1, status="PROCESSING", position_type="ON_EQUIPMENT",
                         position_ref_id="MC1:2", temp_slot_no=4)
    set_slot(session, "MC1", 2, "OCCUPIED", on_machine)
    session.commit()

    state = build_system_state(session, LAYOUT, T0)

    assert [o.status for o in state.orders] == ["CANCELLED"]
    assert state.buffer_occupancy == {4: on_machine.id}
    assert default_scheduler().plan(state) == []


def test_an_empty_line_gives_an_empty_snapshot_and_no_action(session):
    add_line(session)
    session.commit()

    state = build_system_state(session, LAYOUT, T0)

    assert (state.orders, state.jobs, state.open_tasks, state.faults) == ((), (), (), ())
    assert [e.id for e in state.equipment] == ["MC1", "WASH1"]
    assert state.free_buffer_slots == tuple(range(1, 9))
    assert default_scheduler().choose(state) == []
