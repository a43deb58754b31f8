"""An unload the database lost (issue 56): an asynchronous standby promoted
without the last commits, so the records keep a piece in INSP1's slot (job
WAITING_UNLOAD, slot DONE) that the robot has already put on its buffer slot,
where the PLC's OCCUPIED shows none. The line asks where the piece is, once,
sends nothing to that slot before the answer, and the order then completes
exactly. The same question comes from an unload the PLC refuses with
SOURCE_EMPTY, instead of an ACTION_FAILED whose RETRY cannot succeed.

The real loop, scheduler and PostgreSQL, on an in-process cell (:class:`CellPlc`)
that keeps where each piece is as a PLC's sensors do. "The database lost it" is
played by a first loop that never records the unload (a scheduler that holds
INSP1's unloads, or a result that never comes), then a new loop on the same
database, as the line_controller after the failover."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import text

from services.line_controller import consistency_checks as r
from services.line_controller import scheduler as s
from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from services.line_controller.scheduler import default_scheduler
from shared import events as ev
from tests.flow.invariants import replay
from tests.flow.test_command_properties import InstantHardware

STATION = "INSP1"


class CellPlc(InstantHardware):
    """InstantHardware that knows where the pieces are (buffer sensors, machine
    slots' OCCUPIED) and refuses a move from an empty place with SOURCE_EMPTY,
    as the PLC does. ``unanswered``: unloads from these machines move the piece
    and never report (the first one only)."""

    def __init__(self, layout):
        super().__init__()
        self.layout = layout
        self.buffer: set[int] = set()
        self.slots: set[tuple[str, int]] = set()
        self.unanswered: set[str] = set()
        self.sent: list = []

    def picture(self) -> dict:
        return {"connected": True, "robot": {"state": "IDLE"},
                "buffer": [{"slotNo": n, "occupied": n in self.buffer}
                           for n in range(1, self.layout.buffer_slots + 1)],
                "equipment": [{"id": e.id, "running": False, "fault": None, "slots": [
                    {"slotNo": n, "occupied": (e.id, n) in self.slots, "running": False, "done": False}
                    for n in range(1, e.slots + 1)]} for e in self.layout.equipment]}

    def unload_physically(self, equipment_id: str, slot_no: int, buffer_slot: int) -> None:
        self.slots.remove((equipment_id, slot_no))
        self.buffer.add(buffer_slot)

    def request(self, req):
        self.sent.append(req)
        k, cid = req.kwargs, str(req.task_id)
        source_empty = False
        if req.rpc == "dock_to_buffer":
            self.buffer.add(k["slot_no"])
        elif req.rpc == "buffer_to_equipment":
            source_empty = k["slot_no"] not in self.buffer
            if not source_empty:
                self.buffer.remove(k["slot_no"])
                self.slots.add((k["equipment_id"], k["equipment_slot"]))
        elif req.rpc == "equipment_to_buffer":
            source_empty = (k["equipment_id"], k["equipment_slot"]) not in self.slots
            if not source_empty:
                self.unload_physically(k["equipment_id"], k["equipment_slot"], k["slot_no"])
                if k["equipment_id"] in self.unanswered:
                    self.unanswered.remove(k["equipment_id"])
                    return  # done, but its result is lost with the primary
        elif req.rpc == "swap":
            place = (k["equipment_id"], k["equipment_slot"])
            source_empty = place not in self.slots or k["load_from_slot"] not in self.buffer
            if not source_empty:
                self.buffer.remove(k["load_from_slot"])
                self.buffer.add(k["unload_to_slot"])
        elif req.rpc == "buffer_to_dock":
            self.buffer.discard(k["slot_no"])
        if source_empty:
            self._put(ev.ROBOT_ACTION_FAILED, {"correlationId": cid, "errorCode": "SOURCE_EMPTY",
                                               "errorMessage": "no piece at the source"}, cid)
            return
        super().request(req)


class HoldUnloadsFrom:
    """The real scheduler, except that it never unloads ``equipment_id``: its piece
    stays recorded there (the unload that follows is the one the database loses)."""

    def __init__(self, equipment_id: str):
        self.inner, self.equipment_id = default_scheduler(), equipment_id

    def choose(self, state):
        return [a for a in self.inner.choose(state)
                if not (isinstance(a, s.Unload | s.Swap) and a.equipment_id == self.equipment_id)]


def _rows(engine, sql, **params):
    with engine.connect() as c:
        return c.execute(text(sql), params).all()


def _drain(loop):
    for _ in range(5000):
        if loop.handle_next(block=False) is None:
            return
    raise AssertionError("the loop never came to rest")


def _handle(loop, type_, payload):
    out = loop.handle(new_message(type_, payload, actor="op"))
    assert out.status == "HANDLED", out
    return out.result


@pytest.fixture
def cell(engine, layout):
    """``cell.first(scheduler)``, then ``cell.restart()``: the loops on one database and one cell."""
    loops = []

    class Cell:
        plc = CellPlc(layout)

        def loop(self, scheduler, **start):
            loop = EventLoop(engine, layout, scheduler=scheduler, hardware=self.plc)
            self.plc.loop = loop
            loop.start(consume=False, **start)
            loops.append(loop)
            return loop

        def restart(self):
            """The line_controller after the failover: its start-up check reads the cell."""
            loops[-1].stop()
            return self.loop(default_scheduler(), recover=True, plc_state=self.plc.picture)

    yield Cell()
    for loop in loops:
        loop.stop()


def _run_order(loop, quantity: int) -> dict:
    """An order of SHAFT-B created and started, run until the loop has nothing left to do."""
    order = _handle(loop, "CreateOrder", {"productId": "SHAFT-B", "quantity": quantity})
    _handle(loop, "StartOrder", {"workOrderId": order["id"]})
    _drain(loop)
    return order


def _held_at_station(engine, order_id):
    """The job the records hold in the station's slot (WAITING_UNLOAD, slot DONE)."""
    (slot,) = _rows(engine, "SELECT * FROM equipment_slot WHERE equipment_id = :e AND slot_no = 1", e=STATION)
    assert slot.status == "DONE" and slot.current_job_id is not None
    (job,) = _rows(engine, "SELECT * FROM job WHERE id = :j", j=slot.current_job_id)
    assert (job.work_order_id, job.status, job.position_ref_id) == (order_id, "WAITING_UNLOAD", f"{STATION}:1")
    return job


def _open_actions(engine):
    return _rows(engine, "SELECT * FROM manual_action WHERE status = 'OPEN' ORDER BY id")


def _resolve(loop, action, resolution):
    _handle(loop, "ResolveManualAction", {"manualActionId": action.id, "resolution": resolution})


def _sent_to_station(plc, since):
    return [q for q in plc.sent[since:] if q.kwargs.get("equipment_id") == STATION]


def _completes_exactly(loop, order_id, quantity):
    _drain(loop)
    engine = loop.engine
    (order,) = _rows(engine, "SELECT * FROM work_order WHERE id = :o", o=order_id)
    assert order.status == "COMPLETED"
    assert order.completed_qty + order.scrapped_qty == quantity
    jobs = Counter(j.status for j in _rows(engine, "SELECT status FROM job WHERE work_order_id = :o", o=order_id))
    assert jobs == {k: v for k, v in (("COMPLETED", order.completed_qty), ("SCRAPPED", order.scrapped_qty)) if v}
    assert _open_actions(engine) == []
    assert _rows(engine, "SELECT id FROM task WHERE status IN ('PENDING', 'RUNNING')") == []
    replay(engine)  # seq gapless; no piece moved twice


def test_a_lost_unload_is_asked_about_once_and_the_order_completes(cell, engine):
    quantity = 3
    first = cell.loop(HoldUnloadsFrom(STATION))
    order = _run_order(first, quantity)
    job = _held_at_station(engine, order["id"])
    # The robot unloaded it; the database that recorded so was lost in the failover.
    cell.plc.unload_physically(STATION, 1, job.temp_slot_no)
    sent = len(cell.plc.sent)

    line = cell.restart()
    _drain(line)

    (question,) = _open_actions(engine)  # one question, about that piece
    assert (question.kind, question.job_id, question.equipment_id) == (r.MACHINE_PIECE_MISSING, job.id, STATION)
    assert question.choices == ["CONFIRM", "PIECE_UNLOADED", "PIECE_REMOVED", "SCRAP"]
    assert question.facts == {"jobId": job.id, "equipmentId": STATION, "slotNo": 1,
                              "bufferSlot": job.temp_slot_no, "jobIds": [job.id]}
    assert "OCCUPIED" in question.text and "PIECE_UNLOADED" in question.text
    held = _rows(engine, "SELECT status, held_status FROM job WHERE id = :j", j=job.id)[0]
    assert (held.status, held.held_status) == ("SUSPENDED", "WAITING_UNLOAD")
    assert _sent_to_station(cell.plc, sent) == []  # nothing goes to that slot before the answer
    assert _rows(engine, "SELECT code FROM alarm WHERE status <> 'CLEARED'") == [(r.MACHINE_PIECE_MISSING,)]

    again = cell.restart()  # a second start, or a PLC reconnect, does not ask again
    _drain(again)
    assert [a.id for a in _open_actions(engine)] == [question.id]

    _resolve(again, question, "PIECE_UNLOADED")  # the truth: it is on its buffer slot
    _completes_exactly(again, order["id"], quantity)
    assert [(a.kind, a.resolution) for a in _rows(engine, "SELECT * FROM manual_action")] == \
        [(r.MACHINE_PIECE_MISSING, "PIECE_UNLOADED")]
    # the inspection step counted as done, once: the piece was never unloaded twice
    assert not [f for f in _rows(engine, "SELECT error_code FROM task WHERE status = 'FAILED'")]


def test_a_piece_taken_out_by_hand_counts_as_scrap(cell, engine):
    first = cell.loop(HoldUnloadsFrom(STATION))
    order = _run_order(first, 2)
    job = _held_at_station(engine, order["id"])
    cell.plc.slots.remove((STATION, 1))  # someone took it out of the cell
    line = cell.restart()
    _drain(line)
    (question,) = _open_actions(engine)
    _resolve(line, question, "PIECE_REMOVED")
    assert _rows(engine, "SELECT status FROM job WHERE id = :j", j=job.id)[0].status == "SCRAPPED"
    _completes_exactly(line, order["id"], 2)
    (done,) = _rows(engine, "SELECT * FROM work_order WHERE id = :o", o=order["id"])
    assert done.scrapped_qty >= 1


def test_an_unload_answered_source_empty_asks_where_the_piece_is(cell, engine):
    """The issue's run: the unload's result was lost with the primary, the check asked
    about it (RECOVERY_TASK_OUTCOME_UNKNOWN) and was told it did not happen. The unload
    sent again finds the slot empty: one question where the piece is, no RETRY."""
    quantity = 3
    first = cell.loop(default_scheduler())
    cell.plc.unanswered.add(STATION)
    order = _run_order(first, quantity)
    (lost,) = _rows(engine, "SELECT * FROM task WHERE status = 'RUNNING'")
    assert (lost.kind, lost.equipment_id) == (ev.EQUIPMENT_TO_BUFFER, STATION)

    line = cell.restart()
    _drain(line)
    (unknown,) = _open_actions(engine)
    assert unknown.kind == r.TASK_OUTCOME_UNKNOWN
    sent = len(cell.plc.sent)
    _resolve(line, unknown, "CONFIRM")  # wrongly: "it did not happen"
    _drain(line)

    (question,) = _open_actions(engine)
    assert (question.kind, question.job_id, question.equipment_id) == (r.MACHINE_PIECE_MISSING, lost.job_id, STATION)
    assert question.facts["case"] == "SOURCE_EMPTY" and "SOURCE_EMPTY" in question.text
    assert "RETRY" not in question.choices
    assert _rows(engine, "SELECT kind FROM manual_action WHERE kind = 'ACTION_FAILED'") == []
    (tried,) = _sent_to_station(cell.plc, sent)  # once, then nothing more to that slot
    assert tried.rpc == "equipment_to_buffer"
    job = _rows(engine, "SELECT * FROM job WHERE id = :j", j=lost.job_id)[0]
    assert (job.status, job.held_status, job.position_ref_id) == ("SUSPENDED", "WAITING_UNLOAD", f"{STATION}:1")

    again = cell.restart()  # the check finds the same piece: no second question
    _drain(again)
    assert [a.id for a in _open_actions(engine)] == [question.id]
    _resolve(again, question, "PIECE_UNLOADED")
    _completes_exactly(again, order["id"], quantity)


def test_a_plc_reconnect_asks_too(cell, engine):
    """The PLC's link comes back (the check of a reconnect): the same comparison."""
    line = cell.loop(HoldUnloadsFrom(STATION))
    order = _run_order(line, 1)
    job = _held_at_station(engine, order["id"])
    _handle(line, "PlcConnection", {"connected": False, "error": "link down"})
    cell.plc.unload_physically(STATION, 1, job.temp_slot_no)
    _handle(line, "PlcConnection", {"connected": True, "plcState": cell.plc.picture()})
    (question,) = _open_actions(engine)
    assert (question.kind, question.job_id) == (r.MACHINE_PIECE_MISSING, job.id)
    _resolve(line, question, "PIECE_UNLOADED")
    _completes_exactly(line, order["id"], 1)
