"""The line's states, stops and OEE (PRODUCT.md, "Shifts, downtime and OEE";
docs/oee.md), played through the real loop on the test's own clock: a shift
with a break and planned downtime, an order running across them, a machine
fault of 2 minutes, an e-stop of 40 s and a micro-stop of 10 s. A, P, Q and OEE
equal the hand calculation below; a split stop's halves each get a reason
(the Pareto shows both, times add up, no count moves); the states rebuilt from
the event log give the same stops and figures; a controller away for 20 s is a
CONTROLLER_DOWN stop of 20 s (a restart of a second is none)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from sqlalchemy import text

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from shared import downtime, oee
from shared.line_replay import rebuild_line_states
from shared.shift_calendar import parse_calendar
from shared.wire import iso

DAY = (datetime.now(UTC) - timedelta(days=1)).date()  # yesterday: the whole shift is in the past
CALENDAR = parse_calendar({"shifts": [{"name": "early", "start": "06:00", "end": "14:00"}],
                           "breaks": [{"shift": "early", "start": "10:00", "minutes": 30}]}, "test")
IDEALS = {"SHAFT-B": 44.0, "BRACKET-A": 68.0}
MICROSTOP = 30.0


def t(hh: int, mm: int = 0, ss: int = 0) -> datetime:
    return datetime.combine(DAY, time(hh, mm, ss), tzinfo=UTC)


class Clock:
    def __init__(self, harness):
        self.now = t(6)
        harness.loop.uow.clock = lambda: self.now

    def __call__(self, hh, mm=0, ss=0):
        self.now = t(hh, mm, ss)
        return self


def finish(harness, job_id, status):
    with harness.loop.uow.begin() as work:
        work.db.finish_job(job_id, status)
        work.close(None, status="HANDLED")


def play_the_shift(harness) -> Clock:
    clock = Clock(harness)
    _, (j1, j2, j3) = harness.started_order("SHAFT-B", quantity=3)
    clock(6, 0, 5)
    harness.ok("AddPlannedDowntime", {"from": iso(t(13)), "to": iso(t(13, 30)), "reason": "maintenance"})
    clock(7)
    harness.ok("MachineFault", {"machineId": "MC1", "fault": 7})
    clock(7, 2)
    harness.ok("MachineFault", {"machineId": "MC1", "fault": None})
    clock(9)
    finish(harness, j1, "COMPLETED")
    clock(11)
    harness.ok("RobotFault", {"fault": 1})
    clock(11, 0, 40)
    harness.ok("RobotFault", {"fault": None})
    clock(12)
    harness.ok("MachineFault", {"machineId": "MC2", "fault": 3})
    clock(12, 0, 10)
    harness.ok("MachineFault", {"machineId": "MC2", "fault": None})
    clock(12, 30)
    finish(harness, j2, "SCRAPPED")
    clock(13, 45)
    finish(harness, j3, "COMPLETED")
    return clock


def shift_item(engine) -> dict:
    with engine.connect() as conn:
        (item,) = oee.oee_items(conn, CALENDAR, IDEALS, t(0), t(23), "shift", datetime.now(UTC), MICROSTOP)
    return item


def the_stops(engine) -> list[dict]:
    with engine.connect() as conn:
        return [s.to_json() for s in downtime.stops(conn, t(0), t(23), datetime.now(UTC), MICROSTOP)]


def test_a_shift_with_a_break_a_fault_and_an_estop_equals_the_hand_calculation(harness, engine):
    play_the_shift(harness)
    item = shift_item(engine)
    # By hand: shift 06:00-14:00 = 28 800 s; planned: the break 10:00-10:30 and the
    # maintenance 13:00-13:30 = 3 600 s; PBT = 25 200 s. Down: the fault 07:00-07:02
    # (120 s) and the e-stop 11:00:00-11:00:40 (40 s) = 160 s; the 10 s fault is a
    # micro-stop. APT = 25 040 s. Produced 3 × 44 s ideal = 132 s; good 2.
    assert (item["shift"], item["from"], item["to"]) == ("early", iso(t(6)), iso(t(14)))
    assert item["shiftSeconds"] == pytest.approx(28800, abs=1)
    assert item["plannedDowntimeSeconds"] == pytest.approx(3600, abs=1)
    assert item["plannedBusySeconds"] == pytest.approx(25200, abs=1)
    assert item["downSeconds"] == pytest.approx(160, abs=1) and item["stops"] == 2
    assert (item["microStops"], item["microStopSeconds"]) == (1, pytest.approx(10, abs=1))
    assert item["actualProductionSeconds"] == pytest.approx(25040, abs=1)
    assert (item["produced"], item["good"], item["scrapped"]) == (3, 2, 1)
    assert item["availability"] == pytest.approx(25040 / 25200, abs=1e-4)
    assert item["performance"] == pytest.approx(132 / 25040, abs=1e-4)
    assert item["quality"] == pytest.approx(2 / 3, abs=1e-4)
    assert item["oee"] == pytest.approx(25040 / 25200 * 132 / 25040 * 2 / 3, abs=1e-4)
    assert (item["mtbfSeconds"], item["mttrSeconds"]) == (pytest.approx(12520, abs=1), pytest.approx(80, abs=1))
    # Anyone recomputes the figures from the item's own inputs.
    pbt = item["shiftSeconds"] - item["plannedDowntimeSeconds"]
    apt = pbt - item["downSeconds"]
    a, p, q = apt / pbt, item["idealSeconds"] / apt, item["good"] / item["produced"]
    assert (item["plannedBusySeconds"], item["actualProductionSeconds"]) == (pbt, apt)
    assert (item["availability"], item["performance"], item["quality"], item["oee"]) == pytest.approx(
        (a, p, q, a * p * q), abs=1e-6)
    causes = [(s["cause"], s["equipmentId"], s["from"], s["to"]) for s in the_stops(engine)]
    assert causes == [("EQUIPMENT_FAULT", "MC1", iso(t(7)), iso(t(7, 2))),
                      ("ESTOP", None, iso(t(11)), iso(t(11, 0, 40)))]
    with engine.connect() as conn:
        states = downtime.timeline(conn, CALENDAR, t(9, 59), t(11, 1), datetime.now(UTC))
    assert [(s["state"], s["from"], s["to"]) for s in states] == [
        ("RUNNING", iso(t(9, 59)), iso(t(10))), ("PLANNED_DOWN", iso(t(10)), iso(t(10, 30))),
        ("RUNNING", iso(t(10, 30)), iso(t(11))), ("DOWN", iso(t(11)), iso(t(11, 0, 40))),
        ("RUNNING", iso(t(11, 0, 40)), iso(t(11, 1)))]


def test_a_split_stop_each_half_with_its_reason_changes_no_count(harness, engine):
    clock = play_the_shift(harness)
    before = shift_item(engine)
    fault, estop = the_stops(engine)
    clock(14, 10)
    split = harness.ok("SplitStop", {"stopId": fault["id"], "at": iso(t(7, 0, 45))})
    first, second = split["stops"]
    harness.ok("AssignStopReason", {"stopId": first["id"], "reasonCode": "MECHANICAL", "comment": "spindle"})
    harness.ok("AssignStopReason", {"stopId": second["id"], "reasonCode": "ELECTRICAL"})
    harness.ok("AssignStopReason", {"stopId": estop["id"], "reasonCode": "SAFETY"})
    stops = the_stops(engine)
    assert [(s["reasonCode"], s["seconds"]) for s in stops] == [("MECHANICAL", 45), ("ELECTRICAL", 75), ("SAFETY", 40)]
    assert stops[0]["assignedBy"] == "op1" and stops[1]["splitFrom"] == fault["id"]
    with engine.connect() as conn:
        found = downtime.stops(conn, t(0), t(23), datetime.now(UTC), MICROSTOP)
        audit = conn.execute(text("SELECT actor, action, target_id FROM audit_log WHERE action IN "
                                  "('SplitStop', 'AssignStopReason') ORDER BY id")).all()
    assert [(r.actor, r.action) for r in audit] == [("op1", "SplitStop")] + [("op1", "AssignStopReason")] * 3
    pareto = downtime.pareto(found, t(0), t(23))
    assert [(p["reasonCode"], p["seconds"], p["stops"]) for p in pareto] == [
        ("ELECTRICAL", 75, 1), ("MECHANICAL", 45, 1), ("SAFETY", 40, 1)]
    after = shift_item(engine)
    # Both halves are stops of their own now; every time and piece count is as it was.
    assert after == {**before, "stops": 3, "mtbfSeconds": pytest.approx(25040 / 3, abs=1e-3),
                     "mttrSeconds": pytest.approx(160 / 3, abs=1e-3)}
    bad = harness.send("SplitStop", {"stopId": first["id"], "at": iso(t(8))})
    assert (bad.status, bad.error["code"]) == ("REJECTED", "VALIDATION_ERROR")


def test_the_states_rebuilt_from_the_event_log_give_the_same_stops_and_figures(harness, engine):
    clock = play_the_shift(harness)
    fault, _ = the_stops(engine)
    clock(14, 10)
    harness.ok("SplitStop", {"stopId": fault["id"], "at": iso(t(7, 1))})
    harness.ok("AssignStopReason", {"stopId": fault["id"], "reasonCode": "MECHANICAL"})
    live_stops, live_item = the_stops(engine), shift_item(engine)
    with engine.begin() as conn:
        applied = rebuild_line_states(conn)
        assert conn.execute(text("SELECT count(*) FROM planned_downtime")).scalar() == 1
    assert applied > 10
    assert the_stops(engine) == live_stops
    assert shift_item(engine) == live_item


def test_a_controller_away_for_20_s_is_a_controller_down_stop_of_20_s(harness, engine, layout):
    clock = play_the_shift(harness)
    clock(13, 48)
    harness.started_order("SHAFT-B", quantity=1)  # the first order is done: one running now
    clock(13, 49)
    harness.send("ScheduleTick")
    harness.loop.stop()
    again = EventLoop(engine, layout)  # a restart of a second: not an outage
    again.uow.clock = lambda: t(13, 49, 1)
    again.start(consume=False)
    again.uow.clock = lambda: t(13, 50)
    again.handle(new_message("ScheduleTick"))  # the loop's last transaction before it goes: its heartbeat
    again.stop()
    back = EventLoop(engine, layout)
    back.uow.clock = lambda: t(13, 50, 20)
    back.start(consume=False)
    back.stop()
    stops = the_stops(engine)
    assert [(s["cause"], s["from"], s["to"], s["seconds"]) for s in stops if s["cause"] == "CONTROLLER_DOWN"] == [
        ("CONTROLLER_DOWN", iso(t(13, 50)), iso(t(13, 50, 20)), 20)]
    item = shift_item(engine)
    assert item["stops"] == 3 and item["downSeconds"] == pytest.approx(180, abs=1)
