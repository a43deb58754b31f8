"""Start-up recovery on real PostgreSQL: an inconsistent state is crafted (a
crash between a hardware request and its result, a hand-edited or restored
database, a PLC that disagrees), then a new loop starts on it, as after a
restart. Every finding holds its jobs and waits for an operator; the answer
goes through the loop and leaves a consistent state."""

import inspect

import pytest
from sqlalchemy import text

from services.line_controller import consistency_checks as r
from services.line_controller.loop import EventLoop

from .conftest import Harness

try:  # the scripted actions of the wired scheduler
    from tests.line_controller.scripted import Load, Refill
except ImportError:
    from services.line_controller.scheduler import Load, Refill


def loaded(harness, job_id, equipment_id, slot_no, buffer_slot):
    """The piece on the machine, its cycle not started (the machine idle in the DB)."""
    if "start" in inspect.signature(harness.on_equipment).parameters:
        harness.on_equipment(job_id, equipment_id, slot_no, buffer_slot, start=False)
    else:
        harness.on_equipment(job_id, equipment_id, slot_no, buffer_slot)


def plc(running=(), done=(), occupied=None):
    """A PLC snapshot: every machine idle except ``running``; ``done``: (machine, slot).
    ``occupied``: the (machine, slot) pairs whose OCCUPIED shows a piece; None: a
    picture without the slots' sensors (not compared, as a picture without the buffer)."""
    def slot(e, n):
        sensor = {} if occupied is None else {"occupied": (e, n) in occupied}
        return {"slotNo": n, **sensor, "running": False, "done": (e, n) in done}
    return {"connected": True, "robot": {"state": "IDLE"}, "equipment": [
        {"id": e, "running": e in running, "fault": False, "slots": [slot(e, n) for n in (1, 2, 3, 4)]}
        for e in ("MC1", "MC2", "WASH1", "INSP1")]}


class Restarted(Harness):
    """A new loop on the same database, as the line_controller after a restart."""

    def __init__(self, engine, layout, plc_state):
        super().__init__(engine, layout)
        self.planned = 0
        name = "choose" if hasattr(self.scheduler, "choose") else "plan"
        inner = getattr(self.scheduler, name)

        def counting(arg):
            self.planned += 1
            return inner(arg)
        setattr(self.scheduler, name, counting)
        self.loop.start(consume=False, recover=True, plc_state=plc_state)

    def recover(self):
        assert self.loop.recovering
        out = self.next()
        assert out.status == "HANDLED", out
        assert not self.loop.recovering
        return out.result

    def action(self, kind):
        (action,) = [a for a in self.manual_actions(kind) if a.status == "OPEN"]
        return action

    def resolve(self, action, resolution):
        return self.send("ResolveManualAction", {"manualActionId": action.id, "resolution": resolution})


@pytest.fixture
def restart(engine, layout):
    loops = []

    def start(plc_state=lambda: plc()):
        h = Restarted(engine, layout, plc_state)
        loops.append(h)
        return h
    yield start
    for h in loops:
        h.loop.stop()


def sql(engine, statement, **params):
    with engine.begin() as conn:
        conn.execute(text(statement), params)


def test_a_consistent_state_resumes_by_itself(harness, restart):
    oid, jobs = harness.started_order(quantity=2)
    harness.on_buffer(jobs[0], 1)
    h = restart()
    assert h.planned == 0 and h.loop.status()["recovering"] is True
    h.loop.schedule()
    assert h.planned == 0, "no scheduling round before the recovery check"
    assert h.recover() == {"inconsistencies": 0, "manualActionIds": []}
    assert h.planned == 1  # the round after the check
    assert h.manual_actions() == [] and h.alarms() == []
    assert [h.job(j).status for j in jobs] == ["QUEUED", "PENDING"]
    (checked,) = h.rows("SELECT payload FROM event_log WHERE type = 'RecoveryChecked'")
    assert checked.payload["plcConnected"] is True


def test_a_task_in_flight_is_closed_and_confirm_puts_the_piece_back(harness, restart):
    oid, jobs = harness.started_order(quantity=2)
    req = harness.act(Refill(jobs[0], 1))  # then the process dies: no result recorded
    h = restart()
    result = h.recover()
    assert result["inconsistencies"] == 1
    task = h.row("SELECT * FROM task WHERE id = :id", id=req.task_id)
    assert (task.status, task.error_code) == ("FAILED", "RECOVERY_OUTCOME_UNKNOWN")
    job = h.job(jobs[0])
    assert (job.status, job.held_status) == ("SUSPENDED", "MOVING")
    action = h.action(r.TASK_OUTCOME_UNKNOWN)
    assert action.choices == list(r.CHOICES[r.TASK_OUTCOME_UNKNOWN])
    assert action.context["jobIds"] == [jobs[0]] and "ACTION_DONE" in action.text
    (alarm,) = h.alarms(r.TASK_OUTCOME_UNKNOWN)
    assert alarm.task_id == req.task_id and action.alarm_id == alarm.id
    facts = {"taskId": req.task_id, "taskKind": "DOCK_TO_BUFFER", "jobId": jobs[0], "equipmentId": None}
    assert action.facts == {**facts, "jobIds": [jobs[0]]} and alarm.facts == facts

    late = h.succeed(req)  # the hardware's answer arrives after all: it is stale
    assert late.status == "STALE" and h.job(jobs[0]).status == "SUSPENDED"

    again = restart()  # a second restart does not open the same question twice
    assert again.recover()["manualActionIds"] == []

    assert again.ok("ConfirmRecovery", {}) == {"confirmed": [action.id]}
    job = again.job(jobs[0])
    assert (job.status, job.position_type, job.temp_slot_no, job.held_status) == \
        ("PENDING", "ON_DOCK", None, None)
    assert again.alarms(r.TASK_OUTCOME_UNKNOWN)[0].status == "CLEARED"


def test_a_task_the_hardware_still_holds_or_answered_is_no_question(harness, restart):
    oid, jobs = harness.started_order(quantity=3)
    held, answered, lost = (harness.act(Refill(j, n)) for j, n in zip(jobs, (1, 2, 3), strict=True))
    # The controller dies; the hardware, still running, holds the first and has
    # answered the second (its result waits in the queue); the third it never got.
    known = {"open": [str(held.task_id)], "answered": [str(answered.task_id)]}
    h = restart(lambda: {**plc(), "knownActions": known})

    result = h.recover()

    assert result["inconsistencies"] == 1
    (action,) = [a for a in h.manual_actions(r.TASK_OUTCOME_UNKNOWN) if a.status == "OPEN"]
    assert action.context["taskId"] == lost.task_id
    for req, job_id in ((held, jobs[0]), (answered, jobs[1])):
        assert h.row("SELECT status FROM task WHERE id = :id", id=req.task_id).status == "RUNNING"
        assert h.job(job_id).status == "MOVING"
        assert h.succeed(req).status == "HANDLED"  # its result concludes it as usual
        assert (h.job(job_id).status, h.job(job_id).position_type) == ("QUEUED", "ON_BUFFER")


def test_action_done_applies_the_unreported_success(harness, restart):
    oid, jobs = harness.started_order(quantity=2)
    harness.on_buffer(jobs[0], 1)
    harness.on_buffer(jobs[1], 2)
    assert harness.succeed(harness.act(Load(jobs[0], "MC1", 1))).status == "HANDLED"  # reported
    req = harness.act(Load(jobs[1], "MC1", 2))  # then the process dies
    h = restart()
    h.recover()
    action = h.action(r.TASK_OUTCOME_UNKNOWN)
    assert h.resolve(action, "NOT_A_CHOICE").error["code"] == "VALIDATION_ERROR"
    assert h.resolve(action, "ACTION_DONE").status == "HANDLED"
    reported, recovered = h.job(jobs[0]), h.job(jobs[1])
    assert (recovered.position_type, recovered.position_ref_id, recovered.temp_slot_no) == \
        ("ON_EQUIPMENT", "MC1:2", 2)
    assert (recovered.status, recovered.held_status, recovered.step_index) == \
        (reported.status, reported.held_status, reported.step_index)
    slot = h.slot("MC1", 2)
    assert (slot.status, slot.current_job_id) == ("OCCUPIED", jobs[1])
    assert h.row("SELECT status FROM task WHERE id = :id", id=req.task_id).status == "FAILED"


def test_scrap_counts_the_piece_exactly_once(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    loaded(harness, jobs[0], "MC1", 1, 1)
    sql(harness.engine, "UPDATE equipment_slot SET status = 'EMPTY', current_job_id = NULL "
                        "WHERE equipment_id = 'MC1' AND slot_no = 1")
    h = restart()
    h.recover()
    action = h.action(r.SLOT_MISMATCH)
    assert action.job_id == jobs[0] and h.job(jobs[0]).status == "SUSPENDED"
    assert h.resolve(action, "SCRAP").status == "HANDLED"
    assert h.resolve(action, "SCRAP").error["code"] == "INVALID_TRANSITION"
    order = h.order(oid)
    assert (order.completed_qty, order.scrapped_qty, order.status) == (0, 1, "COMPLETED")
    job = h.job(jobs[0])
    assert (job.status, job.temp_slot_no, job.position_type) == ("SCRAPPED", None, "OUT")


def test_slot_mismatch_confirm_makes_the_slot_follow_the_job(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    loaded(harness, jobs[0], "MC2", 2, 3)
    was = harness.job(jobs[0]).status
    sql(harness.engine, "UPDATE equipment_slot SET status = 'EMPTY', current_job_id = NULL "
                        "WHERE equipment_id = 'MC2' AND slot_no = 2")
    h = restart()
    h.recover()
    assert h.ok("ConfirmRecovery", {})["confirmed"] == [h.manual_actions(r.SLOT_MISMATCH)[0].id]
    slot = h.slot("MC2", 2)
    assert (slot.status, slot.current_job_id) == ("OCCUPIED", jobs[0])
    assert h.job(jobs[0]).status == was
    assert restart().recover()["inconsistencies"] == 0


def test_a_slot_holding_a_job_recorded_elsewhere(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    harness.on_buffer(jobs[0], 2)
    sql(harness.engine, "UPDATE equipment_slot SET status = 'OCCUPIED', current_job_id = :j "
                        "WHERE equipment_id = 'MC1' AND slot_no = 2", j=jobs[0])
    h = restart()
    h.recover()
    action = h.action(r.SLOT_MISMATCH)
    assert action.context["slotNo"] == 2
    assert h.resolve(action, "PIECE_ON_MACHINE").status == "HANDLED"
    job = h.job(jobs[0])
    assert (job.status, job.position_type, job.position_ref_id, job.temp_slot_no) == \
        ("PROCESSING", "ON_EQUIPMENT", "MC1:2", 2)
    assert restart().recover()["inconsistencies"] == 0


def test_two_jobs_in_one_buffer_slot_and_one_out_of_range(harness, restart):
    oid, jobs = harness.started_order(quantity=3)
    harness.on_buffer(jobs[0], 1)
    harness.on_buffer(jobs[1], 2)
    harness.on_buffer(jobs[2], 3)
    sql(harness.engine, "UPDATE job SET temp_slot_no = 1, position_ref_id = '1' WHERE id = :j", j=jobs[1])
    sql(harness.engine, "UPDATE job SET temp_slot_no = 99, position_ref_id = '99' WHERE id = :j", j=jobs[2])
    h = restart()
    assert h.recover()["inconsistencies"] == 2
    dup = h.action(r.DUPLICATE_BUFFER_SLOT)
    assert dup.context["jobIds"] == [jobs[0], jobs[1]]
    assert {h.job(j).status for j in jobs} == {"SUSPENDED"}
    # One piece was taken out by hand: scrap it; the other keeps slot 1.
    out_of_range = h.action(r.BUFFER_SLOT_OUT_OF_RANGE)
    assert h.resolve(out_of_range, "PIECE_REMOVED").status == "HANDLED"
    sql(h.engine, "UPDATE job SET temp_slot_no = 2, position_ref_id = '2' WHERE id = :j", j=jobs[1])
    assert h.ok("ConfirmRecovery", {"manualActionIds": [dup.id]})["confirmed"] == [dup.id]
    assert [h.job(j).status for j in jobs] == ["QUEUED", "QUEUED", "SCRAPPED"]
    assert h.order(oid).scrapped_qty == 1


def test_db_says_running_but_the_plc_is_idle(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    sql(harness.engine, "UPDATE equipment SET status = 'RUNNING' WHERE id = 'MC1'")
    h = restart(lambda: plc())
    h.recover()
    action = h.action(r.MACHINE_IDLE_BUT_DB_RUNNING)
    assert (action.equipment_id, h.job(jobs[0]).held_status) == ("MC1", "PROCESSING")
    assert h.resolve(action, "CYCLE_DONE").status == "HANDLED"
    assert h.job(jobs[0]).status == "WAITING_UNLOAD"
    assert h.slot("MC1", 1).status == "DONE"
    assert h.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"


def test_confirm_on_an_idle_machine_starts_the_cycle_again(harness, restart, layout):
    from services.line_controller.scheduler import default_scheduler

    oid, jobs = harness.started_order(quantity=1)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    h = restart(lambda: plc())
    h.recover()
    action = h.action(r.MACHINE_IDLE_BUT_DB_RUNNING)
    assert h.resolve(action, "CONFIRM").status == "HANDLED"
    job = h.job(jobs[0])
    assert (job.status, job.position_type, job.position_ref_id) == ("QUEUED", "ON_EQUIPMENT", "MC1:1")
    assert h.slot("MC1", 1).status == "OCCUPIED"
    h.loop.scheduler = default_scheduler()
    h.loop.schedule()
    (start,) = [q for q in h.hardware.requests if q.rpc == "start_machine"]
    assert start.kwargs["equipment_id"] == "MC1" and h.job(jobs[0]).status == "PROCESSING"


def test_confirm_after_the_machine_reported_the_cycle_done_keeps_the_piece_done(harness, restart):
    """A start on its way when the PLC restarted ran after the check: the machine
    finished the piece before the operator answered. CONFIRM ("not finished: run it
    again") re-runs only cycles still unfinished; this piece waits for its unload
    (queued on a DONE slot, nothing would ever start or unload it)."""
    oid, jobs = harness.started_order(quantity=1)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    h = restart(lambda: plc())
    h.recover()
    action = h.action(r.MACHINE_IDLE_BUT_DB_RUNNING)
    h.ok("MachineDone", {"machineId": "MC1", "slotNo": 1, "jobId": jobs[0]})
    assert (h.job(jobs[0]).status, h.job(jobs[0]).held_status) == ("SUSPENDED", "WAITING_UNLOAD")
    assert h.resolve(action, "CONFIRM").status == "HANDLED"
    assert h.job(jobs[0]).status == "WAITING_UNLOAD"
    assert h.slot("MC1", 1).status == "DONE"


def test_a_done_machine_is_consistent_and_a_loaded_unstarted_batch_too(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    loaded(harness, jobs[0], "MC1", 1, 1)  # loaded, not started: the PLC is idle
    assert restart(lambda: plc()).recover()["inconsistencies"] == 0
    sql(harness.engine, "UPDATE equipment SET status = 'RUNNING' WHERE id = 'MC1'")
    assert restart(lambda: plc(done=[("MC1", 1)])).recover()["inconsistencies"] == 0


def test_plc_running_but_db_idle_holds_the_machine(harness, restart):
    h = restart(lambda: plc(running=["MC2"]))
    h.recover()
    action = h.action(r.MACHINE_RUNNING_BUT_DB_IDLE)
    assert action.choices == ["CONFIRM"]
    assert h.row("SELECT status FROM equipment WHERE id = 'MC2'").status == "FAULT"
    h.ok("ConfirmRecovery", {})
    assert h.row("SELECT status FROM equipment WHERE id = 'MC2'").status == "IDLE"


def test_unreadable_plc_holds_pieces_in_process(harness, restart):
    oid, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    harness.on_buffer(jobs[1], 2)

    def no_hardware():
        raise TimeoutError("no hardware service")
    h = restart(no_hardware)
    h.recover()
    action = h.action(r.PLC_UNREACHABLE)
    assert action.context["jobIds"] == [jobs[0]]
    assert [h.job(j).status for j in jobs] == ["SUSPENDED", "QUEUED"]
    h.ok("ConfirmRecovery", {})
    assert h.job(jobs[0]).status == "PROCESSING"


def test_a_job_named_by_two_findings_waits_for_both(harness, restart):
    oid, jobs = harness.started_order(quantity=1)
    harness.on_buffer(jobs[0], 1)
    harness.act(Load(jobs[0], "MC1", 1))
    sql(harness.engine, "UPDATE job SET temp_slot_no = 77 WHERE id = :j", j=jobs[0])
    h = restart()
    assert h.recover()["inconsistencies"] == 2
    task_action = h.action(r.TASK_OUTCOME_UNKNOWN)
    h.ok("ConfirmRecovery", {"manualActionIds": [task_action.id]})
    job = h.job(jobs[0])
    assert (job.status, job.held_status, job.position_type) == ("SUSPENDED", "QUEUED", "ON_BUFFER")
    h.ok("ConfirmRecovery", {})
    assert h.job(jobs[0]).status == "QUEUED"


def test_recovery_runs_before_the_backlog(engine, layout, harness):
    """Commands persisted before a crash still run, after the check."""
    from services.line_controller.messages import new_message
    harness.loop.persist(new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, actor="op1"))
    loop = EventLoop(engine, layout)
    loop.start(consume=False, recover=True, plc_state=None)
    try:
        assert loop.handle_next(block=False).result["inconsistencies"] == 0
        assert loop.handle_next(block=False).result["status"] == "CREATED"
    finally:
        loop.stop()


def test_recovery_waits_for_a_plc_that_answers_a_little_later(engine, layout, harness):
    """The hardware service starts with the line_controller: with pieces in process
    the check asks again rather than calling the PLC unreachable at once."""
    from tests.support.waiting import wait_for
    oid, jobs = harness.started_order(quantity=1)
    harness.on_equipment(jobs[0], "MC1", 1, 1)  # processing
    answers = iter([None, None, plc(running=["MC1"])])
    loop = EventLoop(engine, layout)
    loop.start(consume=False, recover=True, plc_state=lambda: next(answers), plc_wait=20)
    try:
        assert loop.recovering and loop.inbox.qsize() == 0
        wait_for(lambda: loop.inbox.qsize() == 1, 20, 0.05, "the recovery check")
        out = loop.handle_next(block=False)
        assert out.result["inconsistencies"] == 0 and not loop.recovering
    finally:
        loop.stop()


def test_a_hardware_restart_puts_only_its_lost_actions_before_an_operator(harness):
    """HardwareStarted → a RecoveryCheck limited to the actions the previous
    hardware instance had accepted (started before the new one started)."""
    from datetime import UTC, datetime

    oid, jobs = harness.started_order(quantity=2)
    lost = harness.act(Refill(jobs[0], 1))  # accepted by the instance that then died
    restarted_at = harness.row("SELECT clock_timestamp() AS at").at.astimezone(UTC).isoformat()
    kept = harness.act(Refill(jobs[1], 2))  # sent to the new instance: it will report
    out = harness.send("RecoveryCheck", {"plcState": None, "hardwareStartedAt": restarted_at})
    assert out.status == "HANDLED" and out.result["inconsistencies"] == 1
    assert harness.row("SELECT status, error_code FROM task WHERE id = :id", id=lost.task_id) == \
        ("FAILED", "RECOVERY_OUTCOME_UNKNOWN")
    assert harness.row("SELECT status FROM task WHERE id = :id", id=kept.task_id).status == "RUNNING"
    assert harness.job(jobs[0]).status == "SUSPENDED"
    assert harness.job(jobs[1]).status == "MOVING"
    # No PLC comparison mid-run: a machine check would race the loop's own updates.
    assert [a.kind for a in harness.manual_actions() if a.status == "OPEN"] == [r.TASK_OUTCOME_UNKNOWN]
    assert datetime.fromisoformat(restarted_at)  # the payload's format is ISO-8601


def test_a_request_still_being_sent_when_the_database_returns_is_no_question(harness):
    """A failover met a refill's request on its way to the hardware (the port asks
    again): the check after the outage reads the hardware only once the request is
    accepted, so the refill is held by the hardware, not an unknown outcome."""
    from tests.support.waiting import wait_for

    oid, jobs = harness.started_order(quantity=1)
    refill = harness.act(Refill(jobs[0], 1))
    task = str(refill.task_id)
    hardware = {"sending": {task}, "known": {"open": [], "answered": []}}
    harness.hardware.sending = lambda: set(hardware["sending"])
    harness.loop._plc_state = lambda: {**plc(), "knownActions": hardware["known"]}
    harness.loop.uow.database_was_away = True  # as a message that met the failover leaves it

    harness.ok("ScheduleTick")
    assert harness.loop.recovering and harness.loop.inbox.qsize() == 0  # not read yet
    hardware["known"], hardware["sending"] = {"open": [task], "answered": []}, set()  # accepted
    wait_for(lambda: harness.loop.inbox.qsize() == 1, 10, 0.01, "the recovery check")
    assert harness.loop.inbox.queue[0].payload["tasksUpTo"] == refill.task_id  # the last task there was
    out = harness.next()

    assert out.result["inconsistencies"] == 0 and not harness.loop.recovering
    assert harness.manual_actions(r.TASK_OUTCOME_UNKNOWN) == []
    assert harness.row("SELECT status FROM task WHERE id = :id", id=refill.task_id).status == "RUNNING"
    assert harness.succeed(refill).status == "HANDLED"  # its result concludes it as usual


def test_a_task_started_after_the_hardware_was_read_is_no_question(harness):
    """Messages queued ahead of the check after an outage start tasks of their own
    (a result whose piece is then taken out): the hardware was read before them,
    so only the tasks up to the check's ``tasksUpTo`` are in question."""
    oid, jobs = harness.started_order(quantity=2)
    held = harness.act(Refill(jobs[0], 1))
    later = harness.act(Refill(jobs[1], 2))  # started after the read below
    known = {"open": [str(held.task_id)], "answered": []}

    out = harness.send("RecoveryCheck", {"plcState": {**plc(), "knownActions": known}, "tasksUpTo": held.task_id})

    assert out.status == "HANDLED" and out.result["inconsistencies"] == 0, out
    assert harness.manual_actions(r.TASK_OUTCOME_UNKNOWN) == []
    assert harness.row("SELECT status FROM task WHERE id = :id", id=later.task_id).status == "RUNNING"
