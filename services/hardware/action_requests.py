"""Action requests and results of the hardware service: small frozen values,
validated against the layout, free of nameko."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.hardware import plc as P
from shared import events as ev
from shared.layout import Layout

MAX_JOB_ID = 2**32 - 1


class Rejected(ValueError):
    """The request is invalid: answered with ``accepted: false``, no event."""


@dataclass(frozen=True)
class RobotCommand:
    action: str
    code: int
    src: tuple[int, int]
    dst: tuple[int, int]
    aux_slot: int = 0
    job_id: int = 0
    job2_id: int = 0
    text: str = ""


@dataclass(frozen=True)
class MachineStart:
    equipment_id: str
    jobs: dict[int, int] = field(default_factory=dict)  # slotNo -> jobId; empty: every loaded slot


@dataclass(frozen=True)
class MachineAbort:
    """Abort every running cycle of a machine (its pieces stay in their slots)."""
    equipment_id: str


@dataclass(frozen=True)
class ActionRequest:
    correlation_id: str
    action_id: int
    command: RobotCommand | MachineStart | MachineAbort

    @property
    def action(self) -> str:
        if isinstance(self.command, MachineAbort):
            return ev.ABORT_CYCLE
        return self.command.action if isinstance(self.command, RobotCommand) else ev.START_MACHINE


@dataclass(frozen=True)
class ActionResult:
    request: ActionRequest
    ok: bool
    duration_ms: int
    data: dict[str, Any] = field(default_factory=dict)
    error_code: str | None = None
    error_message: str | None = None
    # When the outcome was known (this process's clock, ISO-8601).
    finished_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def event_type(self) -> str:
        kind = self.request.action
        if kind == ev.START_MACHINE:
            return ev.MACHINE_START_SUCCEEDED if self.ok else ev.MACHINE_START_FAILED
        if kind == ev.ABORT_CYCLE:
            return ev.MACHINE_ABORT_SUCCEEDED if self.ok else ev.MACHINE_ABORT_FAILED
        if kind in (ev.SCAN, ev.MARK):
            return ev.TOOL_ACTION_SUCCEEDED if self.ok else ev.TOOL_ACTION_FAILED
        return ev.ROBOT_ACTION_SUCCEEDED if self.ok else ev.ROBOT_ACTION_FAILED

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "correlationId": self.request.correlation_id,
            "action": self.request.action,
            "actionId": self.request.action_id,
            "durationMs": self.duration_ms,
            "finishedAt": self.finished_at,
        }
        if self.ok:
            out["data"] = self.data
        else:
            out["errorCode"] = self.error_code
            out["errorMessage"] = (self.error_message or "")[:200]  # the loop's text limit
        return out


# -- validation ------------------------------------------------------------------


def correlation(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
        raise Rejected("correlation_id: a non-empty string is required")
    text = str(value)
    if len(text) > 200:
        raise Rejected("correlation_id: longer than 200 characters")
    return text


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        else:
            raise Rejected(f"{name}: expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise Rejected(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


def _job(name: str, value: Any) -> int:
    return 0 if value is None else _int(name, value, 1, MAX_JOB_ID)


class CommandBuilder:
    """Turns RPC arguments into commands, naming the first bad argument."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.map = layout.plc

    def buffer_slot(self, name: str, value: Any) -> tuple[int, int]:
        return self.map.buffer_station, _int(name, value, 1, self.layout.buffer_slots)

    def equipment_slot(self, equipment_id: Any, slot: Any) -> tuple[int, int]:
        try:
            regs = self.map.for_equipment(str(equipment_id))
        except KeyError:
            raise Rejected(f"equipment_id: no equipment {equipment_id!r} in the layout") from None
        return regs.station, _int("equipment_slot", slot, 1, regs.slots)

    def dock_to_buffer(self, slot_no, job_id=None) -> RobotCommand:
        return RobotCommand(ev.DOCK_TO_BUFFER, P.CMD_DOCK_TO_BUFFER, (self.map.dock_station, 0),
                            self.buffer_slot("slot_no", slot_no), job_id=_job("job_id", job_id))

    def buffer_to_dock(self, slot_no, job_id=None) -> RobotCommand:
        return RobotCommand(ev.BUFFER_TO_DOCK, P.CMD_BUFFER_TO_DOCK, self.buffer_slot("slot_no", slot_no),
                            (self.map.dock_station, 0), job_id=_job("job_id", job_id))

    def buffer_to_equipment(self, slot_no, equipment_id, equipment_slot, job_id=None) -> RobotCommand:
        return RobotCommand(ev.BUFFER_TO_EQUIPMENT, P.CMD_BUFFER_TO_EQUIPMENT,
                            self.buffer_slot("slot_no", slot_no),
                            self.equipment_slot(equipment_id, equipment_slot), job_id=_job("job_id", job_id))

    def equipment_to_buffer(self, equipment_id, equipment_slot, slot_no, job_id=None) -> RobotCommand:
        return RobotCommand(ev.EQUIPMENT_TO_BUFFER, P.CMD_EQUIPMENT_TO_BUFFER,
                            self.equipment_slot(equipment_id, equipment_slot),
                            self.buffer_slot("slot_no", slot_no), job_id=_job("job_id", job_id))

    def swap(self, equipment_id, equipment_slot, unload_to_slot, load_from_slot,
             unload_job_id=None, load_job_id=None) -> RobotCommand:
        unload = self.buffer_slot("unload_to_slot", unload_to_slot)
        load = self.buffer_slot("load_from_slot", load_from_slot)
        if unload == load:
            raise Rejected("unload_to_slot and load_from_slot must differ")
        return RobotCommand(ev.SWAP, P.CMD_SWAP, self.equipment_slot(equipment_id, equipment_slot),
                            unload, aux_slot=load[1], job_id=_job("unload_job_id", unload_job_id),
                            job2_id=_job("load_job_id", load_job_id))

    def scan(self, slot_no, job_id=None) -> RobotCommand:
        return RobotCommand(ev.SCAN, P.CMD_SCAN, self.buffer_slot("slot_no", slot_no), (0, 0),
                            job_id=_job("job_id", job_id))

    def mark(self, slot_no, text, job_id=None) -> RobotCommand:
        if not isinstance(text, str) or not text.strip():
            raise Rejected("text: a non-empty string is required")
        if not text.isascii() or not text.isprintable():
            raise Rejected("text: printable ASCII only")
        if len(text) > P.TEXT_MAX:
            raise Rejected(f"text: at most {P.TEXT_MAX} characters")
        return RobotCommand(ev.MARK, P.CMD_MARK, self.buffer_slot("slot_no", slot_no), (0, 0),
                            job_id=_job("job_id", job_id), text=text)

    def abort_cycle(self, equipment_id) -> MachineAbort:
        try:
            regs = self.map.for_equipment(str(equipment_id))
        except KeyError:
            raise Rejected(f"equipment_id: no equipment {equipment_id!r} in the layout") from None
        return MachineAbort(regs.equipment_id)

    def start_machine(self, equipment_id, jobs=None) -> MachineStart:
        try:
            regs = self.map.for_equipment(str(equipment_id))
        except KeyError:
            raise Rejected(f"equipment_id: no equipment {equipment_id!r} in the layout") from None
        if jobs is None:
            jobs = {}
        if not isinstance(jobs, dict):
            raise Rejected("jobs: expected an object {slotNo: jobId}")
        parsed = {}
        for slot, job in jobs.items():
            parsed[_int("jobs slotNo", slot, 1, regs.slots)] = _job("jobs jobId", job)
        return MachineStart(regs.equipment_id, parsed)
