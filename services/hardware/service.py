"""The ``hardware`` nameko service: robot, tool and machine actions over Modbus
TCP, and the PLC signal watcher (contracts: docs/architecture.md, "hardware RPCs").

Action RPCs validate, queue and answer ``{"accepted": true, "actionId": n}`` at
once; the outcome arrives later as exactly one result event. Invalid requests
answer ``accepted: false`` and send nothing.
"""

from __future__ import annotations

from nameko.events import EventDispatcher
from nameko.rpc import rpc
from nameko.timer import timer

from services.hardware import action_requests as actions
from services.hardware.dependencies import Hardware
from shared import events as ev

WATCH_INTERVAL = 0.1  # seconds between PLC polls (fixed rate)


def _accept(hardware, correlation_id, build):
    if not hardware.admitted():
        return {"accepted": False, "errorCode": "REJECTED",
                "errorMessage": "sent by a line_controller instance that has since been replaced"}
    try:
        command = build()
        correlation = actions.correlation(correlation_id)
    except actions.Rejected as exc:
        return {"accepted": False, "errorCode": "REJECTED", "errorMessage": str(exc)}
    return hardware.submit(correlation, command)


class HardwareService:
    name = ev.HARDWARE

    hardware = Hardware()
    dispatch = EventDispatcher()

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.dock_to_buffer(slot_no, job_id))

    @rpc
    def buffer_to_dock(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.buffer_to_dock(slot_no, job_id))

    @rpc
    def buffer_to_equipment(self, correlation_id, slot_no, equipment_id, equipment_slot, job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.buffer_to_equipment(
            slot_no, equipment_id, equipment_slot, job_id))

    @rpc
    def equipment_to_buffer(self, correlation_id, equipment_id, equipment_slot, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.equipment_to_buffer(
            equipment_id, equipment_slot, slot_no, job_id))

    @rpc
    def swap(self, correlation_id, equipment_id, equipment_slot, unload_to_slot, load_from_slot,
             unload_job_id=None, load_job_id=None):
        return _accept(self.hardware, correlation_id, lambda: self.hardware.commands.swap(
            equipment_id, equipment_slot, unload_to_slot, load_from_slot, unload_job_id, load_job_id))

    @rpc
    def scan(self, correlation_id, slot_no, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.scan(slot_no, job_id))

    @rpc
    def mark(self, correlation_id, slot_no, text, job_id=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.mark(slot_no, text, job_id))

    @rpc
    def start_machine(self, correlation_id, equipment_id, jobs=None):
        return _accept(self.hardware, correlation_id,
                       lambda: self.hardware.commands.start_machine(equipment_id, jobs))

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
        for event_type, payload in self.hardware.watcher.poll():
            self.dispatch(event_type, payload)
