"""The nameko service: RPC commands, hardware events in, line_events out, and
hardware requests sent without the loop waiting for them."""

import pytest
from nameko.events import EventDispatcher, event_handler
from nameko.rpc import rpc
from nameko.standalone.rpc import ServiceRpcProxy
from nameko.testing.services import entrypoint_waiter
from sqlalchemy import text

from services.line_controller.dbstate import DBState
from services.line_controller.dependencies import ProductionLoop
from services.line_controller.service import LineControllerService
from shared import events as ev
from tests.line_controller.conftest import ScriptedScheduler
from tests.line_controller.scripted import Refill
from tests.support.waiting import wait_for


class FakeHardware:
    """Stands in for the hardware service's contract: accept, then one result event."""
    name = ev.HARDWARE
    dispatch = EventDispatcher()

    @rpc
    def emit(self, event_type, payload):
        self.dispatch(event_type, payload)

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        self.dispatch(ev.ROBOT_ACTION_SUCCEEDED, {"correlationId": correlation_id, "action": ev.DOCK_TO_BUFFER,
                                                  "actionId": 1, "data": {}})
        return {"accepted": True, "actionId": 1}


class LineEventsListener:
    name = "line_events_listener"
    received = []

    @event_handler(ev.LINE_CONTROLLER, ev.LINE_EVENTS)
    def on_line_events(self, payload):
        LineEventsListener.received.append(payload)


@pytest.fixture
def line_controller(container_factory, nameko_config):
    container = container_factory(LineControllerService, nameko_config)
    container.start()
    return container


@pytest.fixture
def rpc_proxy(nameko_config, line_controller):
    with ServiceRpcProxy(ev.LINE_CONTROLLER, nameko_config, timeout=30) as proxy:
        yield proxy


def _loop(container):
    return next(d for d in container.dependencies if isinstance(d, ProductionLoop)).loop


def test_command_round_trip(rpc_proxy, engine):
    created = rpc_proxy.command("CreateOrder", {"productId": "SHAFT-B", "quantity": 2}, "alice",
                                wait_seconds=20)
    assert created["status"] == "HANDLED" and created["error"] is None
    order_id = created["result"]["id"]
    started = rpc_proxy.command("StartOrder", {"workOrderId": order_id}, "alice", command_id="start-1",
                                wait_seconds=20)
    assert (started["commandId"], started["status"], started["result"]["status"]) == ("start-1", "HANDLED", "RUNNING")
    again = rpc_proxy.command("StartOrder", {"workOrderId": order_id}, "alice", command_id="start-1")
    # A repeated command id: the recorded outcome (marked as a replay), not a second run.
    assert again["replayed"] and {**again, "replayed": False} == started
    bad = rpc_proxy.command("StartOrder", {"workOrderId": order_id}, "alice", wait_seconds=20)
    assert (bad["status"], bad["error"]["code"]) == ("REJECTED", "INVALID_TRANSITION")
    assert rpc_proxy.command("Explode", {}, "alice")["error"]["code"] == "VALIDATION_ERROR"
    assert rpc_proxy.command("PauseOrder", {"workOrderId": "x"}, "alice")["error"]["code"] == "VALIDATION_ERROR"
    status = rpc_proxy.status()
    assert status["handledTotal"] >= 3 and status["lastSeq"] >= 4 and status["recovering"] is False


def test_a_command_that_times_out_is_queued_and_still_runs(rpc_proxy, engine):
    reply = rpc_proxy.command("CreateOrder", {"productId": "SHAFT-B", "quantity": 1, "code": "LATE"}, "bob",
                              wait_seconds=0)
    assert reply["status"] in ("QUEUED", "HANDLED")

    def outcome():
        with engine.connect() as c:
            return c.execute(text("SELECT status FROM loop_message WHERE id = :id"),
                             {"id": reply["commandId"]}).scalar() == "HANDLED"
    wait_for(outcome, timeout=20)


def test_a_hardware_event_changes_state_and_goes_out_as_line_events(
        line_controller, container_factory, nameko_config, engine, rpc_proxy):
    LineEventsListener.received.clear()
    _loop(line_controller).scheduler = None  # the piece is placed by hand below
    hardware = container_factory(FakeHardware, nameko_config)
    listener = container_factory(LineEventsListener, nameko_config)
    hardware.start()
    listener.start()
    order = rpc_proxy.command("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, "op", wait_seconds=20)
    rpc_proxy.command("StartOrder", {"workOrderId": order["result"]["id"]}, "op", wait_seconds=20)
    with engine.begin() as conn:  # arrange: the piece is on MC1 slot 2
        db = DBState(conn)
        job_id = db.jobs_of_order(order["result"]["id"])[0].id
        db.claim_job_for_action(job_id, "PENDING", "MOVING", "ON_ROBOT", None, temp_slot_no=1)
        db.move_job_to_equipment(job_id, "ON_ROBOT", "MC1", 2)

    def slot_changed():
        return any(f["type"] == "SlotChanged" and f["payload"]["status"] == "DONE"
                   for batch in LineEventsListener.received for f in batch["events"])

    with ServiceRpcProxy(ev.HARDWARE, nameko_config, timeout=30) as hw:
        hw.emit(ev.MACHINE_DONE, {"machineId": "MC1", "slotNo": 2, "jobId": job_id})
        wait_for(slot_changed, timeout=20, message="line_events with the slot DONE")
    with engine.connect() as c:
        assert c.execute(text("SELECT status FROM job WHERE id = :id"), {"id": job_id}).scalar() == "WAITING_UNLOAD"
        seqs = [r[0] for r in c.execute(text("SELECT seq FROM event_log ORDER BY seq"))]
    batch = next(b for b in LineEventsListener.received
                 if any(f["type"] == "SlotChanged" for f in b["events"]))
    assert {f["txId"] for f in batch["events"]} == {batch["txId"]}
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_scheduled_action_is_requested_and_its_result_advances_the_job(
        line_controller, container_factory, nameko_config, engine, rpc_proxy):
    hardware = container_factory(FakeHardware, nameko_config)
    hardware.start()
    scheduler = ScriptedScheduler()
    _loop(line_controller).scheduler = scheduler
    order = rpc_proxy.command("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, "op", wait_seconds=20)
    rpc_proxy.command("StartOrder", {"workOrderId": order["result"]["id"]}, "op", wait_seconds=20)
    with engine.connect() as c:
        job_id = c.execute(text("SELECT id FROM job")).scalar()
    with entrypoint_waiter(line_controller, "on_robot_action_succeeded", timeout=30):
        scheduler.queued.append(Refill(job_id, 7))  # planned by the next round (a tick or this command)
        rpc_proxy.command("AcknowledgeAlarm", {"alarmId": 1}, "op", wait_seconds=20)  # any message → a round

    def on_buffer():
        with engine.connect() as c:
            row = c.execute(text("SELECT status, temp_slot_no FROM job WHERE id = :id"), {"id": job_id}).first()
        return tuple(row) == ("QUEUED", 7)
    wait_for(on_buffer, timeout=20)
