"""A line's ticks cost the database nothing while nothing is due (issue 55): once
a tick found nothing to do, the timer's next ticks send no statement until a
message comes in or a timer falls due: a shelf's end, a task's deadline, an open
cycle's overdue bound and, while an order runs, the controller's heartbeat
(every 5 s: tick_gate). Then one tick looks, and the timers fire on time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from tests.line_controller.scripted import Load


@pytest.fixture
def statements(harness):
    """The statements the loop's engine sends, as they are sent."""
    sent = []

    def record(conn, cursor, statement, *args):
        sent.append(statement)

    event.listen(harness.engine, "before_cursor_execute", record)
    yield sent
    event.remove(harness.engine, "before_cursor_execute", record)


@pytest.fixture
def commits(harness):
    """The loop engine's commits, counted."""
    done = []
    event.listen(harness.engine, "commit", lambda conn: done.append(1))
    return done


class Clock:
    """The loop's time, moved by the test (the wall clock's now to start with)."""

    def __init__(self, harness):
        self.start = self.now = datetime.now(UTC).replace(microsecond=0)
        harness.loop.uow.clock = lambda: self.now

    def at(self, seconds):
        self.now = self.start + timedelta(seconds=seconds)


def timer_ticks(harness, count):
    """What the service's 1 s timer does ``count`` times (LineControllerEntrypoints.tick)."""
    for _ in range(count):
        if harness.loop.inbox.qsize() == 0 and harness.loop.tick_due():
            assert harness.loop.handle(new_message("ScheduleTick")).status == "HANDLED"


def test_an_idle_lines_ticks_send_no_statement(harness, statements):
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 2})  # created, not started: IDLE
    statements.clear()  # (its round looked: no timer)
    timer_ticks(harness, 30)
    assert statements == []


def test_a_quiet_line_ticks_again_when_a_shelf_ends(harness):
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2})  # no piece there: an alarm
    (alarm,) = harness.alarms()
    harness.ok("ShelveAlarm", {"alarmId": alarm.id, "minutes": 1, "reason": "maintenance"})
    timer_ticks(harness, 2)
    assert not harness.loop.tick_due() and harness.alarms()[0].status == "SHELVED"

    later = datetime.now(UTC) + timedelta(minutes=1, seconds=1)
    harness.loop.uow.clock = lambda: later  # the minute passes
    assert harness.loop.tick_due()
    timer_ticks(harness, 1)
    assert harness.alarms()[0].status == "RAISED"


def seen_at(harness):
    return harness.row("SELECT seen_at FROM line_state_interval WHERE ended_at IS NULL").seen_at


def test_a_running_lines_ticks_touch_the_database_only_for_its_heartbeat(harness, statements, commits):
    clock = Clock(harness)
    _, (job, _) = harness.started_order(quantity=2)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1)  # mid-cycle: 12 s, overdue after 36 s
    statements.clear()  # (the last message's look: its heartbeat at 5 s)
    for second in range(5):
        clock.at(second)
        timer_ticks(harness, 1)
    assert statements == [] and seen_at(harness) == clock.start

    commits.clear()
    clock.at(5)  # the heartbeat falls due
    timer_ticks(harness, 1)
    assert len(commits) == 1 and seen_at(harness) == clock.now
    assert "SET LOCAL synchronous_commit = off" in statements  # a stamp alone: no flush waited for
    assert sum("AS watched" in sql for sql in statements) == 1  # the timers read once (not again by its round)
    statements.clear()
    statements.clear()
    clock.at(9)
    timer_ticks(harness, 1)
    assert statements == []  # quiet again until the next one, at 10 s
    clock.at(10)
    timer_ticks(harness, 1)
    assert seen_at(harness) == clock.now

    clock.at(13)
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})  # a message stamps it too
    statements.clear()
    for second in (14, 15, 16, 17):
        clock.at(second)
        timer_ticks(harness, 1)
    assert statements == []  # no tick after the message: its look found the next heartbeat at 18 s
    clock.at(18)
    timer_ticks(harness, 1)
    assert seen_at(harness) == clock.now


def test_an_open_cycle_is_found_overdue_on_time_by_a_quiet_line(harness, statements):
    clock = Clock(harness)
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)  # 4 s cycle × 3: overdue past 12 s
    looked, raised = [], None
    for second in range(16):  # the 1 s timer
        clock.at(second)
        statements.clear()
        timer_ticks(harness, 1)
        if statements:
            looked.append(second)
        if raised is None and harness.alarms("CYCLE_OVERDUE"):
            raised = second
            assert "SET LOCAL synchronous_commit = off" not in statements  # its alarm waits for the flush
    assert raised == 13  # the first tick past the bound, as a tick each second would find it
    assert [s for s in looked if s < 12] == [5, 10]  # else only the heartbeat


def test_a_task_a_messages_round_starts_ends_the_quiet_at_its_deadline(harness, statements):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_buffer(job, 3)
    harness.loop.executor.timeout = 1.0
    harness.scheduler.queued.append(Load(job, "MC2", 2))
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})  # its round starts the load
    req = harness.hardware.requests[-1]
    deadline = harness.row("SELECT deadline_at FROM task WHERE id = :id", id=req.task_id).deadline_at
    assert not harness.loop.tick_due()  # known without a tick
    statements.clear()
    while not harness.loop.tick_due():  # the timer's polls (the wall clock: a task's deadline is the database's)
        assert datetime.now(UTC) < deadline + timedelta(seconds=5), "the deadline never made a tick due"
        time.sleep(0.02)
    assert statements == [] and datetime.now(UTC) >= deadline - timedelta(seconds=0.1)
    time.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 0.01)  # now() past it, too
    timer_ticks(harness, 1)
    assert harness.next().message_id == f"timeout-{req.task_id}"
    assert harness.job(job).error_code == "ACTION_TIMEOUT"


def test_a_message_leaves_the_next_tick_due_while_a_cycle_is_past_its_bound(harness):
    """A message may have made a passed bound count (its pieces' start answered, say): the tick judges it."""
    clock = Clock(harness)
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)  # 4 s cycle × 3: overdue past 12 s
    clock.at(11)
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    assert not harness.loop.tick_due()
    clock.at(13)
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    assert harness.loop.tick_due()
    timer_ticks(harness, 1)
    assert [a.code for a in harness.alarms()] == ["CYCLE_OVERDUE"]


def test_a_restart_between_heartbeats_is_no_stop_and_an_outage_is_one_from_the_last_stamp(harness, engine, layout):
    clock = Clock(harness)
    harness.started_order(quantity=1)
    timer_ticks(harness, 1)  # its last stamp, at 0 s
    harness.loop.stop()

    def restart_at(seconds):
        loop = EventLoop(engine, layout)
        loop.uow.clock = lambda: clock.start + timedelta(seconds=seconds)
        loop.start(consume=False)
        loop.stop()

    restart_at(8)  # 5 s of quiet running, then a restart of 3 s: no stop
    assert harness.rows("SELECT * FROM line_state_interval WHERE cause = 'CONTROLLER_DOWN'") == []
    restart_at(11)  # that one went at once: away for 11 s since the last stamp
    (stop,) = harness.rows("SELECT * FROM line_state_interval WHERE cause = 'CONTROLLER_DOWN'")
    assert (stop.started_at, stop.ended_at) == (clock.start, clock.start + timedelta(seconds=11))
