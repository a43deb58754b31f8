"""Property tests: on random snapshots, consistent or not (recovery can leave
inconsistencies), the scheduler never chooses an infeasible action."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.line_controller.scheduler import (
    Load,
    Mark,
    Refill,
    Scan,
    StartMachine,
    Swap,
    Unload,
    default_scheduler,
)

from .builders import BRACKET, MACHINING, Line, Step

ROUTES = (MACHINING, BRACKET, (Step("process", "washing"), Step("mark")))
KINDS = (("machining", False), ("washing", True), ("inspection", False))
JOB_STATUSES = ("QUEUED", "MOVING", "PROCESSING", "WAITING_UNLOAD", "PAUSED", "SUSPENDED",
                "ERROR", "COMPLETED", "SCRAPPED", "CANCELLED")
TASK_KINDS = ("DOCK_TO_BUFFER", "BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP", "SCAN",
              "MARK", "START_MACHINE")
SCHEDULER = default_scheduler()


@st.composite
def lines(draw):
    line = Line(buffer_size=8)
    orders = [
        line.order(o, route=draw(st.sampled_from(ROUTES)), priority=draw(st.integers(0, 9)),
                   status=draw(st.sampled_from(("RUNNING",) * 4 + ("PAUSED", "CREATED"))),
                   age=draw(st.integers(0, 100)))
        for o in range(1, draw(st.integers(1, 3)) + 1)
    ]
    # Mostly consistent states (so every action kind shows up), with
    # inconsistencies mixed in.
    consistent = draw(st.booleans())
    free_slots = list(range(1, 9))

    def take_slot():
        if consistent:
            return free_slots.pop(draw(st.integers(0, len(free_slots) - 1))) if free_slots else None
        return draw(st.sampled_from((None, *range(1, 9))))

    machine_job_status = st.sampled_from((None, None, None, "QUEUED", "QUEUED", *JOB_STATUSES))
    machines = []
    for n in range(draw(st.integers(0, 4))):
        kind, batch = draw(st.sampled_from(KINDS))
        eq = line.machine(f"E{n}", kind=kind, slots=draw(st.integers(1, 4)), batch=batch,
                          status=draw(st.sampled_from(("IDLE",) * 4 + ("RUNNING", "FAULT", "OFFLINE"))))
        machines.append(eq)
        for slot_no in range(1, len(line.machines[eq]["slots"]) + 1):
            slot_status = draw(st.sampled_from(("EMPTY", "OCCUPIED", "DONE")))
            if slot_status != "EMPTY":
                order = draw(st.sampled_from(orders))
                line.on_machine(order, eq, slot_no, buffer_slot=take_slot(),
                                slot_status=slot_status, job_status=draw(machine_job_status),
                                step=draw(st.integers(0, len(line.orders[order].route) - 1)))
    for _ in range(draw(st.integers(0, 8))):
        order = draw(st.sampled_from(orders))
        slot = take_slot()
        if slot is None:
            break
        line.on_buffer(order, slot, step=draw(st.integers(0, len(line.orders[order].route))),
                       status=draw(st.sampled_from(("QUEUED", "QUEUED", *JOB_STATUSES))))
    for order in orders:
        line.on_dock(order, draw(st.integers(0, 6)))
    for _ in range(draw(st.sampled_from((0, 0, 0, 1, 2)))):
        line.task(draw(st.sampled_from(TASK_KINDS)),
                  job_id=draw(st.one_of(st.none(), st.sampled_from(sorted(line.jobs) or [None]))),
                  equipment_id=draw(st.one_of(st.none(), st.sampled_from(machines or [None]))),
                  slot_no=draw(st.one_of(st.none(), st.integers(1, 4))))
    return line


def check_feasible(action, state):
    """An independent restatement of what each action needs."""
    jobs, eqs, orders = state.jobs_by_id, state.equipment_by_id, state.orders_by_id
    occupancy = {}
    for j in sorted(state.jobs, key=lambda j: j.id):
        if j.status not in ("COMPLETED", "SCRAPPED", "CANCELLED") and j.temp_slot_no is not None:
            occupancy.setdefault(j.temp_slot_no, j.id)
    for job_id in action.job_ids:
        job = jobs[job_id]
        assert job.status not in ("PAUSED", "SUSPENDED", "ERROR", "COMPLETED", "SCRAPPED", "CANCELLED")
        assert orders[job.order_id].status == "RUNNING"
        assert job_id not in {t.job_id for t in state.open_tasks}
    if isinstance(action, StartMachine | Load | Swap):
        assert eqs[action.equipment_id].status not in ("FAULT", "OFFLINE")
    if isinstance(action, Unload):  # a piece may come off a machine in fault, not off one OFFLINE
        assert eqs[action.equipment_id].status != "OFFLINE"
    unloads = [action] if isinstance(action, Unload) else [action.unload] if isinstance(action, Swap) else []
    loads = [action] if isinstance(action, Load) else [action.load] if isinstance(action, Swap) else []
    for u in unloads:
        slot = eqs[u.equipment_id].slot(u.slot_no)
        assert slot.status == "DONE" and slot.current_job_id == u.job_id
        assert jobs[u.job_id].status == "WAITING_UNLOAD"
        assert occupancy.get(u.buffer_slot) == u.job_id
    for ld in loads:
        eq = eqs[ld.equipment_id]
        slot = eq.slot(ld.slot_no)
        assert slot.status == ("DONE" if isinstance(action, Swap) else "EMPTY")
        job = jobs[ld.job_id]
        assert job.status == "QUEUED" and job.position_type == "ON_BUFFER"
        assert job.next_step.equipment_kind == eq.kind
        assert occupancy.get(ld.buffer_slot) == ld.job_id
        assert not (eq.batch and eq.status == "RUNNING")
    if isinstance(action, Scan | Mark):
        assert jobs[action.job_id].next_step.op == ("scan" if isinstance(action, Scan) else "mark")
        assert occupancy.get(action.buffer_slot) == action.job_id
    if isinstance(action, StartMachine):
        eq = eqs[action.equipment_id]
        for slot_no, job_id in action.jobs:
            assert eq.slot(slot_no).status == "OCCUPIED" and eq.slot(slot_no).current_job_id == job_id
        if eq.batch:
            assert eq.status != "RUNNING" and all(s.status != "DONE" for s in eq.slots)
    if isinstance(action, Refill):
        slots = action.buffer_slots
        free = 8 - len(occupancy)
        assert len(set(slots)) == len(slots) and all(1 <= s <= 8 and s not in occupancy for s in slots)
        assert len(occupancy) + len(slots) <= 8
        assert free >= 4
        assert len(slots) <= (8 if not occupancy else 4)
        assert all(jobs[j].status == "PENDING" and jobs[j].position_type == "ON_DOCK"
                   for j in action.job_ids)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_random_snapshots_never_yield_an_infeasible_plan(line):
    state = line.state()
    plan = SCHEDULER.plan(state)
    for action in plan:
        check_feasible(action, state)

    chosen = SCHEDULER.choose(state)
    robot = [a for a in chosen if a.uses_robot]
    assert len(robot) <= 1
    if any(t.kind != "START_MACHINE" for t in state.open_tasks):
        assert robot == []
    starts = [a.equipment_id for a in chosen if isinstance(a, StartMachine)]
    assert len(starts) == len(set(starts))
    assert set(chosen) <= set(plan)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_choose_is_the_plans_starts_and_its_best_robot_action(line):
    state = line.state()
    plan = SCHEDULER.plan(state)
    robot = [a for a in plan if a.uses_robot][:1]
    assert SCHEDULER.choose(state) == [a for a in plan if not a.uses_robot] + robot
