"""The scheduler's rules on hand-built snapshots: unload, swap, load and
start (refill, batches, scan and mark have their own modules)."""

import pytest

from services.line_controller.scheduler import (
    Load,
    StartMachine,
    Swap,
    Unload,
)

from .builders import BRACKET, MACHINING, Line
from .conftest import WASH, of_type, robot_action


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

    # Nothing goes onto or starts on either; the finished piece may come off the
    # machine in fault (an operator's RETURN_TO_BUFFER / SCRAP needs that).
    assert all(a.equipment_id not in ("MC1", "MC2") for a in plan if isinstance(a, Load | Swap | StartMachine))
    assert [a for a in plan if getattr(a, "equipment_id", None) in ("MC1", "MC2")] == [
        Unload(job_id=1, equipment_id="MC1", slot_no=1, buffer_slot=1)]
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
