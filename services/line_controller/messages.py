"""What the production event loop takes in.

Every input is an :class:`EventLoopMessage` (the seed's envelope: id, type,
payload, correlationId, createdAt, and an optional reply). Its payload is
parsed into one small frozen dataclass per message type, named for what it
asks (commands) or what happened (external events, worker results); a bad
payload raises :class:`ValidationError` naming the field, and changes nothing
(:mod:`.payloads` parses).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from shared import events as ev

from .payloads import ValidationError, instant, key, parse_payload, row_id

COMMAND = "command"
EXTERNAL = "external"
RESULT = "result"


@dataclass(frozen=True)
class EventLoopMessage:
    """One entry of the loop's inbox as it travels: ``type`` names the message class
    (MESSAGE_TYPES), ``payload`` is its wire form, ``actor`` who asked (commands)."""

    id: str
    type: str
    payload: dict
    correlation_id: str | None = None
    actor: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def category(self) -> str:
        return MESSAGE_TYPES[self.type].category

    def parse(self):
        """The payload parsed into its message class (one of the dataclasses below),
        once per envelope: an entrypoint that checks a command and the loop share the
        parse. Raises :class:`ValidationError` for an unknown type or a bad payload."""
        parsed = self.__dict__.get("_parsed")
        if parsed is None:
            cls = MESSAGE_TYPES.get(self.type)
            if cls is None:
                raise ValidationError("type", f"unknown message type {self.type!r}")
            parsed = parse_payload(cls, self.payload)
            object.__setattr__(self, "_parsed", parsed)  # a cache, not a field: frozen still
        return parsed


def split_actor(actor: str | None) -> tuple[str, str]:
    """``"holder|note"`` → ``(holder, note)``: the authenticated token holder the
    gateway names, and the caller's own free-text note (``X-Actor``), which is
    recorded but never taken as who acted."""
    holder, _, note = (actor or "").partition(ev.ACTOR_NOTE_SEPARATOR)
    return holder, note


def new_message(type_: str, payload: dict | None = None, *, id: str | None = None,
                correlation_id: str | None = None, actor: str | None = None) -> EventLoopMessage:
    if type_ not in MESSAGE_TYPES:
        raise ValidationError("type", f"unknown message type {type_!r}")
    return EventLoopMessage(id=id or uuid.uuid4().hex, type=type_, payload=dict(payload or {}),
                            correlation_id=correlation_id, actor=actor)


MESSAGE_TYPES: dict[str, type] = {}  # type name -> message class, filled by the decorators below


def _message_of(category: str):
    """A decorator: a frozen dataclass message of ``category``, registered by its name."""
    def register(cls):
        cls = dataclass(frozen=True)(cls)
        cls.category = category
        MESSAGE_TYPES[cls.__name__] = cls
        return cls
    return register


command = _message_of(COMMAND)
external_event = _message_of(EXTERNAL)
worker_result = _message_of(RESULT)


# -- commands -------------------------------------------------------------------------


@command
class CreateOrder:
    product_id: str = key("productId")
    quantity: int = key("quantity")
    priority: int = key("priority", 5)
    code: str | None = key("code", None)
    note: str | None = None

    def validate(self):
        if not 1 <= self.quantity <= 10000:
            raise ValidationError("quantity", "must be 1..10000")
        if not 0 <= self.priority <= 9:
            raise ValidationError("priority", "must be 0..9")


@dataclass(frozen=True)
class _OrderCommand:
    work_order_id: int = row_id("workOrderId")
    note: str | None = None


@command
class StartOrder(_OrderCommand):
    """CREATED → RUNNING."""


@command
class PauseOrder(_OrderCommand):
    """RUNNING → PAUSED."""


@command
class ResumeOrder(_OrderCommand):
    """PAUSED → RUNNING."""


@command
class CancelOrder(_OrderCommand):
    """Any order not yet finished → CANCELLED."""


@dataclass(frozen=True)
class _JobCommand:
    job_id: int = row_id("jobId")
    note: str | None = None


@command
class SuspendJob(_JobCommand):
    """Hold a job (SUSPENDED) until an operator resumes it."""


@command
class ResumeJob(_JobCommand):
    """SUSPENDED → the status it was held in."""


@command
class ReworkJob:
    job_id: int = row_id("jobId")
    step_index: int | None = key("stepIndex", None)
    note: str | None = None

    def validate(self):
        if self.step_index is not None and self.step_index < 0:
            raise ValidationError("stepIndex", "must be >= 0")


@command
class ConfirmRecovery:
    manual_action_ids: tuple[int, ...] | None = key("manualActionIds", None)
    note: str | None = None


@command
class ResolveManualAction:
    manual_action_id: int = row_id("manualActionId")
    resolution: str = key("resolution")
    note: str | None = None


@command
class AcknowledgeAlarm:
    alarm_id: int = row_id("alarmId")
    note: str | None = None


MAX_SHELVE_MINUTES = 1440  # ISA-18.2: a shelf is time-limited; a day at most


@command
class ShelveAlarm:
    alarm_id: int = row_id("alarmId")
    minutes: int = key("minutes")
    reason: str = key("reason")

    def validate(self):
        if not 1 <= self.minutes <= MAX_SHELVE_MINUTES:
            raise ValidationError("minutes", f"must be 1..{MAX_SHELVE_MINUTES}")


@command
class UnshelveAlarm:
    alarm_id: int = row_id("alarmId")
    note: str | None = None


# -- external events ----------------------------------------------------------------


@external_event
class MachineDone:
    machine_id: str = key("machineId")
    slot_no: int | None = key("slotNo", None)
    job_id: int | None = key("jobId", None)
    passed: bool | None = key("pass", None)


@external_event
class InspectionResult:
    machine_id: str = key("machineId")
    slot_no: int | None = key("slotNo", None)
    job_id: int | None = key("jobId", None)
    passed: bool | None = key("pass", None)
    details: dict | None = None


@external_event
class MachineFault:
    """The machine's PLC fault register changed: a code, or None once it is clear."""
    machine_id: str = key("machineId")
    fault: int | None = None
    observed_at: str | None = key("observedAt", None)

    def validate(self):
        instant("observedAt", self.observed_at)


@external_event
class PlcConnection:
    """The watcher's link to the PLC went down or came back; coming back, it
    carries what the PLC holds now (``plcState``), to check against the records.
    ``observedAt``: when the watcher saw the edge (an earlier edge arriving
    after a later one changes nothing)."""
    connected: bool = False
    error: str | None = None
    # Down because another PLC answers at the address: "PLC_IDENTITY_MISMATCH".
    error_code: str | None = key("errorCode", None)
    plc_state: dict | None = key("plcState", None)
    observed_at: str | None = key("observedAt", None)

    def validate(self):
        instant("observedAt", self.observed_at)


@external_event
class RobotFault:
    """The robot's fault register changed (an emergency stop holds it): a code, or None once clear."""
    fault: int | None = None
    observed_at: str | None = key("observedAt", None)

    def validate(self):
        instant("observedAt", self.observed_at)


@external_event
class PalletArrived:
    count: int = 1
    # When the hardware read the dock (its clock): an older reading never overrides a newer one.
    observed_at: str | None = key("observedAt", None)


@external_event
class StepTimeout:
    task_id: int = key("taskId")


@external_event
class RefillRequested:
    reason: str | None = None


@external_event
class ScheduleTick:
    pass


@external_event
class RecoveryCheck:
    """The loop's first message after a start: check the state in the DB against
    itself and the PLC (``plcState``: the hardware's ``plc_state()``, None when
    it did not answer)."""
    plc_state: dict | None = key("plcState", None)
    # After a hardware restart: only tasks started before this moment (ISO-8601)
    # went to the old instance; later ones belong to the new one and still report.
    hardware_started_at: str | None = key("hardwareStartedAt", None)
    # ... and of those, only the ones an earlier instance accepted may have started
    # (the rest wait in its queue for the new one, or were answered NOT_EXECUTED).
    accepted_by_earlier: tuple[str, ...] | None = key("acceptedByEarlier", None)
    # After the database was away: the last task there was when the hardware was
    # read; a later one started after that read (loop.outage_recheck) and still reports.
    tasks_up_to: int | None = key("tasksUpTo", None)

    def validate(self):
        instant("hardwareStartedAt", self.hardware_started_at)

    @property
    def hardware_started(self) -> datetime | None:
        return instant("hardwareStartedAt", self.hardware_started_at)


@external_event
class HardwareStopping:
    """A hardware instance stops cleanly: no new robot work until the next one starts."""
    instance_id: str = key("instanceId")
    started_at: str | None = key("startedAt", None)

    def validate(self):
        instant("startedAt", self.started_at)

    @property
    def started(self) -> datetime | None:
        return instant("startedAt", self.started_at)


# -- worker results: the hardware's answer to a task (correlation id = task id) --------


@dataclass(frozen=True)
class _ActionResult:
    correlation_id: str = key("correlationId")
    action: str | None = None
    action_id: int | None = key("actionId", None)


@dataclass(frozen=True)
class ActionSucceeded(_ActionResult):
    data: dict | None = None


@dataclass(frozen=True)
class ActionFailed(_ActionResult):
    error_code: str = key("errorCode", "PLC_ERROR")
    error_message: str | None = key("errorMessage", None)
    finished_at: str | None = key("finishedAt", None)


@worker_result
class RobotActionSucceeded(ActionSucceeded):
    pass


@worker_result
class RobotActionFailed(ActionFailed):
    pass


@worker_result
class ToolActionSucceeded(ActionSucceeded):
    pass


@worker_result
class ToolActionFailed(ActionFailed):
    pass


@worker_result
class MachineStartSucceeded(ActionSucceeded):
    pass


@worker_result
class MachineStartFailed(ActionFailed):
    pass


@worker_result
class MachineAbortSucceeded(ActionSucceeded):
    pass


@worker_result
class MachineAbortFailed(ActionFailed):
    pass


assert set(ev.WORKER_RESULTS) == {name for name, cls in MESSAGE_TYPES.items() if cls.category == RESULT}
