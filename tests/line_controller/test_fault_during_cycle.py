"""A machine that faults with pieces in its cycle (PRODUCT.md, "Faults on the
floor"): the pieces are SUSPENDED in their slots, one MACHINE_FAULT_DURING_CYCLE
action per machine names them, and each answer does what the contract says.
Also: the PLC's connection and the robot's fault as the loop sees them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.line_controller import consistency_checks as r
from tests.line_controller.scripted import StartMachine, Unload

FAULT = {"fault": 6, "observedAt": "2026-12-01T10:00:00+00:00"}


def _fault(harness, machine, **kw):
    harness.ok("MachineFault", {"machineId": machine, **FAULT, **kw})


def _clear(harness, machine):
    harness.ok("MachineFault", {"machineId": machine})


def _status(harness, machine):
    return harness.row("SELECT status FROM equipment WHERE id = :e", e=machine).status


def _answer(harness, action, resolution):
    return harness.send("ResolveManualAction", {"manualActionId": action.id, "resolution": resolution})


def _cycles(harness, machine):
    return harness.rows("SELECT job_ids, aborted, ended_at FROM machine_cycle WHERE equipment_id = :e "
                        "ORDER BY id", e=machine)


def test_a_fault_mid_cycle_suspends_the_piece_and_asks_once(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)  # a single-slot station, its cycle running
    _fault(harness, "INSP1")
    _fault(harness, "INSP1", fault=7)  # the same fault, another code: still one question

    row = harness.job(job)
    assert (row.status, row.position_type, row.position_ref_id) == ("SUSPENDED", "ON_EQUIPMENT", "INSP1:1")
    assert harness.slot("INSP1", 1).status == "OCCUPIED"
    (action,) = harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")
    assert (action.status, action.equipment_id, action.choices) == (
        "OPEN", "INSP1", ["RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"])
    assert f"job {job} (slot 1)" in action.text
    # The facts the page words it from (issue 27): the machine and each stopped piece's job and slot.
    assert action.facts["equipmentId"] == "INSP1" and action.facts["stopped"] == [{"jobId": job, "slotNo": 1}]
    (alarm,) = [a for a in harness.alarms("EQUIPMENT_FAULT")]
    assert alarm.facts == {"equipmentId": "INSP1", "fault": alarm.facts["fault"]} and alarm.facts["fault"]
    assert _status(harness, "INSP1") == "FAULT"


def test_restart_is_refused_while_the_plc_reports_the_fault_and_runs_the_cycle_again_after(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)
    _fault(harness, "INSP1")
    (action,) = harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")

    refused = _answer(harness, action, "RESTART_CYCLE")
    assert (refused.status, refused.error["code"]) == ("REJECTED", "EQUIPMENT_FAULTED")
    assert harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")[0].status == "OPEN"
    assert harness.job(job).status == "SUSPENDED"

    _clear(harness, "INSP1")  # the clear alone restarts nothing
    assert harness.job(job).status == "SUSPENDED"
    assert _status(harness, "INSP1") == "IDLE"  # the status follows the PLC

    assert _answer(harness, action, "RESTART_CYCLE").status == "HANDLED"
    assert harness.job(job).status == "QUEUED"  # loaded: the next round starts it
    request = harness.act(StartMachine("INSP1"))
    assert request.kwargs["jobs"] == {"1": job}
    assert harness.job(job).status == "PROCESSING"
    harness.succeed(request, type_="MachineStartSucceeded")
    harness.ok("MachineDone", {"machineId": "INSP1", "slotNo": 1, "jobId": job, "pass": True})
    cycles = _cycles(harness, "INSP1")
    # the stopped cycle is void; the one that ran again counts once
    assert [(c.job_ids, c.aborted) for c in cycles] == [([job], True), ([job], False)]


def test_return_to_buffer_unloads_the_piece_to_its_own_slot_to_do_the_step_again(harness):
    _, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC1", 1, buffer_slot=1, start=False)
    harness.on_equipment(jobs[1], "MC1", 2, buffer_slot=2, start=False)
    harness.start("MC1")  # slot 1 runs, slot 2 waits its turn: both were started
    step_before = harness.job(jobs[0]).step_index
    _fault(harness, "MC1")
    (action,) = harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")
    assert action.context["jobIds"] == jobs

    assert _answer(harness, action, "RETURN_TO_BUFFER").status == "HANDLED"  # allowed in fault
    for n, job in enumerate(jobs, start=1):
        assert harness.slot("MC1", n).status == "DONE"
        assert harness.job(job).status == "WAITING_UNLOAD"
        assert harness.succeed(harness.act(Unload(job, "MC1", n))).status == "HANDLED"
        row = harness.job(job)
        assert (row.status, row.position_type, row.temp_slot_no, row.step_index) == (
            "QUEUED", "ON_BUFFER", n, step_before)
        assert "afterFault" not in (row.context or {}) or row.context["afterFault"] is None
    assert [c.aborted for c in _cycles(harness, "MC1")] == [True, True]  # no cycle counted


def test_scrap_takes_every_piece_of_a_stopped_batch_out_and_counts_each_once(harness):
    order, jobs = harness.started_order(quantity=4)
    for n, job in enumerate(jobs, start=1):
        harness.on_equipment(job, "WASH1", n, buffer_slot=n, start=False)
    harness.start("WASH1")
    _fault(harness, "WASH1")
    (action,) = harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")
    assert all(f"job {j} (slot {n})" in action.text for n, j in enumerate(jobs, start=1))
    assert action.facts["stopped"] == [{"jobId": j, "slotNo": n} for n, j in enumerate(jobs, start=1)]

    assert _answer(harness, action, "SCRAP").status == "HANDLED"
    _clear(harness, "WASH1")
    for n, job in enumerate(jobs, start=1):
        assert harness.succeed(harness.act(Unload(job, "WASH1", n))).status == "HANDLED"
        assert harness.job(job).status == "SCRAPPED"
        take_out = harness.hardware.requests[-1]
        assert (take_out.rpc, take_out.kwargs["slot_no"]) == ("buffer_to_dock", n)
    row = harness.order(order)
    assert (row.scrapped_qty, row.completed_qty) == (4, 0)
    assert [c.aborted for c in _cycles(harness, "WASH1")] == [True]


def _start_failed_on_a_fault(harness):
    """MC1's start refused by the PLC, which then reports MC1 in fault → the job and
    the operator's question about it."""
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1, start=False)
    harness.fail(harness.act(StartMachine("MC1")), code="PLC_ERROR", type_="MachineStartFailed")
    _fault(harness, "MC1")
    (question,) = harness.manual_actions("EQUIPMENT_FAULT")
    return job, question


def test_retry_of_a_failed_start_is_refused_while_the_plc_reports_the_fault(harness):
    job, question = _start_failed_on_a_fault(harness)
    refused = _answer(harness, question, "RETRY")
    assert (refused.status, refused.error["code"]) == ("REJECTED", "EQUIPMENT_FAULTED")
    assert _status(harness, "MC1") == "FAULT"  # not IDLE until the next fault edge
    _clear(harness, "MC1")
    assert _answer(harness, question, "RETRY").status == "HANDLED"
    assert (_status(harness, "MC1"), harness.job(job).status) == ("IDLE", "QUEUED")


def test_scrap_of_a_failed_start_keeps_the_machine_faulted_while_the_plc_reports_it(harness):
    job, question = _start_failed_on_a_fault(harness)
    assert _answer(harness, question, "SCRAP").status == "HANDLED"  # needs no machine: taken at once
    assert harness.job(job).status == "SCRAPPED"
    assert _status(harness, "MC1") == "FAULT"  # nothing may be loaded onto it yet
    _clear(harness, "MC1")
    assert _status(harness, "MC1") == "IDLE"


def test_a_fault_after_the_plc_took_the_start_stops_that_cycle_too(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1, start=False)
    request = harness.act(StartMachine("MC1"))
    _fault(harness, "MC1")  # handled before the start's own result: that result decides
    assert harness.manual_actions("MACHINE_FAULT_DURING_CYCLE") == []
    harness.succeed(request, type_="MachineStartSucceeded")
    (action,) = harness.manual_actions("MACHINE_FAULT_DURING_CYCLE")
    assert action.context["jobIds"] == [job]
    assert harness.job(job).status == "SUSPENDED"


def test_nothing_goes_onto_a_machine_in_question(harness, engine, layout):
    from sqlalchemy.orm import Session

    from services.line_controller.scheduler import default_scheduler
    from services.line_controller.scheduler.build_state import build_system_state

    _, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC1", 1, buffer_slot=1)
    harness.on_buffer(jobs[1], 2)
    _fault(harness, "MC1")
    _clear(harness, "MC1")  # IDLE again, but its question is open: MC1's free slot 2 stays free
    with engine.connect() as conn:
        state = build_system_state(Session(bind=conn), layout, datetime.now(UTC))
    assert state.equipment_in_question == {"MC1"}
    plan = default_scheduler().choose(state)
    assert not [a for a in plan if getattr(a, "equipment_id", None) == "MC1"]


def test_an_action_the_plc_never_took_is_put_back_without_a_question(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_buffer(job, 1)
    from tests.line_controller.scripted import Load
    out = harness.fail(harness.act(Load(job, "MC1", 1)), code="NOT_SENT")
    assert out.status == "HANDLED"
    row = harness.job(job)
    assert (row.status, row.position_type, row.temp_slot_no) == ("QUEUED", "ON_BUFFER", 1)
    assert harness.manual_actions() == [] and harness.alarms() == []


def test_an_acknowledged_action_lost_with_the_plc_is_asked_about_at_once(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_buffer(job, 1)
    from tests.line_controller.scripted import Load
    load = harness.act(Load(job, "MC1", 1))
    harness.fail(load, code="OUTCOME_UNKNOWN")
    # the restart question, with ACTION_DONE: the load may have happened
    (question,) = harness.manual_actions(r.TASK_OUTCOME_UNKNOWN)
    assert question.choices == ["CONFIRM", "ACTION_DONE", "PIECE_REMOVED", "SCRAP"]
    assert question.context["taskId"] == load.task_id and harness.job(job).status == "SUSPENDED"
    assert harness.manual_actions("ACTION_FAILED") == []
    harness.ok("ResolveManualAction", {"manualActionId": question.id, "resolution": "ACTION_DONE"})
    row = harness.job(job)
    assert (row.status, row.position_ref_id) == ("QUEUED", "MC1:1")  # loaded, as the cell shows


def test_the_loop_holds_new_work_while_the_plc_is_away_or_the_robot_stopped(harness):
    from tests.line_controller.scripted import Refill
    _, (job,) = harness.started_order(quantity=1)
    harness.ok("PlcConnection", {"connected": False, "error": "connection refused"})
    (alarm,) = harness.alarms("PLC_DISCONNECTED")
    harness.scheduler.queued.append(Refill(job, 1))
    harness.loop.schedule()
    assert harness.hardware.requests == []  # held
    harness.ok("PlcConnection", {"connected": True})
    assert harness.alarms("PLC_DISCONNECTED")[0].status == "CLEARED"
    assert len(harness.hardware.requests) == 1  # the round after the message sent it

    harness.ok("RobotFault", {"fault": 8})
    assert harness.alarms("ROBOT_FAULT")[0].status == "RAISED"
    harness.succeed(harness.hardware.requests[-1])
    harness.scheduler.queued.append(StartMachine("MC1"))
    harness.loop.schedule()
    assert len(harness.hardware.requests) == 1
    harness.ok("RobotFault", {})
    assert harness.alarms("ROBOT_FAULT")[0].status == "CLEARED"
    assert len(harness.hardware.requests) == 2


def test_a_plc_that_comes_back_without_the_cycle_it_was_running_is_put_to_the_operator(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1)
    restarted = {"connected": True, "robot": {"state": "IDLE", "fault": None}, "dock": {"pieces": 0},
                 "equipment": [{"id": "MC1", "running": False, "fault": None,
                                "slots": [{"slotNo": 1, "occupied": True, "running": False, "done": False,
                                           "jobId": None}]}]}
    harness.ok("PlcConnection", {"connected": False, "error": "gone"})
    harness.ok("PlcConnection", {"connected": True, "plcState": restarted})
    (question,) = harness.manual_actions(r.MACHINE_IDLE_BUT_DB_RUNNING)
    assert question.equipment_id == "MC1" and harness.job(job).status == "SUSPENDED"
    harness.ok("PlcConnection", {"connected": True, "plcState": restarted})  # asked once
    assert len(harness.manual_actions(r.MACHINE_IDLE_BUT_DB_RUNNING)) == 1


def test_a_link_or_robot_edge_that_arrives_after_a_later_one_changes_nothing(harness):
    """Each edge is delivered on its own: a "PLC lost" seen before a "PLC back" may
    reach the loop after it. Applied, it would hold a running line behind a
    PLC_DISCONNECTED alarm until the next disconnection."""
    lost, back = ((datetime.now(UTC) + timedelta(seconds=n)).isoformat() for n in (0, 1))
    harness.ok("PlcConnection", {"connected": True, "observedAt": back})
    late = harness.send("PlcConnection", {"connected": False, "error": "gone", "observedAt": lost})
    assert late.status == "STALE" and not harness.loop.plc_away and harness.alarms("PLC_DISCONNECTED") == []
    harness.ok("RobotFault", {"fault": None, "observedAt": back})
    assert harness.send("RobotFault", {"fault": 8, "observedAt": lost}).status == "STALE"
    assert not harness.loop.robot_stopped and harness.alarms("ROBOT_FAULT") == []
    stale = harness.row("SELECT count(*) AS n FROM event_log WHERE type = 'SignalStale'")
    assert stale.n == 2
    # A later edge applies as ever.
    harness.ok("PlcConnection", {"connected": False, "error": "gone",
                                 "observedAt": (datetime.now(UTC) + timedelta(seconds=2)).isoformat()})
    assert harness.loop.plc_away and len(harness.alarms("PLC_DISCONNECTED")) == 1


def test_a_picture_of_the_plc_read_before_a_start_says_nothing_of_that_machine(harness):
    """A new hardware instance's first reading of the PLC and the starts the loop
    sends it are not ordered: the loop may have started MC1 by the time the
    reading (taken before) reaches it. MC1 then only looks idle; asking about it
    would hold its pieces until someone answers (a clean hardware restart once
    stalled an order so). The same picture read after the start is a finding."""
    _, (job,) = harness.started_order(quantity=1)
    before_the_start = datetime.now(UTC).isoformat()
    harness.on_equipment(job, "MC1", 1, buffer_slot=1)
    idle = {"connected": True, "robot": {"state": "IDLE", "fault": None}, "dock": {"pieces": 0},
            "buffer": [{"slotNo": n, "occupied": False} for n in range(1, 9)],
            "equipment": [{"id": "MC1", "running": False, "fault": None,
                           "slots": [{"slotNo": 1, "occupied": True, "running": False, "done": False,
                                      "jobId": None}]}]}
    harness.ok("PlcConnection", {"connected": True, "plcState": {**idle, "observedAt": before_the_start}})
    assert harness.manual_actions() == []
    assert harness.job(job).status == "PROCESSING"
    # read a moment after the start was committed, before the send reached the PLC
    # (commit, send and the hardware's queue take that long on a loaded machine)
    harness.ok("PlcConnection", {"connected": True, "plcState": {
        **idle, "observedAt": (datetime.now(UTC) + timedelta(seconds=0.3)).isoformat()}})
    assert harness.manual_actions() == []
    # read well after the start had reached the PLC: a finding
    harness.ok("PlcConnection", {"connected": True, "plcState": {
        **idle, "observedAt": (datetime.now(UTC) + timedelta(seconds=2)).isoformat()}})
    (question,) = harness.manual_actions(r.MACHINE_IDLE_BUT_DB_RUNNING)
    assert question.equipment_id == "MC1" and harness.job(job).status == "SUSPENDED"


def test_a_cycle_that_never_ends_is_asked_about_and_aborted_before_the_answer_applies(harness):
    harness.loop.cycle_overdue_factor = 0.001  # INSP1's 4 s cycle is overdue after 4 ms
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)
    harness.ok("ScheduleTick")
    (alarm,) = harness.alarms("CYCLE_OVERDUE")
    (action,) = harness.manual_actions("CYCLE_OVERDUE")
    assert (action.equipment_id, action.choices, action.alarm_id) == (
        "INSP1", ["RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"], alarm.id)
    assert harness.job(job).status == "SUSPENDED"
    assert action.facts["stopped"] == [{"jobId": job, "slotNo": 1}]
    assert (alarm.facts["equipmentId"], alarm.facts["cycleSeconds"]) == ("INSP1", 4)
    harness.ok("ScheduleTick")  # asked once
    assert len(harness.manual_actions("CYCLE_OVERDUE")) == 1

    assert _answer(harness, action, "RETURN_TO_BUFFER").status == "HANDLED"
    abort = harness.hardware.requests[-1]
    assert (abort.rpc, abort.kwargs) == ("abort_cycle", {"equipment_id": "INSP1"})
    assert harness.job(job).status == "SUSPENDED"  # nothing applies before the PLC has aborted it
    harness.succeed(abort, type_="MachineAbortSucceeded")
    assert (harness.slot("INSP1", 1).status, harness.job(job).status) == ("DONE", "WAITING_UNLOAD")
    assert harness.alarms("CYCLE_OVERDUE")[0].status == "CLEARED"


def test_an_abort_that_fails_asks_again(harness):
    harness.loop.cycle_overdue_factor = 0.001
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)
    harness.ok("ScheduleTick")
    (action,) = harness.manual_actions("CYCLE_OVERDUE")
    _answer(harness, action, "SCRAP")
    harness.fail(harness.hardware.requests[-1], code="NOT_SENT", type_="MachineAbortFailed")
    again = [a for a in harness.manual_actions("CYCLE_OVERDUE") if a.status == "OPEN"]
    assert len(again) == 1 and again[0].context["jobIds"] == [job]
    assert (again[0].facts["case"], again[0].facts["errorCode"]) == ("ABORT_FAILED", "NOT_SENT")
    assert harness.job(job).status == "SUSPENDED"


def test_a_start_that_fails_after_its_machine_reported_the_fault_still_asks(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1, start=False)
    request = harness.act(StartMachine("MC1"))
    _fault(harness, "MC1", fault=8)  # an emergency stop: the fault edge first
    assert harness.fail(request, code="PLC_ERROR", type_="MachineStartFailed").status == "HANDLED"
    (question,) = harness.manual_actions("EQUIPMENT_FAULT")
    assert question.context["jobIds"] == [job] and harness.job(job).status == "SUSPENDED"
