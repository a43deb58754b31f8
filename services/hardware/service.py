"""The ``hardware`` nameko service: robot, tool and machine actions over the
device port (Modbus TCP or OPC UA), and the PLC signal watcher (contracts: docs/architecture.md, "hardware RPCs").

Action RPCs validate, queue and answer ``{"accepted": true, "actionId": n}`` at
once; the outcome arrives later as exactly one result event. Invalid requests
answer ``accepted: false`` and send nothing.
"""

from __future__ import annotations

from nameko.events import EventDispatcher
from nameko.rpc import Rpc, rpc
from nameko.timer import timer

from services.hardware import action_requests as actions
from services.hardware.dependencies import REDELIVERED_CONTEXT_KEY, Hardware
from shared import events as ev

# The watch entrypoint waits inside for the port's next change (Modbus: its poll
# interval; OPC UA: a notification), so the timer only restarts it; the floor
# keeps a port that returned at once from spinning.
WATCH_INTERVAL = 0.01
WATCH_WAIT = 0.5  # seconds one watch waits for a change (bounds a clean stop's wait)


class ActionRpc(Rpc):
    """An action RPC whose worker knows whether the transport delivered its request
    before: to a consumer that ended without acknowledging it (an instance of this
    service killed after taking it). Set from the delivery, whatever the caller sent."""

    def unpack_message_headers(self, message):
        context = super().unpack_message_headers(message)
        context[REDELIVERED_CONTEXT_KEY] = bool(message.delivery_info.get("redelivered"))
        return context


action_rpc = ActionRpc.decorator


def _accept(hardware, correlation_id, build):
    if not hardware.admitted():
        return {"accepted": False, "errorCode": "REJECTED",
                "errorMessage": "sent by a line_controller instance that has since been replaced"}
    try:
        command = build()
        correlation = actions.correlation(correlation_id)
    except actions.Rejected as exc:
        return {"accepted": False, "errorCode": "REJECTED", "errorMessage": str(exc)}
    return hardware.submit(correlation, command, redelivered=hardware.redelivered)


class HardwareService:
    name = ev.HARDWARE

    hardware = Hardware()
    dispatch = EventDispatcher()

    @action_rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.dock_to_buffer(slot_no, job_id))

    @action_rpc
    def buffer_to_dock(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.buffer_to_dock(slot_no, job_id))

    @action_rpc
    def buffer_to_equipment(self, correlation_id, slot_no, equipment_id, equipment_slot, job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.buffer_to_equipment(
            slot_no, equipment_id, equipment_slot, job_id))

    @action_rpc
    def equipment_to_buffer(self, correlation_id, equipment_id, equipment_slot, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.equipment_to_buffer(
            equipment_id, equipment_slot, slot_no, job_id))

    @action_rpc
    def swap(self, correlation_id, equipment_id, equipment_slot, unload_to_slot, load_from_slot,
             unload_job_id=None, load_job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.swap(
            equipment_id, equipment_slot, unload_to_slot, load_from_slot, unload_job_id, load_job_id))

    @action_rpc
    def scan(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.scan(slot_no, job_id))

    @action_rpc
    def mark(self, correlation_id, slot_no, text, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.mark(slot_no, text, job_id))

    @action_rpc
    def start_machine(self, correlation_id, equipment_id, jobs=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.start_machine(equipment_id, jobs))

    @action_rpc
    def abort_cycle(self, correlation_id, equipment_id):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.abort_cycle(equipment_id))

    @rpc
    def plc_state(self):
        return self.hardware.plc_state()

    @rpc
    def known_actions(self):
        return self.hardware.known_actions()

    @rpc
    def status(self):
        return self.hardware.status()

    @timer(interval=WATCH_INTERVAL)
    def watch(self):
        for event_type, payload in self.hardware.watcher.watch(WATCH_WAIT):
            self.hardware.send(lambda _source, t, p: self.dispatch(t, p), event_type, payload)


def hardware_service(line: ev.LineServices = ev.LineServices()) -> type:
    """The service class of one line's hardware, named for that line."""
    return type("HardwareService", (HardwareService,), {"name": line.hardware})
