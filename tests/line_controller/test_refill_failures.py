"""A refill that fails is refilled once the operator has answered, and the order
completes exactly: the dock's count never stays below the pieces the PLC holds
(docs/scheduler.md, "the count may be high, never low"; issue 41).

The real loop, scheduler and PostgreSQL, with an in-process hardware that keeps
the dock as a PLC does: a refill takes one piece, a pallet of 4 comes only once
the dock is empty, and an injected robot failure (a gripper fault, an e-stop)
moves nothing. A pallet of 4 for more than 4 pieces is what made a lost piece
fatal: the loop waited for a pallet the PLC had no reason to bring. Both field
protocols are proven end to end by tests/flow/test_refill_failures.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from services.line_controller.scheduler import default_scheduler
from shared import events as ev
from tests.flow.invariants import replay
from tests.flow.test_command_properties import InstantHardware
from tests.line_controller.scripted import Refill
from tests.line_controller.test_recovery import plc

HANG = "HANG"  # the robot never answers: the step times out
ESTOP = "ESTOP"  # an emergency stop lands on the refill (PLC error 8), then is cleared
PALLET = 4


def _now() -> str:
    return datetime.now(UTC).isoformat()


class DockPlc(InstantHardware):
    """InstantHardware with the PLC's dock (``pieces``) and robot failures for the
    next refills (``failures``: an errorCode, HANG or ESTOP each)."""

    def __init__(self):
        super().__init__()
        self.pieces = 0
        self.failures: list[str] = []
        self.hung: list[int] = []

    def pallet(self):
        self.pieces += PALLET
        self._put(ev.PALLET_ARRIVED, {"count": self.pieces, "observedAt": _now()})

    def request(self, req):
        if req.rpc != "dock_to_buffer":
            return super().request(req)
        cid = str(req.task_id)
        if self.failures:
            self._fail(req.task_id, self.failures.pop(0))
        elif self.pieces == 0:
            self._put(ev.ROBOT_ACTION_FAILED, {"correlationId": cid, "errorCode": "SOURCE_EMPTY",
                                               "finishedAt": _now()}, cid)
        else:
            self.pieces -= 1
            self._put(ev.ROBOT_ACTION_SUCCEEDED, {"correlationId": cid, "data": {}}, cid)
            if self.pieces == 0:
                self.pallet()

    def _fail(self, task_id: int, how: str):
        """Nothing moved: the piece stays at the dock, PIECES unchanged."""
        cid = str(task_id)
        if how == HANG:
            self.hung.append(task_id)
            return
        if how == ESTOP:
            self._put(ev.ROBOT_FAULT, {"fault": 8, "observedAt": _now()})
        self._put(ev.ROBOT_ACTION_FAILED, {"correlationId": cid, "errorCode": "PLC_ERROR",
                                           "errorMessage": "PLC error 3 (gripper fault)"}, cid)
        if how == ESTOP:  # the operator clears the stop before answering
            self._put(ev.ROBOT_FAULT, {"fault": None, "observedAt": _now()})


@pytest.fixture
def line(engine, layout):
    plc = DockPlc()
    loop = EventLoop(engine, layout, scheduler=default_scheduler(), hardware=plc)
    plc.loop = loop
    loop.start(consume=False)
    yield loop, plc
    loop.stop()


def _rows(engine, sql, **params):
    with engine.connect() as c:
        return c.execute(text(sql), params).all()


def _handle(loop, type_, payload):
    out = loop.handle(new_message(type_, payload, actor="op"))
    assert out.status == "HANDLED", out
    return out.result


def _drain(loop):
    while loop.handle_next(block=False) is not None:
        pass


def run_order(loop, plc, quantity, resolution):
    """One order from a first pallet to its end, answering every ACTION_FAILED with
    ``resolution`` (a hung refill times out first, as ScheduleTick would find it).
    Returns the answered actions' error codes."""
    engine = loop.engine
    plc.pallet()
    _drain(loop)  # the loop knows the first pallet before the order starts
    order = _handle(loop, "CreateOrder", {"productId": "SHAFT-B", "quantity": quantity})
    _handle(loop, "StartOrder", {"workOrderId": order["id"]})
    answered = []
    for _ in range(50):
        _drain(loop)
        while plc.hung:
            _handle(loop, "StepTimeout", {"taskId": plc.hung.pop(0)})
        actions = _rows(engine, "SELECT id, facts FROM manual_action WHERE status = 'OPEN' "
                                "AND kind = 'ACTION_FAILED' ORDER BY id")
        if not actions:
            break
        for a in actions:
            answered.append(a.facts["errorCode"])
            _handle(loop, "ResolveManualAction", {"manualActionId": a.id, "resolution": resolution})
    (wo,) = _rows(engine, "SELECT * FROM work_order WHERE id = :o", o=order["id"])
    assert wo.status == "COMPLETED", (wo.status, wo.completed_qty, wo.scrapped_qty, _dock(engine), plc.pieces)
    assert wo.completed_qty + wo.scrapped_qty == quantity
    assert _rows(engine, "SELECT id FROM manual_action WHERE status = 'OPEN'") == []
    assert _rows(engine, "SELECT id FROM task WHERE status IN ('PENDING', 'RUNNING')") == []
    assert _dock(engine) == plc.pieces  # what the PLC holds, no piece lost on the way
    replay(engine)
    return wo, answered


def _dock(engine):
    return _rows(engine, "SELECT pieces_waiting FROM dock")[0].pieces_waiting


def _refill_failures(engine):
    return _rows(engine, "SELECT error_code FROM task WHERE kind = 'DOCK_TO_BUFFER' AND status = 'FAILED'")


@pytest.mark.parametrize("failures", [1, PALLET])  # one, and the whole first refill of a pallet
def test_failed_refills_answered_retry_are_refilled_and_the_order_completes(line, failures):
    loop, plc = line
    plc.failures = ["PLC_ERROR"] * failures
    wo, answered = run_order(loop, plc, 8, "RETRY")
    assert answered == ["PLC_ERROR"] * failures
    assert wo.scrapped_qty == len(_rows(loop.engine, "SELECT id FROM job WHERE work_order_id = :o "
                                                     "AND context->>'disposition' = 'SCRAP'", o=wo.id))
    assert len(_refill_failures(loop.engine)) == failures


def test_a_failed_refill_answered_scrap_leaves_its_piece_counted_at_the_dock(line):
    """The scrapped job's piece never left the dock (nothing moved): the next job takes it."""
    loop, plc = line
    plc.failures = ["PLC_ERROR"]
    wo, answered = run_order(loop, plc, 5, "SCRAP")
    assert answered == ["PLC_ERROR"]
    refill_scrapped = _rows(loop.engine, "SELECT id FROM job WHERE work_order_id = :o AND status = 'SCRAPPED' "
                                         "AND position_type = 'OUT' AND step_index = 0", o=wo.id)
    assert len(refill_scrapped) == 1
    # the first pallet's last piece went to the fifth job, then the next pallet came
    assert plc.pieces == _dock(loop.engine) == PALLET


@pytest.mark.parametrize("how", [HANG, ESTOP])
def test_a_timed_out_or_emergency_stopped_refill_answered_retry_is_refilled(line, how):
    loop, plc = line
    plc.failures = [how]
    wo, answered = run_order(loop, plc, 8, "RETRY")
    assert answered == ["ACTION_TIMEOUT" if how == HANG else "PLC_ERROR"]
    if how == ESTOP:
        assert [a.status for a in _rows(loop.engine, "SELECT status FROM alarm WHERE code = 'ROBOT_FAULT'")] \
            == ["CLEARED"]


def test_a_reconnect_takes_the_dock_count_from_the_plc(harness):
    """Pieces put on or taken off the dock while the link was down: the picture the
    PLC comes back with is the count (a newer reading than the last pallet's)."""
    harness.ok("PalletArrived", {"count": 2, "observedAt": "2026-11-30T10:00:00+00:00"})
    harness.ok("PlcConnection", {"connected": False, "error": "gone"})
    harness.ok("PlcConnection", {"connected": True, "plcState": {
        **plc(), "dock": {"pieces": 5, "arrivals": 7}, "observedAt": "2026-11-30T10:00:05+00:00"}})
    assert _dock(harness.engine) == 5


def test_an_order_cancelled_after_a_refill_failed_leaves_its_piece_counted_at_the_dock(harness):
    harness.ok("PalletArrived", {"count": 1})
    order_id, (j,) = harness.started_order(quantity=1)
    req = harness.act(Refill(j, 1))
    assert _dock(harness.engine) == 0
    harness.fail(req, "PLC_ERROR")  # a gripper fault: nothing moved, the job ERROR on the robot
    harness.ok("CancelOrder", {"workOrderId": order_id})
    assert harness.job(j).status == "CANCELLED"
    assert _dock(harness.engine) == 1  # the next order's refill may take it


def test_a_refill_of_unknown_outcome_answered_not_done_gives_its_piece_back(harness):
    """The PLC took the refill, then restarted without it; the operator says it did
    not happen (CONFIRM: the records stand): the piece is at the dock, and counted."""
    harness.ok("PalletArrived", {"count": 1})
    _, (j,) = harness.started_order(quantity=1)
    req = harness.act(Refill(j, 1))
    harness.fail(req, ev.OUTCOME_UNKNOWN)
    (question,) = [a for a in harness.manual_actions() if a.status == "OPEN"]
    assert question.kind == "RECOVERY_TASK_OUTCOME_UNKNOWN" and "CONFIRM" in question.choices
    harness.ok("ResolveManualAction", {"manualActionId": question.id, "resolution": "CONFIRM"})
    job = harness.job(j)
    assert (job.status, job.position_type) == ("PENDING", "ON_DOCK")
    assert _dock(harness.engine) == 1
