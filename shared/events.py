"""Names and payload shapes of what crosses a service boundary.

Both services and the gateway import these, so a renamed event or RPC is a
changed constant here, never a string drifting apart in two places. Payloads
are JSON objects with camelCase keys (the HTTP contract's convention).

Hardware → line_controller (nameko events dispatched by ``hardware``)
------------------------------------------------------------------------
Worker results, exactly one per accepted action, keyed by the caller's
correlation id (the line_controller's task id, as a string)::

    {"correlationId": "17", "action": "BUFFER_TO_EQUIPMENT", "actionId": 5,
     "durationMs": 812, "data": {...}}                       # *Succeeded
    {"correlationId": "17", "action": "...", "actionId": 5,
     "errorCode": "PLC_ERROR", "errorMessage": "..."}         # *Failed

PLC signals, once per edge (each may carry ``"eventId"``, unique per edge, which
the line_controller uses to recognise a redelivered event)::

    MachineDone      {"machineId": "MC1", "slotNo": 2?, "jobId": 41?, "pass": true?}
    InspectionResult {"machineId": "INSP1", "slotNo": 1?, "jobId": 41?, "pass": false,
                      "details": {...}?}
    PalletArrived    {"count": 4}
    PlcConnection    {"connected": false, "error": "..."}
                     {"connected": true, "plcState": {...}}  # plc_state() as just read
    RobotFault       {"fault": 8 | null, "observedAt": "..."}

line_controller → gateway (nameko event ``line_events``)
-------------------------------------------------------
One event per committed loop transaction: ``{"txId": 7, "events": [frame, ...]}``
where a frame is ``{"seq", "txId", "type", "at", "payload"}`` exactly as the
``event_log`` row (see ``shared.serialize.event_frame``).
"""

from __future__ import annotations

from dataclasses import dataclass

# -- service names ----------------------------------------------------------------

LINE_CONTROLLER = "line_controller"
HARDWARE = "hardware"
LINE_SEPARATOR = "@"  # neither a topic-key separator nor allowed in a line id


@dataclass(frozen=True)
class LineServices:
    """A line's service names on the transport. The default line (``line_id``
    None) keeps ``line_controller`` and ``hardware``, so a one-line deployment and
    everything queued in it are unchanged; another line's are
    ``line_controller@<lineId>`` and ``hardware@<lineId>``."""
    line_id: str | None = None

    @property
    def line_controller(self) -> str:
        return self._named(LINE_CONTROLLER)

    @property
    def hardware(self) -> str:
        return self._named(HARDWARE)

    def _named(self, service: str) -> str:
        return service if self.line_id is None else f"{service}{LINE_SEPARATOR}{self.line_id}"

    @classmethod
    def of_line(cls, line_id: str, default: bool) -> LineServices:
        return cls(None if default else line_id)

    @classmethod
    def of_service(cls, service_name: str) -> LineServices:
        """The names of the line whose service is called ``service_name``."""
        return cls(service_name.partition(LINE_SEPARATOR)[2] or None)

# -- hardware → line_controller: worker results ---------------------------------

ROBOT_ACTION_SUCCEEDED = "RobotActionSucceeded"
ROBOT_ACTION_FAILED = "RobotActionFailed"
TOOL_ACTION_SUCCEEDED = "ToolActionSucceeded"
TOOL_ACTION_FAILED = "ToolActionFailed"
MACHINE_START_SUCCEEDED = "MachineStartSucceeded"
MACHINE_START_FAILED = "MachineStartFailed"
# An aborted cycle (the pieces stay in their slots, nothing reports done).
MACHINE_ABORT_SUCCEEDED = "MachineAbortSucceeded"
MACHINE_ABORT_FAILED = "MachineAbortFailed"

WORKER_RESULTS = (
    ROBOT_ACTION_SUCCEEDED, ROBOT_ACTION_FAILED,
    TOOL_ACTION_SUCCEEDED, TOOL_ACTION_FAILED,
    MACHINE_START_SUCCEEDED, MACHINE_START_FAILED,
    MACHINE_ABORT_SUCCEEDED, MACHINE_ABORT_FAILED,
)

# -- hardware → line_controller: PLC signals --------------------------------------

MACHINE_DONE = "MachineDone"
INSPECTION_RESULT = "InspectionResult"
PALLET_ARRIVED = "PalletArrived"
PLC_CONNECTION = "PlcConnection"
# A machine's fault register changed: ``{"machineId", "fault": code | None, "observedAt"}``.
MACHINE_FAULT = "MachineFault"

# The robot's fault register changed (an emergency stop holds it): ``{"fault": code | None, "observedAt"}``.
ROBOT_FAULT = "RobotFault"

PLC_SIGNALS = (MACHINE_DONE, INSPECTION_RESULT, PALLET_ARRIVED, PLC_CONNECTION, MACHINE_FAULT, ROBOT_FAULT)

# Dispatched once by every hardware service start: ``{"instanceId", "plcState"}``.
# Actions the previous instance had accepted will never report: the
# line_controller checks its state again (a RecoveryCheck) and puts every
# action still RUNNING before an operator.
HARDWARE_STARTED = "HardwareStarted"
# Dispatched by a hardware service on a clean stop, before it answers its queued
# actions NOT_EXECUTED: ``{"instanceId", "startedAt"}``. The line_controller sends
# no new robot work until the next instance's HardwareStarted.
HARDWARE_STOPPING = "HardwareStopping"
# The error code of an accepted action that never reached the PLC (nothing moved).
NOT_EXECUTED = "NOT_EXECUTED"
# The PLC never acknowledged the action (unreachable, or the robot stopped):
# it did not happen; the line_controller sends it again once the PLC answers.
NOT_SENT = "NOT_SENT"
# The PLC acknowledged the action, then the connection broke and the PLC came
# back without it (restarted): whether it happened is unknown; asked at once.
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"

# Robot action codes (the ``action`` field of results; the hardware RPC names).
DOCK_TO_BUFFER = "DOCK_TO_BUFFER"
BUFFER_TO_EQUIPMENT = "BUFFER_TO_EQUIPMENT"
EQUIPMENT_TO_BUFFER = "EQUIPMENT_TO_BUFFER"
SWAP = "SWAP"
SCAN = "SCAN"
MARK = "MARK"
START_MACHINE = "START_MACHINE"
ABORT_CYCLE = "ABORT_CYCLE"  # stop a machine's running cycles (one overdue)
BUFFER_TO_DOCK = "BUFFER_TO_DOCK"  # a finished piece leaves the cell

# RPC context data (a nameko header) naming the line_controller instance that sends
# a hardware request: the hardware fences out instances that have been replaced.
CONTROLLER_CONTEXT_KEY = "linectl_controller"

# Error codes a *Failed result may carry.
HW_ERROR_CODES = (
    "MODBUS_TIMEOUT",       # the PLC did not answer a read/write in time
    "CONNECTION_REFUSED",   # no PLC at the address / connection lost
    "PLC_ERROR",            # the PLC reported an error code for the action
    "SOURCE_EMPTY",         # the PLC found no piece at the source (PLC error 1): nothing moved
    "ACTION_TIMEOUT",       # accepted, but no done/error within the action's deadline
    "REJECTED",             # the request itself was invalid (unknown machine, slot, ...)
    NOT_SENT,               # never acknowledged by the PLC: nothing moved
    OUTCOME_UNKNOWN,        # acknowledged, then the PLC was lost: nobody knows
    "PLC_IDENTITY_MISMATCH",  # a PLC answers, not the line's own (plc.identity): nothing sent to it
)

# -- line_controller → gateway --------------------------------------------------------

LINE_EVENTS = "line_events"

# A command's ``actor`` is "holder" or "holder|note": the authenticated token
# holder the gateway names, then the caller's own free-text note (X-Actor),
# recorded but never taken as who acted.
ACTOR_NOTE_SEPARATOR = "|"
