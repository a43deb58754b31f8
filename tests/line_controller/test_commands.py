"""Operator commands: order and job control, alarms, recovery, audit."""

from tests.line_controller.scripted import Load, Refill


def test_create_and_start_an_order(harness):
    order = harness.ok("CreateOrder", {"productId": "BRACKET-A", "quantity": 3, "priority": 2})
    assert (order["status"], order["quantity"], order["priority"]) == ("CREATED", 3, 2)
    assert order["code"].startswith("WO-")
    route = harness.order(order["id"]).route
    assert [s["op"] for s in route] == ["scan", "process", "process", "inspect", "mark"]
    started = harness.ok("StartOrder", {"workOrderId": order["id"]})
    assert started["status"] == "RUNNING" and started["startedAt"]
    jobs = harness.rows("SELECT * FROM job WHERE work_order_id = :o ORDER BY seq_no", o=order["id"])
    assert [(j.seq_no, j.status, j.position_type) for j in jobs] == [(n, "PENDING", "ON_DOCK") for n in (1, 2, 3)]
    assert harness.send("StartOrder", {"workOrderId": order["id"]}).error["code"] == "INVALID_TRANSITION"
    assert harness.send("CreateOrder", {"productId": "NOPE", "quantity": 1}).error["code"] == "VALIDATION_ERROR"
    dup = harness.send("CreateOrder", {"productId": "SHAFT-B", "quantity": 1, "code": order["code"]})
    assert dup.error["code"] == "VALIDATION_ERROR"


def test_pause_holds_jobs_at_rest_and_resume_restores_them(harness):
    oid, jobs = harness.started_order(quantity=3)
    harness.on_buffer(jobs[0], 1)
    moving = harness.act(Refill(jobs[1], 2))
    harness.ok("PauseOrder", {"workOrderId": oid})
    states = [(harness.job(j).status, harness.job(j).held_status) for j in jobs]
    assert states == [("PAUSED", "QUEUED"), ("MOVING", None), ("PAUSED", "PENDING")]
    assert harness.send("PauseOrder", {"workOrderId": oid}).error["code"] == "INVALID_TRANSITION"
    harness.succeed(moving)  # the action in progress still finishes
    harness.ok("ResumeOrder", {"workOrderId": oid})
    assert [harness.job(j).status for j in jobs] == ["QUEUED", "QUEUED", "PENDING"]
    assert harness.order(oid).status == "RUNNING"


def test_cancel_frees_the_cell_and_leaves_a_manual_action(harness):
    oid, jobs = harness.started_order(quantity=3)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    harness.on_buffer(jobs[1], 2)
    result = harness.ok("CancelOrder", {"workOrderId": oid})
    assert result["status"] == "CANCELLED"
    assert {harness.job(j).status for j in jobs} == {"CANCELLED"}
    assert harness.row("SELECT count(*) AS n FROM job WHERE temp_slot_no IS NOT NULL").n == 0
    out = harness.hardware.requests[-1]  # the piece on the buffer leaves by robot
    assert (out.rpc, out.kwargs) == ("buffer_to_dock", {"slot_no": 2, "job_id": jobs[1]})
    assert harness.succeed(out).status == "HANDLED"
    # the one on the machine is the operator's; nothing is loaded over it meanwhile
    (action,) = harness.manual_actions("REMOVE_CANCELLED_PIECES")
    assert [p["jobId"] for p in action.context["pieces"]] == [jobs[0]]
    assert (harness.slot("MC1", 1).status, harness.slot("MC1", 1).current_job_id) == ("OCCUPIED", jobs[0])
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 1, "jobId": jobs[0]})  # its cycle ends: no change
    assert harness.slot("MC1", 1).status == "OCCUPIED"
    harness.ok("ResolveManualAction", {"manualActionId": action.id, "resolution": "DONE"})
    assert harness.slot("MC1", 1).status == "EMPTY"
    order = harness.order(oid)
    assert (order.completed_qty, order.scrapped_qty) == (0, 0)
    assert harness.send("CancelOrder", {"workOrderId": oid}).error["code"] == "INVALID_TRANSITION"


def test_suspend_and_resume_a_job(harness):
    oid, jobs = harness.started_order(quantity=2)
    harness.on_buffer(jobs[0], 1)
    assert harness.ok("SuspendJob", {"jobId": jobs[0]})["status"] == "SUSPENDED"
    assert harness.send("SuspendJob", {"jobId": jobs[0]}).error["code"] == "INVALID_TRANSITION"
    assert harness.ok("ResumeJob", {"jobId": jobs[0]})["status"] == "QUEUED"
    harness.act(Load(jobs[0], "MC1", 1))
    assert harness.send("SuspendJob", {"jobId": jobs[0]}).error["code"] == "INVALID_TRANSITION"
    assert harness.send("ResumeJob", {"jobId": jobs[1]}).error["code"] == "INVALID_TRANSITION"
    assert harness.send("SuspendJob", {"jobId": 9999}).error["code"] == "NOT_FOUND"


def test_rework_sends_a_piece_back_to_an_earlier_step(harness):
    oid, (j,) = harness.started_order(product="BRACKET-A", quantity=1)
    harness.on_buffer(j, 4)
    harness.ok("SuspendJob", {"jobId": j})
    assert harness.send("ReworkJob", {"jobId": j, "stepIndex": 3}).error["code"] == "VALIDATION_ERROR"
    job = harness.ok("ReworkJob", {"jobId": j, "stepIndex": 0})
    assert (job["status"], job["stepIndex"], job["context"]["reworkCount"]) == ("QUEUED", 0, 1)


def test_alarm_acknowledge_and_audit(harness):
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2})  # an unexpected signal → alarm
    (alarm,) = harness.alarms()
    acked = harness.ok("AcknowledgeAlarm", {"alarmId": alarm.id}, actor="alice")
    assert (acked["status"], acked["acknowledgedBy"]) == ("ACKNOWLEDGED", "alice")
    assert harness.send("AcknowledgeAlarm", {"alarmId": alarm.id}).error["code"] == "INVALID_TRANSITION"
    audit = harness.rows("SELECT * FROM audit_log ORDER BY id")
    assert [(a.actor, a.action, a.target_type, a.target_id, a.outcome) for a in audit] == [
        ("alice", "AcknowledgeAlarm", "alarm", str(alarm.id), "HANDLED"),
        ("op1", "AcknowledgeAlarm", "command", audit[1].target_id, "REJECTED"),
    ]


def test_confirm_recovery_releases_held_jobs(harness):
    oid, jobs = harness.started_order(quantity=2)
    harness.on_buffer(jobs[0], 1)
    harness.ok("SuspendJob", {"jobId": jobs[0]})
    from services.line_controller.dbstate import DBState
    with harness.engine.begin() as conn:  # as start-up recovery would record it
        action = DBState(conn).create_manual_action("RECOVERY_CHECK", "check slot", ["CONFIRMED"],
                                                    job_id=jobs[0])
    assert harness.send("ConfirmRecovery", {"manualActionIds": [action.id + 1]}).error["code"] == "NOT_FOUND"
    assert harness.ok("ConfirmRecovery", {}) == {"confirmed": [action.id]}
    assert harness.job(jobs[0]).status == "QUEUED"
    assert harness.manual_actions("RECOVERY_CHECK")[0].resolved_by == "op1"
