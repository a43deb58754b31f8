"""The line_controller's side of a clean hardware stop: an action answered
NOT_EXECUTED is put back with no alarm and no question; no robot work is sent
while the hardware is away; after its restart only what an earlier instance
accepted may have started, so only that is asked about."""

from datetime import UTC

import pytest

from services.line_controller import consistency_checks as r
from tests.line_controller.scripted import Load, Refill, Unload
from tests.line_controller.test_inspection_and_failures import _to_inspection


def _not_executed(h, req, type_="RobotActionFailed"):
    return h.fail(req, code="NOT_EXECUTED", type_=type_)


def _now(h):
    return h.row("SELECT clock_timestamp() AS at").at.astimezone(UTC).isoformat()


def test_a_refill_not_executed_puts_the_job_back_at_the_dock_silently(harness):
    harness.ok("PalletArrived", {"count": 4})
    _, (j, _) = harness.started_order(quantity=2)
    before = harness.job(j)
    req = harness.act(Refill(j, 1))
    assert harness.row("SELECT pieces_waiting FROM dock").pieces_waiting == 3
    assert _not_executed(harness, req).status == "HANDLED"
    job = harness.job(j)
    assert (job.status, job.position_type, job.temp_slot_no) == \
        (before.status, before.position_type, before.temp_slot_no)
    assert harness.row("SELECT pieces_waiting FROM dock").pieces_waiting == 4
    assert harness.alarms() == [] and harness.manual_actions() == []
    assert harness.row("SELECT status, error_code FROM task WHERE id = :id", id=req.task_id) == \
        ("FAILED", "NOT_EXECUTED")


def test_a_load_not_executed_leaves_the_piece_queued_on_its_buffer_slot(harness):
    _, (j, _) = harness.started_order(quantity=2)
    harness.on_buffer(j, 2)
    assert _not_executed(harness, harness.act(Load(j, "MC1", 1))).status == "HANDLED"
    job = harness.job(j)
    assert (job.status, job.position_type, job.temp_slot_no) == ("QUEUED", "ON_BUFFER", 2)
    assert harness.slot("MC1", 1).status == "EMPTY"
    assert harness.alarms() == [] and harness.manual_actions() == []


def test_a_take_out_not_executed_is_sent_again(harness):
    _, (j,) = harness.started_order(quantity=1)
    _to_inspection(harness, j)
    harness.ok("InspectionResult", {"machineId": "INSP1", "pass": True})
    harness.succeed(harness.act(Unload(j, "INSP1", 1)))
    takeout = harness.hardware.requests[-1]
    assert takeout.rpc == "buffer_to_dock"
    before = len(harness.hardware.requests)
    assert _not_executed(harness, takeout).status == "HANDLED"
    (again,) = harness.hardware.requests[before:]
    assert (again.rpc, again.kwargs) == ("buffer_to_dock", takeout.kwargs)
    assert again.task_id != takeout.task_id
    assert harness.alarms() == [] and harness.manual_actions() == []
    assert harness.succeed(again).status == "HANDLED"


def test_no_robot_work_is_sent_while_the_hardware_is_away(harness):
    _, (j, k) = harness.started_order(quantity=2)
    started = _now(harness)
    assert harness.send("HardwareStopping", {"instanceId": "hw-a", "startedAt": started}).status == "HANDLED"
    assert harness.loop.status()["hardwareAway"]
    harness.scheduler.queued.append(Refill(j, 1))
    harness.loop.schedule()
    assert harness.hardware.requests == []
    assert harness.rows("SELECT id FROM task") == []
    # The next instance starts: its check clears the hold, and work goes out again.
    harness.send("RecoveryCheck", {"plcState": None, "hardwareStartedAt": _now(harness),
                                   "acceptedByEarlier": []})
    assert not harness.loop.status()["hardwareAway"]
    harness.act(Refill(k, 2))


def test_an_older_instances_late_stop_does_not_hold_a_newer_one(harness):
    old_start = _now(harness)
    harness.send("RecoveryCheck", {"plcState": None, "hardwareStartedAt": _now(harness),
                                   "acceptedByEarlier": []})
    harness.send("HardwareStopping", {"instanceId": "hw-old", "startedAt": old_start})
    assert not harness.loop.status()["hardwareAway"]


def test_after_a_hardware_restart_only_what_an_earlier_instance_accepted_is_asked(harness):
    _, (j, k) = harness.started_order(quantity=2)
    accepted = harness.act(Refill(j, 1))      # accepted by the instance that went away
    queued = harness.act(Refill(k, 2))        # still in the request queue: the new one runs it
    out = harness.send("RecoveryCheck", {"plcState": None, "hardwareStartedAt": _now(harness),
                                         "acceptedByEarlier": [str(accepted.task_id)]})
    assert out.status == "HANDLED" and out.result["inconsistencies"] == 1
    assert harness.row("SELECT status FROM task WHERE id = :id", id=accepted.task_id).status == "FAILED"
    assert harness.row("SELECT status FROM task WHERE id = :id", id=queued.task_id).status == "RUNNING"
    assert [a.kind for a in harness.manual_actions()] == [r.TASK_OUTCOME_UNKNOWN]


@pytest.mark.parametrize("type_, payload", [
    ("HardwareStopping", {"instanceId": "hw-a", "startedAt": "yesterday"}),
    ("HardwareStopping", {"instanceId": "hw-a", "startedAt": "2026-12-01T10:00:00"}),  # no offset
    ("RecoveryCheck", {"plcState": None, "hardwareStartedAt": "not a time"}),
])
def test_a_malformed_hardware_instant_is_rejected_and_changes_nothing(harness, type_, payload):
    out = harness.send(type_, payload)
    assert (out.status, out.error["code"]) == ("REJECTED", "VALIDATION_ERROR")
    assert not harness.loop.status()["hardwareAway"] and harness.manual_actions() == []
