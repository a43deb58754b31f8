"""An action whose outcome a restart made unknown is sent again, not asked about,
where repeating it is harmless (issue 37, docs/state-machines.md "Actions safe to
repeat"): a SCAN with its piece in place. A MARK is asked about (a second mark
damages the piece), and so is a SCAN whose piece the PLC's sensor does not show."""

from __future__ import annotations

from services.line_controller import consistency_checks as r
from services.line_controller.handlers.recovery import REPEATED
from services.line_controller.scheduler import default_scheduler
from shared import events as ev
from tests.line_controller.scripted import Mark, Scan
from tests.line_controller.test_recovery import plc, restart  # noqa: F401 (fixture)


def on_the_buffer(harness, quantity):
    """A started BRACKET-A order (its first step a scan), its pieces on slots 1.."""
    _oid, jobs = harness.started_order("BRACKET-A", quantity)
    for slot, job_id in enumerate(jobs, start=1):
        harness.on_buffer(job_id, slot)
    return jobs


def sent_again(h, job_id):
    """The real scheduler's next round scans the piece again."""
    h.loop.scheduler = default_scheduler()
    before = len(h.hardware.requests)
    h.loop.schedule()
    return [q.kwargs for q in h.hardware.requests[before:] if q.rpc == "scan"] == [
        {"slot_no": h.job(job_id).temp_slot_no, "job_id": job_id}]


def task(h, req):
    return h.row("SELECT status, error_code FROM task WHERE id = :id", id=req.task_id)


def test_a_restart_during_a_scan_sends_it_again_if_the_piece_is_in_place(harness, restart):  # noqa: F811
    jobs = on_the_buffer(harness, 3)
    in_place, gone, marking = harness.act(Scan(jobs[0])), harness.act(Scan(jobs[1])), harness.act(Mark(jobs[2]))
    sensors = [{"slotNo": n, "occupied": n in (1, 3)} for n in range(1, 9)]  # slot 2's piece is not seen
    h = restart(lambda: {**plc(), "buffer": sensors})

    assert h.recover()["inconsistencies"] == 2
    assert tuple(task(h, in_place)) == ("FAILED", REPEATED)
    job = h.job(jobs[0])
    assert (job.status, job.position_type, job.temp_slot_no, job.held_status) == ("QUEUED", "ON_BUFFER", 1, None)
    (repeated,) = h.rows("SELECT payload FROM event_log WHERE type = 'ActionRepeated'")
    assert repeated.payload == {"taskId": in_place.task_id, "kind": ev.SCAN, "jobIds": [jobs[0]]}
    asked = {a.context["taskId"]: a for a in h.manual_actions(r.TASK_OUTCOME_UNKNOWN)}
    assert sorted(asked) == [gone.task_id, marking.task_id]  # no buffer question besides
    assert [h.job(j).status for j in jobs[1:]] == ["SUSPENDED", "SUSPENDED"]
    assert sent_again(h, jobs[0])


def test_a_scan_the_plc_forgot_in_its_restart_is_sent_again_and_a_mark_is_asked_about(harness):
    jobs = on_the_buffer(harness, 2)
    scan = harness.act(Scan(jobs[0]))
    assert harness.fail(scan, ev.OUTCOME_UNKNOWN, type_=ev.TOOL_ACTION_FAILED).status == "HANDLED"
    assert tuple(task(harness, scan)) == ("FAILED", REPEATED)
    assert harness.manual_actions() == [] and harness.alarms() == []
    assert harness.job(jobs[0]).status == "QUEUED"

    mark = harness.act(Mark(jobs[1]))
    assert harness.fail(mark, ev.OUTCOME_UNKNOWN, type_=ev.TOOL_ACTION_FAILED).status == "HANDLED"
    (action,) = harness.manual_actions()
    assert (action.kind, action.context["taskId"]) == (r.TASK_OUTCOME_UNKNOWN, mark.task_id)
    assert harness.job(jobs[1]).status == "SUSPENDED"
    assert sent_again(harness, jobs[0])
