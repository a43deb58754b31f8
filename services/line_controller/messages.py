"""What the production event loop takes in.

Every input is an :class:`EventLoopMessage` (the seed's envelope: id, type,
payload, correlationId, createdAt, and an optional reply). Its payload is
parsed into one small frozen dataclass per message type, named for what it
asks (commands) or what happened (external events, worker results); a bad
payload raises :class:`ValidationError` naming the field, and changes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared import events as ev

COMMAND = "command"
EXTERNAL = "external"
RESULT = "result"

MAX_TEXT = 200


class ValidationError(ValueError):
    """A message payload is malformed; ``field`` names the culprit."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class EventLoopMessage:
    id: str
    type: str
    payload: dict
    correlation_id: str | None = None
    actor: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def category(self) -> str:
        return MESSAGE_TYPES[self.type][1]

    def parse(self):
        """The typed message (one of the dataclasses below)."""
        try:
            cls, _ = MESSAGE_TYPES[self.type]
        except KeyError:
            raise ValidationError("type", f"unknown message type {self.type!r}") from None
        return parse_payload(cls, self.payload)


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


# -- payload parsing ------------------------------------------------------------------


def _check(name: str, value: Any, tp) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check(name, value, inner[0])
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            # ids arrive as strings from some callers (URL paths)
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)
            raise ValidationError(name, "expected an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ValidationError(name, "expected true or false")
        return value
    if tp is str:
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(name, "expected a non-empty string")
        if len(value) > MAX_TEXT:
            raise ValidationError(name, f"longer than {MAX_TEXT} characters")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise ValidationError(name, "expected an object")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValidationError(name, "expected a list")
        return tuple(_check(f"{name}[{i}]", v, typing.get_args(tp)[0]) for i, v in enumerate(value))
    raise TypeError(tp)


@functools.cache
def _fields(cls) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def parse_payload(cls, payload):
    if not isinstance(payload, dict):
        raise ValidationError("payload", "expected an object")
    values = {}
    for f, hint in _fields(cls):
        key = f.metadata.get("key", f.name)
        if key in payload and payload[key] is not None:
            values[f.name] = _check(key, payload[key], hint)
        elif f.default is dataclasses.MISSING:
            raise ValidationError(key, "required")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate:
        validate()
    return obj


def _key(name: str, default=dataclasses.MISSING):
    return field(default=default, metadata={"key": name})


def _instant(name: str, value: str | None) -> datetime | None:
    """An ISO-8601 instant with its offset (a hardware service's clock), or None."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(name, "expected an ISO-8601 time") from None
    if when.tzinfo is None:
        raise ValidationError(name, "expected an ISO-8601 time with its UTC offset")
    return when


def _positive(name: str, value: int | None):
    if value is not None and value < 1:
        raise ValidationError(name, "must be >= 1")


# -- commands -------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateOrder:
    product_id: str = _key("productId")
    quantity: int = _key("quantity")
    priority: int = _key("priority", 5)
    code: str | None = _key("code", None)
    note: str | None = None

    def validate(self):
        if not 1 <= self.quantity <= 10000:
            raise ValidationError("quantity", "must be 1..10000")
        if not 0 <= self.priority <= 9:
            raise ValidationError("priority", "must be 0..9")


@dataclass(frozen=True)
class _OrderCommand:
    work_order_id: int = _key("workOrderId")
    note: str | None = None

    def validate(self):
        _positive("workOrderId", self.work_order_id)


class StartOrder(_OrderCommand):
    pass


class PauseOrder(_OrderCommand):
    pass


class ResumeOrder(_OrderCommand):
    pass


class CancelOrder(_OrderCommand):
    pass


@dataclass(frozen=True)
class _JobCommand:
    job_id: int = _key("jobId")
    note: str | None = None

    def validate(self):
        _positive("jobId", self.job_id)


class SuspendJob(_JobCommand):
    pass


class ResumeJob(_JobCommand):
    pass


@dataclass(frozen=True)
class ReworkJob:
    job_id: int = _key("jobId")
    step_index: int | None = _key("stepIndex", None)
    note: str | None = None

    def validate(self):
        _positive("jobId", self.job_id)
        if self.step_index is not None and self.step_index < 0:
            raise ValidationError("stepIndex", "must be >= 0")


@dataclass(frozen=True)
class ResolveManualAction:
    manual_action_id: int = _key("manualActionId")
    resolution: str = _key("resolution")
    note: str | None = None

    def validate(self):
        _positive("manualActionId", self.manual_action_id)


@dataclass(frozen=True)
class ConfirmRecovery:
    manual_action_ids: tuple[int, ...] | None = _key("manualActionIds", None)
    note: str | None = None


@dataclass(frozen=True)
class AcknowledgeAlarm:
    alarm_id: int = _key("alarmId")
    note: str | None = None

    def validate(self):
        _positive("alarmId", self.alarm_id)


MAX_SHELVE_MINUTES = 1440  # ISA-18.2: a shelf is time-limited; a day at most


@dataclass(frozen=True)
class ShelveAlarm:
    alarm_id: int = _key("alarmId")
    minutes: int = _key("minutes")
    reason: str = _key("reason")

    def validate(self):
        _positive("alarmId", self.alarm_id)
        if not 1 <= self.minutes <= MAX_SHELVE_MINUTES:
            raise ValidationError("minutes", f"must be 1..{MAX_SHELVE_MINUTES}")


@dataclass(frozen=True)
class UnshelveAlarm:
    alarm_id: int = _key("alarmId")
    note: str | None = None

    def validate(self):
        _positive("alarmId", self.alarm_id)


# -- external events ----------------------------------------------------------------


@dataclass(frozen=True)
class MachineDone:
    machine_id: str = _key("machineId")
    slot_no: int | None = _key("slotNo", None)
    job_id: int | None = _key("jobId", None)
    passed: bool | None = _key("pass", None)


@dataclass(frozen=True)
class InspectionResult:
    machine_id: str = _key("machineId")
    slot_no: int | None = _key("slotNo", None)
    job_id: int | None = _key("jobId", None)
    passed: bool | None = _key("pass", None)
    details: dict | None = None


@dataclass(frozen=True)
class PalletArrived:
    count: int = 1
    # When the hardware read the dock (its clock): an older reading never overrides a newer one.
    observed_at: str | None = _key("observedAt", None)


@dataclass(frozen=True)
class MachineFault:
    """The machine's PLC fault register changed: a code, or None once it is clear."""
    machine_id: str = _key("machineId")
    fault: int | None = None
    observed_at: str | None = _key("observedAt", None)

    def validate(self):
        _instant("observedAt", self.observed_at)


@dataclass(frozen=True)
class StepTimeout:
    task_id: int = _key("taskId")


@dataclass(frozen=True)
class RefillRequested:
    reason: str | None = None


@dataclass(frozen=True)
class ScheduleTick:
    pass


@dataclass(frozen=True)
class RecoveryCheck:
    """The loop's first message after a start: check the state in the DB against
    itself and the PLC (``plcState``: the hardware's ``plc_state()``, None when
    it did not answer)."""
    plc_state: dict | None = _key("plcState", None)
    # After a hardware restart: only tasks started before this moment (ISO-8601)
    # went to the old instance; later ones belong to the new one and still report.
    hardware_started_at: str | None = _key("hardwareStartedAt", None)
    # ... and of those, only the ones an earlier instance accepted may have started
    # (the rest wait in its queue for the new one, or were answered NOT_EXECUTED).
    accepted_by_earlier: tuple[str, ...] | None = _key("acceptedByEarlier", None)

    def validate(self):
        _instant("hardwareStartedAt", self.hardware_started_at)

    @property
    def hardware_started(self) -> datetime | None:
        return _instant("hardwareStartedAt", self.hardware_started_at)


@dataclass(frozen=True)
class HardwareStopping:
    """A hardware instance stops cleanly: no new robot work until the next one starts."""
    instance_id: str = _key("instanceId")
    started_at: str | None = _key("startedAt", None)

    def validate(self):
        _instant("startedAt", self.started_at)

    @property
    def started(self) -> datetime | None:
        return _instant("startedAt", self.started_at)


# -- worker results -------------------------------------------------------------------


@dataclass(frozen=True)
class _Succeeded:
    correlation_id: str = _key("correlationId")
    action: str | None = None
    action_id: int | None = _key("actionId", None)
    data: dict | None = None


@dataclass(frozen=True)
class _Failed:
    correlation_id: str = _key("correlationId")
    action: str | None = None
    action_id: int | None = _key("actionId", None)
    error_code: str = _key("errorCode", "PLC_ERROR")
    error_message: str | None = _key("errorMessage", None)
    finished_at: str | None = _key("finishedAt", None)


class RobotActionSucceeded(_Succeeded):
    pass


class RobotActionFailed(_Failed):
    pass


class ToolActionSucceeded(_Succeeded):
    pass


class ToolActionFailed(_Failed):
    pass


class MachineStartSucceeded(_Succeeded):
    pass


class MachineStartFailed(_Failed):
    pass


# The frozen subclasses above need the decorator too (dataclass inheritance).
for _cls in (StartOrder, PauseOrder, ResumeOrder, CancelOrder, SuspendJob, ResumeJob,
             RobotActionSucceeded, RobotActionFailed, ToolActionSucceeded, ToolActionFailed,
             MachineStartSucceeded, MachineStartFailed):
    dataclass(frozen=True)(_cls)

COMMANDS = (CreateOrder, StartOrder, PauseOrder, ResumeOrder, CancelOrder, SuspendJob, ResumeJob,
            ReworkJob, ConfirmRecovery, ResolveManualAction, AcknowledgeAlarm, ShelveAlarm,
            UnshelveAlarm)
EXTERNAL_EVENTS = (MachineDone, InspectionResult, MachineFault, PalletArrived, StepTimeout, RefillRequested,
                   ScheduleTick, RecoveryCheck, HardwareStopping)
WORKER_RESULTS = (RobotActionSucceeded, RobotActionFailed, ToolActionSucceeded, ToolActionFailed,
                  MachineStartSucceeded, MachineStartFailed)

MESSAGE_TYPES: dict[str, tuple[type, str]] = {
    **{c.__name__: (c, COMMAND) for c in COMMANDS},
    **{c.__name__: (c, EXTERNAL) for c in EXTERNAL_EVENTS},
    **{c.__name__: (c, RESULT) for c in WORKER_RESULTS},
}
assert set(ev.WORKER_RESULTS) == {c.__name__ for c in WORKER_RESULTS}
COMMAND_TYPES = tuple(c.__name__ for c in COMMANDS)
