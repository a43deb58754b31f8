"""The dock's piece count: refills never send the robot to an empty dock, and
a dock that runs empty anyway is no fault."""

from datetime import UTC, datetime, timedelta

import pytest

from services.line_controller.scheduler import default_scheduler
from tests.line_controller.conftest import Harness
from tests.line_controller.scripted import Refill
from tests.line_controller.test_recovery import Restarted, plc


def dock(h):
    return h.row("SELECT pieces_waiting FROM dock").pieces_waiting


def refills(h):
    return [r for r in h.hardware.requests if r.rpc == "dock_to_buffer"]


@pytest.fixture
def scheduled(engine, layout):
    """The loop with the real scheduler."""
    h = Harness(engine, layout)
    h.loop.scheduler = default_scheduler()
    h.loop.start(consume=False)
    yield h
    h.loop.stop()


def test_a_short_pallet_is_refilled_as_it_is_and_the_next_pallet_follows(scheduled):
    h = scheduled
    assert dock(h) is None  # the PLC has not reported yet
    h.ok("PalletArrived", {"count": 3})
    assert dock(h) == 3

    _, jobs = h.started_order(quantity=8)

    first = refills(h)
    assert [r.kwargs["job_id"] for r in first] == jobs[:3]  # not 8: three are there
    assert dock(h) == 0
    # While the three are on their way, a pallet of 4 arrives: all 4 may be taken.
    h.ok("PalletArrived", {"count": 4})
    assert dock(h) == 4
    changes = h.rows("SELECT payload FROM event_log WHERE type = 'DockChanged' ORDER BY seq")
    assert [c.payload["piecesWaiting"] for c in changes] == [3, 0, 4]


def test_an_older_reading_never_overrides_a_newer_one(harness):
    _, (j,) = harness.started_order(quantity=1)
    req = harness.act(Refill(j, 1))
    harness.ok("PalletArrived", {"count": 4, "observedAt": "2026-11-30T10:00:01+00:00"})
    # The robot found the dock empty just before that pallet came; its result is late.
    harness.send("RobotActionFailed", {"correlationId": str(req.task_id), "errorCode": "SOURCE_EMPTY",
                                       "finishedAt": "2026-11-30T10:00:00+00:00"},
                 correlation_id=str(req.task_id))
    assert dock(harness) == 4
    assert harness.job(j).status == "PENDING"  # the piece itself still waits at the dock


def test_a_pallet_seen_after_the_refill_started_outlives_its_late_source_empty(harness):
    """The robot looks, finds the dock empty, and the PLC brings a pallet at once;
    the watcher's reading of it can be stamped before the action's result is. The
    pallet stands: it may have come after the robot looked, and a count of 0 would
    wait for a pallet the PLC has no reason to bring (a stall, issue 41)."""
    _, (j,) = harness.started_order(quantity=1)
    req = harness.act(Refill(j, 1))
    seen = datetime.now(UTC)
    harness.ok("PalletArrived", {"count": 4, "observedAt": seen.isoformat()})
    harness.send("RobotActionFailed", {"correlationId": str(req.task_id), "errorCode": "SOURCE_EMPTY",
                                       "finishedAt": (seen + timedelta(milliseconds=5)).isoformat()},
                 correlation_id=str(req.task_id))
    assert dock(harness) == 4
    assert harness.job(j).status == "PENDING"


def test_an_empty_dock_sends_the_piece_back_to_wait_without_an_alarm(harness):
    _, (j,) = harness.started_order(quantity=1)
    req = harness.act(Refill(j, 2))
    assert harness.job(j).status == "MOVING"

    out = harness.fail(req, "SOURCE_EMPTY")

    assert out.status == "HANDLED", out
    job = harness.job(j)
    assert (job.status, job.position_type, job.temp_slot_no, job.error_code) == ("PENDING", "ON_DOCK", None, None)
    task = harness.row("SELECT * FROM task WHERE id = :id", id=req.task_id)
    assert (task.status, task.error_code) == ("FAILED", "SOURCE_EMPTY")
    assert harness.alarms() == [] and harness.manual_actions() == []
    assert dock(harness) == 0
    assert harness.rows("SELECT payload FROM event_log WHERE type = 'DockEmpty'")[0].payload["jobIds"] == [j]


def test_a_refused_refill_gives_its_piece_back_to_the_dock(scheduled):
    h = scheduled
    h.ok("PalletArrived", {"count": 1})
    _, (j,) = h.started_order(quantity=1)
    (req,) = refills(h)
    assert dock(h) == 0
    h.fail(req, "REJECTED")
    assert dock(h) == 1


def test_the_start_up_check_takes_the_dock_count_from_the_plc(engine, layout):
    h = Restarted(engine, layout, lambda: {**plc(), "dock": {"pieces": 5, "arrivals": 2}})
    h.recover()
    assert dock(h) == 5
    h.loop.stop()
