"""An idle line's ticks cost the database nothing (issue 55): once a tick found
nothing to do on an IDLE line, the timer's next ticks send no statement until a
message comes in or a timer (a shelf's end, a task's deadline) falls due. A
running order keeps its tick each second: it stamps the controller's heartbeat."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from services.line_controller.messages import new_message


@pytest.fixture
def statements(harness):
    """The statements the loop's engine sends, as they are sent."""
    sent = []

    def record(conn, cursor, statement, *args):
        sent.append(statement)

    event.listen(harness.engine, "before_cursor_execute", record)
    yield sent
    event.remove(harness.engine, "before_cursor_execute", record)


def timer_ticks(harness, count):
    """What the service's 1 s timer does ``count`` times (LineControllerEntrypoints.tick)."""
    for _ in range(count):
        if harness.loop.inbox.qsize() == 0 and harness.loop.tick_due():
            assert harness.loop.handle(new_message("ScheduleTick")).status == "HANDLED"


def test_an_idle_lines_ticks_send_no_statement_until_a_message_comes(harness, statements):
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 2})  # created, not started: IDLE
    timer_ticks(harness, 1)  # the look after the message
    statements.clear()
    timer_ticks(harness, 30)
    assert statements == []

    order = harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    assert harness.loop.tick_due()  # a message may have changed what is due
    statements.clear()
    timer_ticks(harness, 1)
    assert statements  # it looked
    assert harness.order(order["id"]).status == "CREATED"


def test_a_running_order_ticks_every_time(harness, statements):
    harness.started_order(quantity=1)
    for _ in range(3):
        statements.clear()
        timer_ticks(harness, 1)
        assert statements  # the heartbeat of a line that is not IDLE


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
