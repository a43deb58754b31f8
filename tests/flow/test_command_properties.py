"""Property test: random operator commands (pause / resume / cancel / suspend /
resume job / rework) interleaved with a running order never break the line's
invariants, and once every hold is lifted the order still ends exactly.

It runs the real event loop, scheduler and PostgreSQL, with an in-process
hardware that answers every request at once (results and machine signals
go through the loop's inbox like the real ones). Not the simulator: a
cancelled order's pieces stay on the simulated buffer until an operator takes
them out, which the simulator cannot do, so a later order would collide
with them; and hypothesis needs many fast examples."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from services.line_controller.scheduler import default_scheduler
from shared import events as ev
from tests.flow.invariants import TERMINAL, replay


class InstantHardware:
    """Accepts every request and answers it through the loop's inbox: one
    result per action; a machine start is followed by one MachineDone per
    slot (an inspection's carries the verdict: every third job fails)."""

    def __init__(self):
        self.loop = None

    def sending(self):
        return set()  # every request is answered at once

    def _put(self, type_, payload, correlation_id=None):
        self.loop._enqueue(new_message(type_, payload, correlation_id=correlation_id, actor="hw"))

    def request(self, req):
        cid = str(req.task_id)
        if req.rpc == "start_machine":
            self._put(ev.MACHINE_START_SUCCEEDED, {"correlationId": cid, "data": {}}, cid)
            inspection = req.kwargs["equipment_id"].startswith("INSP")
            for slot_no, job_id in req.kwargs["jobs"].items():
                payload = {"machineId": req.kwargs["equipment_id"], "slotNo": int(slot_no), "jobId": job_id}
                if inspection:
                    payload["pass"] = job_id % 3 != 0
                self._put(ev.MACHINE_DONE, payload)
            return
        result = ev.TOOL_ACTION_SUCCEEDED if req.rpc in ("scan", "mark") else ev.ROBOT_ACTION_SUCCEEDED
        data = {"code": f"SN{cid}"} if req.rpc == "scan" else {}
        self._put(result, {"correlationId": cid, "data": data}, cid)


COMMANDS = ("PauseOrder", "ResumeOrder", "CancelOrder", "SuspendJob", "ResumeJob", "ReworkJob")
steps = st.lists(st.tuples(st.integers(0, 30),                      # messages handled before it
                           st.sampled_from(COMMANDS),
                           st.integers(0, 4),                       # which piece
                           st.integers(0, 4)),                      # rework target step
                 max_size=8)


def _drain(loop, limit):
    for _ in range(limit):
        if loop.handle_next(block=False) is None:
            return


def _scalar(engine, sql, **params):
    with engine.connect() as c:
        return c.execute(text(sql), params).scalar()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=steps)
def test_random_commands_keep_the_invariants(engine, plan):
    from shared.config import load_settings
    from shared.layout import load_layout
    hardware = InstantHardware()
    loop = EventLoop(engine, load_layout(load_settings({}).line_file), scheduler=default_scheduler(),
                     hardware=hardware)
    hardware.loop = loop
    loop.start(consume=False)
    # The examples share the database: each replays its own events (the line clear before them).
    seq_before = _scalar(engine, "SELECT coalesce(max(seq), 0) FROM event_log")
    quantity = 5
    order = loop.handle(new_message("CreateOrder", {"productId": "BRACKET-A", "quantity": quantity},
                                    actor="op")).result
    loop.handle(new_message("StartOrder", {"workOrderId": order["id"]}, actor="op"))
    with engine.connect() as c:
        jobs = [r.id for r in c.execute(text("SELECT id FROM job WHERE work_order_id = :o ORDER BY seq_no"),
                                        {"o": order["id"]})]
    for before, command, piece, step in plan:
        _drain(loop, before)
        payload = {"workOrderId": order["id"]} if command.endswith("Order") else {"jobId": jobs[piece]}
        if command == "ReworkJob":
            payload["stepIndex"] = step
        outcome = loop.handle(new_message(command, payload, actor="op"))
        assert outcome.status in ("HANDLED", "REJECTED"), outcome
    # Lift every hold; the order must then run to its end by itself.
    if _scalar(engine, "SELECT status FROM work_order WHERE id = :o", o=order["id"]) == "PAUSED":
        assert loop.handle(new_message("ResumeOrder", {"workOrderId": order["id"]}, actor="op")).status == "HANDLED"
    for job_id in jobs:
        if _scalar(engine, "SELECT status FROM job WHERE id = :j", j=job_id) == "SUSPENDED":
            assert loop.handle(new_message("ResumeJob", {"jobId": job_id}, actor="op")).status == "HANDLED"
    _drain(loop, 2000)
    with engine.connect() as c:  # the operator takes cancelled pieces off the machines
        removals = [r.id for r in c.execute(text(
            "SELECT id FROM manual_action WHERE kind = 'REMOVE_CANCELLED_PIECES' AND status = 'OPEN'"))]
    for action_id in removals:
        assert loop.handle(new_message("ResolveManualAction", {"manualActionId": action_id, "resolution": "DONE"},
                                       actor="op")).status == "HANDLED"
    _drain(loop, 100)
    loop.stop()

    status = _scalar(engine, "SELECT status FROM work_order WHERE id = :o", o=order["id"])
    assert status in ("COMPLETED", "CANCELLED")
    with engine.connect() as c:
        wo = c.execute(text("SELECT * FROM work_order WHERE id = :o"), {"o": order["id"]}).first()
        live = c.execute(text("SELECT count(*) FROM job WHERE work_order_id = :o AND NOT status = ANY(:t)"),
                         {"o": order["id"], "t": list(TERMINAL)}).scalar()
        held_slots = c.execute(text("SELECT count(*) FROM equipment_slot WHERE status <> 'EMPTY'")).scalar()
        open_tasks = c.execute(text("SELECT count(*) FROM task WHERE status IN ('PENDING','RUNNING')")).scalar()
    if status == "COMPLETED":
        assert wo.completed_qty + wo.scrapped_qty == quantity
    assert (live, held_slots, open_tasks) == (0, 0, 0)
    replay(engine, after=seq_before)
