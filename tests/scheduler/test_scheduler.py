"""The scheduler's rules on hand-built snapshots."""

import pytest

from services.line_controller.scheduler import (
    Load,
    Mark,
    Refill,
    RefillAssignment,
    Scan,
    StartMachine,
    Swap,
    Unload,
    default_scheduler,
)

from .builders import BRACKET, MACHINING, Line, Step

WASH = (Step("process", "washing"),)


@pytest.fixture
def scheduler():
    return default_scheduler()


def robot_action(scheduler, state):
    chosen = [a for a in scheduler.choose(state) if a.uses_robot]
    assert len(chosen) <= 1
    return chosen[0] if chosen else None


def of_type(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


# -- refill -------------------------------------------------------------------


def test_empty_buffer_at_start_is_filled_completely_most_urgent_first(scheduler):
    line = Line()
    line.order(1, priority=5)
    line.order(2, priority=1)
    low = line.on_dock(1, 10)
    high = line.on_dock(2, 6)
    state = line.state()

    action = robot_action(scheduler, state)

    assert isinstance(action, Refill)
    assert action.buffer_slots == (1, 2, 3, 4, 5, 6, 7, 8)
    assert action.job_ids == (*high, *low[:2])


def test_start_with_fewer_pieces_than_slots_brings_them_all(scheduler):
    line = Line()
    line.order(1)
    jobs = line.on_dock(1, 3)

    action = robot_action(scheduler, line.state())

    assert action == Refill(tuple(RefillAssignment(j, s) for j, s in zip(jobs, (1, 2, 3), strict=True)))


@pytest.mark.parametrize(("dock_pieces", "brought"), [(None, 8), (8, 8), (3, 3), (0, 0)])
def test_a_refill_never_takes_more_than_the_dock_holds(scheduler, dock_pieces, brought):
    line = Line()
    line.order(1)
    jobs = line.on_dock(1, 12)
    line.dock_pieces = dock_pieces

    action = robot_action(scheduler, line.state())

    if brought == 0:
        assert action is None  # nothing to do but wait for the next pallet
    else:
        assert action == Refill(tuple(RefillAssignment(j, s)
                                      for j, s in zip(jobs[:brought], range(1, brought + 1), strict=True)))


def test_after_a_short_pallet_the_next_one_is_brought_by_the_usual_rule(scheduler):
    line = Line()
    _buffer_with(line, [1, 2, 3])  # a short first pallet came in
    line.order(1)
    jobs = line.on_dock(1, 9)
    line.dock_pieces = 4  # the next pallet

    action = robot_action(scheduler, line.state())

    assert action == Refill(tuple(RefillAssignment(j, s) for j, s in zip(jobs[:4], (4, 5, 6, 7), strict=True)))


def test_a_refill_leaves_out_a_buffer_slot_a_lost_take_out_touched(scheduler):
    line = Line()
    line.order(1)
    jobs = line.on_dock(1, 10)
    line.lost_task(buffer_slot=2)  # a finished piece may still lie there

    action = robot_action(scheduler, line.state())

    assert action.buffer_slots == (1, 3, 4, 5)  # 7 free: the "≥ 4 free → 4" rule
    assert action.job_ids == tuple(jobs[:4])


def test_nothing_is_loaded_into_a_slot_a_lost_load_touched(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1", slots=2)
    line.lost_task("MC1", 1)  # a piece may be in MC1:1 already
    job = line.on_buffer(1, 3)

    action = robot_action(scheduler, line.state())

    assert isinstance(action, Load) and (action.job_id, action.equipment_id, action.slot_no) == (job, "MC1", 2)
    line.lost_task("MC1", 2)
    assert robot_action(scheduler, line.state()) is None


def test_a_hand_made_load_into_a_slot_in_question_is_filtered_out(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1")
    job = line.on_buffer(1, 3)
    line.lost_task("MC1", 1, code="ACTION_FAILED")
    from services.line_controller.scheduler.filters import PositionsSettled
    assert not PositionsSettled().allows(Load(job, 3, "MC1", 1), line.state())


def _buffer_with(line, taken_slots):
    """Occupy buffer slots with pieces that have nothing to do (their machine
    kind does not exist), so only refill is left."""
    line.order(9, route=(Step("process", "grinding"),))
    for slot in taken_slots:
        line.on_buffer(9, slot)


def test_four_free_slots_bring_four_into_the_lowest_free_slots(scheduler):
    line = Line()
    _buffer_with(line, [1, 3, 5, 6])
    line.order(1)
    jobs = line.on_dock(1, 10)

    action = robot_action(scheduler, line.state())

    assert isinstance(action, Refill)
    assert action.buffer_slots == (2, 4, 7, 8)
    assert action.job_ids == tuple(jobs[:4])


def test_five_free_slots_still_bring_only_four(scheduler):
    line = Line()
    _buffer_with(line, [1, 2, 3])
    line.order(1)
    line.on_dock(1, 10)

    action = robot_action(scheduler, line.state())

    assert isinstance(action, Refill)
    assert action.buffer_slots == (4, 5, 6, 7)


def test_three_free_slots_bring_nothing(scheduler):
    line = Line()
    _buffer_with(line, [1, 2, 3, 4, 5])
    line.order(1)
    line.on_dock(1, 10)

    assert scheduler.plan(line.state()) == []


def test_pieces_on_equipment_keep_their_buffer_slot(scheduler):
    """Five pieces out on machines still hold slots 1..5: 3 free, no refill."""
    line = Line()
    line.order(1)
    for n in range(1, 6):
        line.machine(f"M{n}")
        line.on_machine(1, f"M{n}", 1, buffer_slot=n, slot_status="OCCUPIED")
    line.on_dock(1, 10)

    assert of_type(scheduler.plan(line.state()), Refill) == []


def test_refill_skips_paused_orders_and_never_exceeds_the_buffer(scheduler):
    line = Line(buffer_size=8)
    line.order(1, status="PAUSED", priority=0)
    line.order(2, priority=9)
    line.on_dock(1, 10)
    wanted = line.on_dock(2, 10)

    action = robot_action(scheduler, line.state())

    assert action.job_ids == tuple(wanted[:8])
    assert len(action.assignments) == 8


def test_a_hand_made_refill_into_a_taken_slot_is_refused(scheduler):
    line = Line()
    _buffer_with(line, [1, 2, 3, 4])
    line.order(1)
    jobs = line.on_dock(1, 4)
    state = line.state()
    bad = Refill((RefillAssignment(jobs[0], 4), RefillAssignment(jobs[1], 5)))

    assert [f for f in scheduler.filters if not f.allows(bad, state)]


# -- unload, swap, load -----------------------------------------------------------


def test_unload_comes_before_load_and_refill(scheduler):
    line = Line()
    line.order(1, route=(*MACHINING, *WASH))
    line.order(2, route=WASH, priority=0)
    line.machine("MC1")
    line.machine("WASH1", kind="washing", slots=2, batch=True)
    done = line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="DONE")
    line.on_buffer(2, 2)
    line.on_dock(2, 5)

    action = robot_action(scheduler, line.state())

    assert action == Unload(job_id=done, equipment_id="MC1", slot_no=1, buffer_slot=1)


def test_swap_comes_before_unload_and_plain_load(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1")
    line.machine("MC2")
    done = line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="DONE")
    waiting = line.on_buffer(1, 2)

    plan = scheduler.plan(line.state())

    assert plan[0] == Swap(
        unload=Unload(done, "MC1", 1, 1),
        load=Load(job_id=waiting, buffer_slot=2, equipment_id="MC1", slot_no=1),
    )
    assert Unload(done, "MC1", 1, 1) in plan
    assert Load(waiting, 2, "MC2", 1) in plan


def test_swap_needs_different_pieces_and_same_slot():
    with pytest.raises(ValueError):
        Swap(unload=Unload(1, "MC1", 1, 1), load=Load(2, 2, "MC1", 2))


def test_load_goes_to_an_empty_slot_of_the_next_steps_kind(scheduler):
    line = Line()
    line.order(1, route=BRACKET)
    line.machine("MC1", slots=2)
    line.machine("WASH1", kind="washing", slots=4, batch=True)
    line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="OCCUPIED")
    job = line.on_buffer(1, 2, step=1)  # scanned, machining next

    action = robot_action(scheduler, line.state())

    assert action == Load(job_id=job, buffer_slot=2, equipment_id="MC1", slot_no=2)


def test_no_action_for_a_faulted_machine(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1", status="FAULT", slots=2)
    line.machine("MC2", status="OFFLINE")
    line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="DONE")
    line.on_machine(1, "MC1", 2, buffer_slot=3, slot_status="OCCUPIED", job_status="QUEUED")
    line.on_buffer(1, 2)
    state = line.state()

    plan = scheduler.plan(state)

    assert all(getattr(a, "equipment_id", None) not in ("MC1", "MC2") for a in plan)
    refused = {r.filter for r in scheduler.rejected(state)}
    assert refused == {"EquipmentUp"}


def test_paused_and_suspended_jobs_and_paused_orders_are_skipped(scheduler):
    line = Line()
    line.order(1)
    line.order(2, status="PAUSED")
    line.machine("MC1", slots=4)
    line.on_buffer(1, 1, status="PAUSED")
    line.on_buffer(1, 2, status="SUSPENDED")
    line.on_buffer(2, 3)
    line.on_machine(2, "MC1", 1, buffer_slot=4, slot_status="DONE")
    line.on_machine(1, "MC1", 2, buffer_slot=5, slot_status="DONE", job_status="SUSPENDED")

    assert scheduler.plan(line.state()) == []


def test_loads_by_order_priority_then_age(scheduler):
    line = Line()
    line.order(1, priority=5, age=100)
    line.order(2, priority=1, age=0)
    line.order(3, priority=1, age=50)
    line.machine("MC1")
    a = line.on_buffer(1, 1)
    b = line.on_buffer(2, 2)
    c = line.on_buffer(3, 3)

    loads = of_type(scheduler.plan(line.state()), Load)

    assert [x.job_id for x in loads] == [c, b, a]


def test_older_piece_of_the_same_order_goes_first(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1")
    first = line.on_buffer(1, 7)
    second = line.on_buffer(1, 2)

    assert robot_action(scheduler, line.state()).job_id == first
    assert second > first


def test_robot_busy_means_no_robot_action_but_machines_still_start(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1")
    line.machine("MC2")
    loaded = line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="OCCUPIED", job_status="QUEUED")
    moving = line.on_buffer(1, 2, status="MOVING")
    line.on_buffer(1, 3)
    line.on_dock(1, 5)
    line.task("BUFFER_TO_EQUIPMENT", job_id=moving, equipment_id="MC2", slot_no=1)

    chosen = scheduler.choose(line.state())

    assert chosen == [StartMachine("MC1", ((1, loaded),))]


def test_a_piece_left_on_the_robot_by_a_failed_move_keeps_the_robot_busy(scheduler):
    # A load that failed (e.g. the machine refused it) leaves its piece recorded on
    # the robot, in ERROR, until an operator says where it is: no second piece.
    line = Line()
    line.order(1)
    line.machine("MC1")
    line.machine("MC2")
    line._job(1, "ERROR", "ON_ROBOT", None, 1, 0)
    line.on_buffer(1, 2)
    line.on_dock(1, 5)

    assert scheduler.choose(line.state()) == []


def test_a_start_in_flight_is_not_repeated(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1")
    loaded = line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="OCCUPIED", job_status="QUEUED")
    line.task("START_MACHINE", equipment_id="MC1")
    state = line.state()

    assert scheduler.plan(state) == []
    assert StartMachine("MC1", ((1, loaded),)) in [r.action for r in scheduler.rejected(state)]


def test_start_goes_with_one_robot_action_in_the_same_round(scheduler):
    line = Line()
    line.order(1)
    line.machine("MC1", slots=2)
    loaded = line.on_machine(1, "MC1", 1, buffer_slot=1, slot_status="OCCUPIED", job_status="QUEUED")
    waiting = line.on_buffer(1, 2)
    line.on_buffer(1, 3)

    chosen = scheduler.choose(line.state())

    assert chosen == [StartMachine("MC1", ((1, loaded),)), Load(waiting, 2, "MC1", 2)]


# -- batch equipment ------------------------------------------------------------------


def _washer_line(loaded: int, waiting: int, slots: int = 4):
    line = Line()
    line.order(1, route=WASH)
    line.machine("WASH1", kind="washing", slots=slots, batch=True)
    loaded_ids = [
        line.on_machine(1, "WASH1", n, buffer_slot=n, slot_status="OCCUPIED", job_status="QUEUED")
        for n in range(1, loaded + 1)
    ]
    waiting_ids = [line.on_buffer(1, loaded + n) for n in range(1, waiting + 1)]
    return line, loaded_ids, waiting_ids


def test_batch_waits_while_pieces_for_it_are_waiting(scheduler):
    line, _, waiting = _washer_line(loaded=2, waiting=1)

    chosen = scheduler.choose(line.state())

    assert chosen == [Load(waiting[0], 3, "WASH1", 3)]


def test_batch_starts_when_nothing_more_is_waiting(scheduler):
    line, loaded, _ = _washer_line(loaded=2, waiting=0)

    assert scheduler.choose(line.state()) == [StartMachine("WASH1", ((1, loaded[0]), (2, loaded[1])))]


def test_batch_starts_when_full_even_with_pieces_waiting(scheduler):
    line, loaded, _ = _washer_line(loaded=4, waiting=2)

    starts = of_type(scheduler.choose(line.state()), StartMachine)

    assert starts == [StartMachine("WASH1", tuple(zip((1, 2, 3, 4), loaded, strict=True)))]


def test_batch_waits_for_a_piece_the_busy_robot_will_bring(scheduler):
    line, _, waiting = _washer_line(loaded=2, waiting=1)
    line.task("SCAN", job_id=None)

    assert scheduler.choose(line.state()) == []


def test_nothing_goes_into_a_running_batch(scheduler):
    line = Line()
    line.order(1, route=WASH)
    line.machine("WASH1", kind="washing", slots=4, batch=True, status="RUNNING")
    line.on_machine(1, "WASH1", 1, buffer_slot=1, slot_status="OCCUPIED")
    line.on_buffer(1, 2)

    assert scheduler.plan(line.state()) == []


def test_finished_batch_is_emptied_by_swaps_before_it_restarts(scheduler):
    line = Line()
    line.order(1, route=(*WASH, Step("mark")))
    line.machine("WASH1", kind="washing", slots=2, batch=True)
    done = line.on_machine(1, "WASH1", 1, buffer_slot=1, slot_status="DONE")
    line.on_machine(1, "WASH1", 2, buffer_slot=2, slot_status="OCCUPIED", job_status="QUEUED")
    waiting = line.on_buffer(1, 3)

    plan = scheduler.plan(line.state())

    assert of_type(plan, StartMachine) == []
    assert plan[0] == Swap(Unload(done, "WASH1", 1, 1), Load(waiting, 3, "WASH1", 1))


def test_a_partial_batch_is_filled_before_an_empty_one(scheduler):
    line = Line()
    line.order(1, route=WASH)
    line.machine("WASH1", kind="washing", slots=4, batch=True)
    line.machine("WASH2", kind="washing", slots=4, batch=True)
    line.on_machine(1, "WASH2", 1, buffer_slot=1, slot_status="OCCUPIED", job_status="QUEUED")
    waiting = line.on_buffer(1, 2)

    assert robot_action(scheduler, line.state()) == Load(waiting, 2, "WASH2", 2)


# -- scan and mark ---------------------------------------------------------------------


def test_scan_and_mark_steps_on_the_buffer(scheduler):
    line = Line()
    line.order(1, route=BRACKET)
    to_scan = line.on_buffer(1, 1, step=0)
    to_mark = line.on_buffer(1, 2, step=4)

    plan = scheduler.plan(line.state())

    assert Scan(to_scan, 1) in plan
    assert Mark(to_mark, 2) in plan


def test_tool_steps_wait_for_a_busy_tool(scheduler):
    line = Line()
    line.order(1, route=BRACKET)
    scanning = line.on_buffer(1, 1, step=0)
    line.on_buffer(1, 2, step=4)
    line.task("SCAN", job_id=scanning)

    assert scheduler.plan(line.state()) == []
    assert {r.filter for r in scheduler.rejected(line.state())} == {"RobotFree"}


def test_inspection_is_loaded_like_a_machine(scheduler):
    line = Line()
    line.order(1, route=BRACKET)
    line.machine("INSP1", kind="inspection")
    job = line.on_buffer(1, 1, step=3)

    assert robot_action(scheduler, line.state()) == Load(job, 1, "INSP1", 1)


def test_a_finished_route_waits_for_the_loop_not_the_scheduler(scheduler):
    line = Line()
    line.order(1, route=MACHINING)
    line.machine("MC1")
    line.on_buffer(1, 1, step=1)

    assert scheduler.plan(line.state()) == []
