"""Fixtures for the line_controller: a loop on a fresh database with the demo layout,
recording what it publishes and what it asks of the hardware."""

import pytest

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from shared.config import load_settings
from shared.layout import load_layout
from tests.support.db import RowQueries


class RecordingHardware:
    def __init__(self):
        self.requests = []

    def request(self, req):
        self.requests.append(req)

    def sending(self):
        return set()  # a request is taken at once


class ScriptedScheduler:
    """Plans exactly the actions a test queues (the real scheduler is another module)."""

    def __init__(self):
        self.queued = []

    def choose(self, state):
        actions, self.queued = self.queued, []
        return [a(state) if callable(a) else a for a in actions]


class Harness(RowQueries):
    def __init__(self, engine, layout):
        self.published = []
        self.hardware = RecordingHardware()
        self.scheduler = ScriptedScheduler()
        self.loop = EventLoop(engine, layout, publish=lambda tx, frames: self.published.append((tx, frames)),
                              scheduler=self.scheduler, hardware=self.hardware)
        self.engine = engine

    def send(self, type_, payload=None, **kw):
        kw.setdefault("actor", "op1")
        return self.loop.handle(new_message(type_, payload, **kw))

    def next(self):
        """Handle the next message waiting in the inbox (follow-ups, refusals)."""
        return self.loop.handle_next(block=False)

    def ok(self, type_, payload=None, **kw):
        out = self.send(type_, payload, **kw)
        assert out.status == "HANDLED", out
        return out.result

    def act(self, action):
        """Run a scheduling round that applies ``action``; returns its hardware request."""
        self.scheduler.queued.append(action)
        before = len(self.hardware.requests)
        self.loop.schedule()
        assert len(self.hardware.requests) == before + 1
        return self.hardware.requests[-1]

    def start(self, equipment_id):
        """A machine start for its loaded slots, and its success."""
        from tests.line_controller.scripted import StartMachine
        out = self.succeed(self.act(StartMachine(equipment_id)), type_="MachineStartSucceeded")
        assert out.status == "HANDLED", out

    def succeed(self, req, data=None, type_="RobotActionSucceeded"):
        return self.send(type_, {"correlationId": str(req.task_id), "data": data or {}},
                         correlation_id=str(req.task_id))

    def fail(self, req, code="PLC_ERROR", type_="RobotActionFailed"):
        return self.send(type_, {"correlationId": str(req.task_id), "errorCode": code,
                                 "errorMessage": "boom"}, correlation_id=str(req.task_id))

    def job(self, job_id):
        return self.row("SELECT * FROM job WHERE id = :id", id=job_id)

    def slot(self, equipment_id, n):
        return self.row("SELECT * FROM equipment_slot WHERE equipment_id = :e AND slot_no = :n",
                        e=equipment_id, n=n)

    def order(self, order_id):
        return self.row("SELECT * FROM work_order WHERE id = :id", id=order_id)

    def on_buffer(self, job_id, buffer_slot):
        from tests.line_controller.scripted import Refill
        assert self.succeed(self.act(Refill(job_id, buffer_slot))).status == "HANDLED"

    def on_equipment(self, job_id, equipment_id, slot_no, buffer_slot, start=True):
        from tests.line_controller.scripted import Load
        self.on_buffer(job_id, buffer_slot)
        assert self.succeed(self.act(Load(job_id, equipment_id, slot_no))).status == "HANDLED"
        if start:  # loaded → its cycle runs (job PROCESSING)
            self.start(equipment_id)

    def alarms(self, code=None):
        return [a for a in self.rows("SELECT * FROM alarm ORDER BY id") if code in (None, a.code)]

    def manual_actions(self, kind=None):
        return [a for a in self.rows("SELECT * FROM manual_action ORDER BY id") if kind in (None, a.kind)]

    def started_order(self, product="SHAFT-B", quantity=2):
        order = self.ok("CreateOrder", {"productId": product, "quantity": quantity})
        self.ok("StartOrder", {"workOrderId": order["id"]})
        jobs = self.rows("SELECT id FROM job WHERE work_order_id = :o ORDER BY seq_no", o=order["id"])
        return order["id"], [j.id for j in jobs]


@pytest.fixture(scope="session")
def layout():
    return load_layout(load_settings({}).line_file)


@pytest.fixture
def harness(engine, layout):
    h = Harness(engine, layout)
    h.loop.start(consume=False)  # tests hand messages to the loop one by one
    yield h
    h.loop.stop()
