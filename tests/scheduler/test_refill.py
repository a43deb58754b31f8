"""The scheduler's refill rules on hand-built snapshots."""

import pytest

from services.line_controller.scheduler import (
    Load,
    Refill,
    RefillAssignment,
)

from .builders import Line, Step
from .conftest import of_type, robot_action


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
