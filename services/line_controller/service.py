"""The line_controller nameko service: thin entrypoints around the event loop.

RPCs enqueue commands and wait a short time for the outcome
(``docs/architecture.md``, "line_controller RPCs"); event handlers feed the
hardware service's results and PLC signals into the loop and acknowledge them
only once the loop has committed them; a timer enqueues ``ScheduleTick``.
None of them touches a production table.
"""

from __future__ import annotations

import uuid

from nameko.events import event_handler
from nameko.rpc import rpc
from nameko.timer import timer

from shared import events as ev

from .dependencies import LineEventPublisher, ProductionLoop
from .messages import COMMAND, MESSAGE_TYPES, ValidationError, new_message
from .outcome import Outcome

EVENT_WAIT_SECONDS = 30.0  # then the event is requeued; its redelivery is a harmless duplicate


def _rejected(command_id, message):
    return Outcome.refused(command_id, "VALIDATION_ERROR", message).to_reply()


def _fed(source: str, event_type: str):
    """An entrypoint that feeds one hardware event into the loop (see ``_feed``)."""
    @event_handler(source, event_type, requeue_on_error=True)
    def feed(self, payload):
        self._feed(event_type, payload)
    return feed


def line_controller_service(line: ev.LineServices = ev.LineServices()) -> type:
    """The service class of one line: named for it, listening to its hardware."""
    return type("LineControllerService", (LineControllerEntrypoints,), {
        "name": line.line_controller,
        **{attr: _fed(line.hardware, event_type) for attr, event_type in HARDWARE_EVENTS.items()},
        "on_hardware_started": _on_hardware_started(line.hardware),
    })


def _on_hardware_started(source: str):
    @event_handler(source, ev.HARDWARE_STARTED, requeue_on_error=True)
    def on_hardware_started(self, payload):
        self.hardware_started(payload)
    return on_hardware_started


# Each hardware event has its own entrypoint (nameko names the queue after it).
HARDWARE_EVENTS = {
    "on_robot_action_succeeded": ev.ROBOT_ACTION_SUCCEEDED,
    "on_robot_action_failed": ev.ROBOT_ACTION_FAILED,
    "on_tool_action_succeeded": ev.TOOL_ACTION_SUCCEEDED,
    "on_tool_action_failed": ev.TOOL_ACTION_FAILED,
    "on_machine_start_succeeded": ev.MACHINE_START_SUCCEEDED,
    "on_machine_start_failed": ev.MACHINE_START_FAILED,
    "on_machine_abort_succeeded": ev.MACHINE_ABORT_SUCCEEDED,
    "on_machine_abort_failed": ev.MACHINE_ABORT_FAILED,
    "on_machine_done": ev.MACHINE_DONE,
    "on_inspection_result": ev.INSPECTION_RESULT,
    "on_machine_fault": ev.MACHINE_FAULT,
    "on_hardware_stopping": ev.HARDWARE_STOPPING,
    "on_pallet_arrived": ev.PALLET_ARRIVED,
    "on_plc_connection": ev.PLC_CONNECTION,
    "on_robot_fault": ev.ROBOT_FAULT,
}


class LineControllerEntrypoints:
    """The production event loop's entrypoints. AI jobs are not here: the
    gateway serves them straight from PostgreSQL (``services/ai_jobs``). The
    hardware events' handlers are added per line by :func:`line_controller_service`."""

    name = ev.LINE_CONTROLLER

    line_events = LineEventPublisher()
    loop = ProductionLoop()

    @rpc
    def command(self, type, payload, actor, command_id=None, wait_seconds=None):  # noqa: A002
        command_id = str(command_id) if command_id else uuid.uuid4().hex
        # Every command class, also those registered beside messages.py (downtime_messages).
        if getattr(MESSAGE_TYPES.get(type), "category", None) != COMMAND:
            return _rejected(command_id, f"type: unknown command {type!r}")
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            return _rejected(command_id, "payload: expected an object")
        if not isinstance(actor, str) or not actor.strip() or len(command_id) > 64:
            return _rejected(command_id, "actor: expected a non-empty string" if len(command_id) <= 64
                             else "command_id: longer than 64 characters")
        if wait_seconds is None:
            wait_seconds = self.loop.command_wait_seconds
        if not isinstance(wait_seconds, int | float) or not 0 <= wait_seconds <= 300:
            return _rejected(command_id, "wait_seconds: must be 0..300")
        msg = new_message(type, payload, id=command_id, actor=actor)
        try:
            msg.parse()  # once: the loop uses this parse
        except ValidationError as exc:  # bad input changes nothing, not even the inbox
            return _rejected(command_id, str(exc))
        recorded = self.loop.persist(msg)
        if recorded is not None:
            return recorded.to_reply()
        outcome = self.loop.submit(msg).wait(wait_seconds)
        return (outcome or Outcome(command_id, "QUEUED")).to_reply()

    @rpc
    def status(self):
        return self.loop.status()

    @timer(interval=1.0)
    def tick(self):
        # An idle line's tick costs nothing: no message while nothing is due (EventLoop.tick_due).
        if self.loop.inbox_empty() and self.loop.tick_due():
            self.loop.submit(new_message("ScheduleTick"))

    def _feed(self, type_, payload):
        outcome = self.loop.submit(self.loop.event(type_, payload)).wait(EVENT_WAIT_SECONDS)
        if outcome is None:
            raise TimeoutError(f"{type_} not handled within {EVENT_WAIT_SECONDS}s; requeued")
        if outcome.status == "FAILED":
            # Not recorded (e.g. the database is away): requeue. A handler bug is recorded
            # as FAILED, so its redelivery is a duplicate and is acknowledged.
            raise RuntimeError(f"{type_} {outcome.message_id} failed; requeued")

    def hardware_started(self, payload):
        # A new hardware instance: actions the old one accepted will never report.
        # Check the state again, like after our own start (one check per instance).
        instance = str((payload or {}).get("instanceId", ""))[:40]
        earlier = self.loop.accepted_by_other_than(instance)
        msg = new_message("RecoveryCheck", {"plcState": (payload or {}).get("plcState"),
                                            "hardwareStartedAt": (payload or {}).get("startedAt"),
                                            "acceptedByEarlier": earlier},
                          id=f"HardwareStarted:{instance}", actor=ev.HARDWARE)
        outcome = self.loop.submit(msg).wait(EVENT_WAIT_SECONDS)
        if outcome is None or outcome.status == "FAILED":
            raise RuntimeError("recovery check after a hardware restart not handled; requeued")


LineControllerService = line_controller_service()  # the default line's
