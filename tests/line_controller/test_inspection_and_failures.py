"""Inspection outcomes, failed hardware actions, step timeouts."""

from sqlalchemy import text

from tests.line_controller.scripted import Load, Scan, StartMachine, Unload


def _to_inspection(h, job_id, buffer_slot=1):
    """SHAFT-B: machined, back on the buffer at step 1, then loaded on INSP1."""
    h.on_equipment(job_id, "MC1", 1, buffer_slot)
    h.ok("MachineDone", {"machineId": "MC1"})
    h.succeed(h.act(Unload(job_id, "MC1", 1)))
    assert (h.job(job_id).status, h.job(job_id).step_index) == ("QUEUED", 1)
    h.succeed(h.act(Load(job_id, "INSP1", 1)))
    h.start("INSP1")


def test_a_pass_goes_on_and_completes_the_last_step(harness):
    oid, (j,) = harness.started_order(quantity=1)
    _to_inspection(harness, j)
    harness.ok("InspectionResult", {"machineId": "INSP1", "pass": True, "details": {"diameter": 12.01}})
    job = harness.job(j)
    assert job.status == "WAITING_UNLOAD"
    assert job.context["inspection"]["pass"] is True and job.context["inspection"]["details"] == {"diameter": 12.01}
    harness.succeed(harness.act(Unload(j, "INSP1", 1)))
    job, order = harness.job(j), harness.order(oid)
    assert (job.status, job.position_type, job.temp_slot_no) == ("COMPLETED", "OUT", None)
    assert (order.status, order.completed_qty, order.scrapped_qty) == ("COMPLETED", 1, 0)
    # The finished piece leaves the cell: a robot task, answered like any other.
    out = harness.hardware.requests[-1]
    assert (out.rpc, out.kwargs) == ("buffer_to_dock", {"slot_no": 1, "job_id": j})
    task = harness.row("SELECT * FROM task WHERE id = :id", id=out.task_id)
    assert (task.kind, task.status, task.job_id) == ("BUFFER_TO_DOCK", "RUNNING", j)
    assert harness.succeed(out).status == "HANDLED"
    assert harness.row("SELECT status FROM task WHERE id = :id", id=out.task_id).status == "SUCCEEDED"


def test_a_fail_scraps_the_piece_once_it_is_off_the_station(harness):
    oid, (j, _) = harness.started_order(quantity=2)
    _to_inspection(harness, j)
    harness.ok("MachineDone", {"machineId": "INSP1", "pass": False})  # a done signal with a verdict
    assert harness.job(j).context["disposition"] == "SCRAP"
    harness.succeed(harness.act(Unload(j, "INSP1", 1)))
    assert harness.job(j).status == "SCRAPPED"
    assert harness.slot("INSP1", 1).status == "EMPTY"
    order = harness.order(oid)
    assert (order.status, order.scrapped_qty) == ("RUNNING", 1)


def test_no_verdict_asks_the_operator(harness):
    oid, (j,) = harness.started_order(quantity=1)
    _to_inspection(harness, j)
    harness.ok("InspectionResult", {"machineId": "INSP1"})
    (decision,) = harness.manual_actions("INSPECTION_DECISION")
    assert decision.choices == ["PASS", "SCRAP", "REWORK"]
    harness.succeed(harness.act(Unload(j, "INSP1", 1)))
    job = harness.job(j)
    assert (job.status, job.held_status, job.position_type) == ("SUSPENDED", "QUEUED", "ON_BUFFER")
    assert harness.send("ResolveManualAction", {"manualActionId": decision.id,
                                                "resolution": "MAYBE"}).error["code"] == "VALIDATION_ERROR"
    harness.ok("ResolveManualAction", {"manualActionId": decision.id, "resolution": "REWORK"})
    job = harness.job(j)
    assert (job.status, job.step_index) == ("QUEUED", 0)


def test_a_failed_robot_action_puts_the_job_in_error_with_an_alarm(harness):
    oid, (j,) = harness.started_order(quantity=1)
    harness.on_buffer(j, 6)
    req = harness.act(Load(j, "MC1", 1))
    assert harness.fail(req, "PLC_ERROR").status == "HANDLED"
    job = harness.job(j)
    assert (job.status, job.error_code) == ("ERROR", "PLC_ERROR")
    task = harness.row("SELECT * FROM task WHERE id = :id", id=req.task_id)
    assert (task.status, task.error_code) == ("FAILED", "PLC_ERROR")
    (alarm,) = harness.alarms("ACTION_FAILED")
    (action,) = harness.manual_actions("ACTION_FAILED")
    assert (alarm.task_id, action.job_id, action.alarm_id) == (req.task_id, j, alarm.id)
    # The facts that fill the English text, for the page to word in its reader's language.
    assert action.facts == {"taskKind": "BUFFER_TO_EQUIPMENT", "jobId": j, "errorCode": "PLC_ERROR"}
    assert (alarm.facts["taskKind"], alarm.facts["errorCode"], alarm.facts["jobId"]) == \
        ("BUFFER_TO_EQUIPMENT", "PLC_ERROR", j)
    # The operator puts the piece back on its buffer slot and retries.
    harness.ok("AcknowledgeAlarm", {"alarmId": alarm.id})
    harness.ok("ResolveManualAction", {"manualActionId": action.id, "resolution": "RETRY"})
    job = harness.job(j)
    assert (job.status, job.position_type, job.temp_slot_no, job.error_code) == ("QUEUED", "ON_BUFFER", 6, None)
    alarm = harness.alarms("ACTION_FAILED")[0]
    assert (alarm.status, alarm.acknowledged_by, alarm.cleared_by) == ("CLEARED", "op1", "op1")
    assert alarm.acknowledged_at <= alarm.cleared_at


def test_an_action_that_failed_the_same_way_twice_says_so_and_offers_no_plain_retry(harness):
    oid, (j,) = harness.started_order(quantity=1)
    harness.on_buffer(j, 4)

    def fail_load(code="PLC_ERROR"):
        assert harness.fail(harness.act(Load(j, "MC1", 1)), code).status == "HANDLED"
        action = [a for a in harness.manual_actions("ACTION_FAILED") if a.status == "OPEN"][-1]
        alarm = harness.row("SELECT * FROM alarm WHERE id = :id", id=action.alarm_id)
        return action, alarm

    def answer(action, resolution):
        return harness.send("ResolveManualAction", {"manualActionId": action.id, "resolution": resolution})

    first, _ = fail_load()
    assert (first.choices, "case" in first.facts) == (["RETRY", "SCRAP"], False)
    assert answer(first, "RETRY").status == "HANDLED"

    second, alarm = fail_load()  # the same action, the same way, right after a RETRY
    assert second.choices == ["RETRY_AFTER_CHECK", "SCRAP"]
    assert second.facts == {"taskKind": "BUFFER_TO_EQUIPMENT", "jobId": j, "errorCode": "PLC_ERROR",
                            "case": "REPEATED", "failures": 2}
    assert "2 times in a row" in second.text and "2 times in a row" in alarm.message
    assert (alarm.facts["case"], alarm.facts["failures"]) == ("REPEATED", 2)
    assert answer(second, "RETRY").error["code"] == "VALIDATION_ERROR"  # not as if nothing were known
    assert answer(second, "RETRY_AFTER_CHECK").status == "HANDLED"  # the cause found: the piece back, as RETRY
    job = harness.job(j)
    assert (job.status, job.position_type, job.temp_slot_no) == ("QUEUED", "ON_BUFFER", 4)

    third, _ = fail_load()
    assert (third.choices, third.facts["failures"]) == (["RETRY_AFTER_CHECK", "SCRAP"], 3)
    assert answer(third, "RETRY_AFTER_CHECK").status == "HANDLED"
    other, _ = fail_load("REJECTED")  # another failure: nothing known about it yet
    assert (other.choices, "case" in other.facts) == (["RETRY", "SCRAP"], False)
    assert answer(other, "RETRY").status == "HANDLED"
    assert harness.succeed(harness.act(Load(j, "MC1", 1))).status == "HANDLED"


def test_a_refused_request_suspends_the_job_where_it_was(harness):
    oid, (j,) = harness.started_order(quantity=1)
    harness.on_buffer(j, 2)
    req = harness.act(Scan(j))
    harness.loop.refuse(req, "REJECTED", "scanner busy")  # as the hardware port does
    outcome = harness.next()
    assert outcome.status == "HANDLED"
    job = harness.job(j)
    assert (job.status, job.held_status, job.position_type) == ("SUSPENDED", "QUEUED", "ON_BUFFER")
    (action,) = harness.manual_actions("ACTION_FAILED")
    harness.ok("ResolveManualAction", {"manualActionId": action.id, "resolution": "SCRAP"})
    assert harness.job(j).status == "SCRAPPED"
    assert harness.order(oid).status == "COMPLETED"


def test_a_tool_result_records_its_data_and_advances(harness):
    oid, (j,) = harness.started_order(product="BRACKET-A", quantity=1)
    harness.on_buffer(j, 1)
    req = harness.act(Scan(j))
    harness.succeed(req, {"code": "BC-123"}, type_="ToolActionSucceeded")
    job = harness.job(j)
    assert (job.status, job.step_index, job.context["barcode"]) == ("QUEUED", 1, "BC-123")


def test_an_overdue_task_times_out_through_a_message(harness):
    oid, (j,) = harness.started_order(quantity=1)
    harness.on_buffer(j, 3)
    req = harness.act(Load(j, "MC2", 2))
    with harness.engine.begin() as c:
        c.execute(text("UPDATE task SET deadline_at = now() - interval '1 second' WHERE id = :id"),
                  {"id": req.task_id})
    harness.ok("ScheduleTick")
    assert harness.next().message_id == f"timeout-{req.task_id}"
    assert harness.row("SELECT type FROM loop_message WHERE id = :id",
                       id=f"timeout-{req.task_id}").type == "StepTimeout"
    assert harness.row("SELECT error_code FROM task WHERE id = :id", id=req.task_id).error_code == "ACTION_TIMEOUT"
    job = harness.job(j)
    assert (job.status, job.error_code) == ("SUSPENDED", "ACTION_TIMEOUT")
    (alarm,) = harness.alarms("ACTION_FAILED")
    (action,) = harness.manual_actions("ACTION_FAILED")
    assert (action.job_id, action.alarm_id, action.choices) == (j, alarm.id, ["RETRY", "SCRAP"])
    assert harness.send("ResumeJob", {"jobId": j}).error["code"] == "INVALID_TRANSITION"  # the action first
    assert harness.succeed(req).status == "STALE"  # the robot answers after all: ignored


def test_a_machine_that_fails_to_start_is_faulted(harness):
    oid, (j,) = harness.started_order(quantity=1)
    harness.on_equipment(j, "MC1", 1, 1, start=False)
    assert harness.job(j).status == "QUEUED"  # loaded, cycle not started
    req = harness.act(StartMachine("MC1"))
    assert req.kwargs["jobs"] == {"1": j}
    assert harness.job(j).status == "PROCESSING"
    harness.fail(req, "PLC_ERROR", type_="MachineStartFailed")
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "FAULT"
    job = harness.job(j)
    assert (job.status, job.held_status) == ("SUSPENDED", "QUEUED")  # loaded, not started
    (action,) = harness.manual_actions("EQUIPMENT_FAULT")
    assert action.facts == {"equipmentId": "MC1", "errorCode": "PLC_ERROR"}
    harness.ok("ResolveManualAction", {"manualActionId": action.id, "resolution": "RETRY"})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"
    assert harness.job(j).status == "QUEUED"
    harness.succeed(harness.act(StartMachine("MC1")), type_="MachineStartSucceeded")
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "RUNNING"
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 1})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"
