"""The scheduler's rules for batch equipment, scan, mark and tool steps on
hand-built snapshots."""


from services.line_controller.scheduler import (
    Load,
    Mark,
    Scan,
    StartMachine,
    Swap,
    Unload,
)

from .builders import BRACKET, MACHINING, Line, Step
from .conftest import WASH, of_type, robot_action

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
