"""Turning successive pictures of the PLC into edge events.

The device port's ``read_state()`` is one consistent picture (the
``plc_state()`` RPC shape, built by services/hardware/device/modbus.py's
``state_picture`` for both protocols); :class:`SignalWatcher` compares each
picture with the previous one and returns the
signals to dispatch, once per edge: a slot's done flag rising, the dock's
arrival counter moving, a machine's fault register changing, the connection
going up or down, the robot's fault register changing. Its memory survives
reconnects, so a dropped link never repeats an event; on the very first read
after start-up, a done slot or a waiting pallet counts as an edge (the
line_controller may have missed it while the service was down), and so does
a machine in fault.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from services.hardware.device import PLC_IDENTITY_MISMATCH, DevicePort, PlcUnavailable
from services.hardware.device.modbus import read_state  # noqa: F401 (the Modbus picture, named here before)
from shared import events as ev
from shared.layout import Layout

Signal = tuple[str, dict[str, Any]]
log = logging.getLogger(__name__)
# A polled PLC (Modbus) is read at its port's rate while anything moves; a quiet
# one (the robot not BUSY, no machine or slot running, no edge and no action asked
# for BUSY_SECONDS) this often: its signals latch (done flags, the arrival counter,
# fault registers), so waiting costs a little latency on an idle line, no edge.
QUIET_POLL_SECONDS = 1.0
BUSY_SECONDS = 5.0
# The line_controller refuses a payload text longer than this (its payloads.MAX_TEXT),
# and with it the whole edge: a loss whose reason is cut still holds the line.
ERROR_TEXT_MAX = 200


def cut(text: str, limit: int = ERROR_TEXT_MAX) -> str:
    """``text`` within ``limit`` characters, an ellipsis saying it was cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


class SignalWatcher:
    """Edges from the port's pictures. :meth:`watch` waits for the port to say
    something changed (Modbus: its poll interval; OPC UA: a data-change
    notification), then :meth:`poll` reads the pictures since the last one."""

    def __init__(self, port: DevicePort, layout: Layout):
        self.port = port
        self.layout = layout
        self.connected: bool | None = None  # unknown until the first poll
        self.error: str | None = None  # why the PLC is not reached, as last told
        self._mismatch = False  # not reached because another PLC answers (PLC_IDENTITY_MISMATCH)
        # (done, jobId) per slot as last seen: a new piece done on the same slot is an
        # edge even when unload, load and its whole cycle fell between two polls.
        self._done: dict[tuple[str, int], tuple[bool, int | None]] = {}
        self._arrival_seq: int | None = None
        self._fault: dict[str, int | None] = {}  # machine → fault code as last seen
        self._robot_fault: int | None = None  # the robot's fault code as last seen
        # The last stamp of a link or robot edge: strictly increasing, so the
        # line_controller can drop an edge that reaches it after a later one.
        self._last_stamp: datetime | None = None
        self.polls = 0
        self._moving = False  # the last picture showed the robot or a machine at work
        self._busy_until = 0.0  # monotonic: polls at the port's rate until then
        self._next_poll = 0.0  # monotonic: a quiet polled PLC's next read

    def hurry(self) -> None:
        """An action was asked for: read at the port's rate again (its edges follow)."""
        self._busy_until, self._next_poll = time.monotonic() + BUSY_SECONDS, 0.0

    def watch(self, timeout: float = 1.0) -> list[Signal]:
        """The signals of the next change (or of none within ``timeout``)."""
        left = self._next_poll - time.monotonic()
        if left > 0:  # a quiet polled PLC: not read before its time
            time.sleep(min(left, timeout))
            if time.monotonic() < self._next_poll:
                return []
        self.port.wait_for_change(timeout)
        signals = self.poll()
        now = time.monotonic()
        if signals or self._moving:
            self._busy_until = now + BUSY_SECONDS
        polled = getattr(self.port, "protocol", None) != "opcua"  # OPC UA pushes its changes
        self._next_poll = now + QUIET_POLL_SECONDS if polled and now >= self._busy_until else 0.0
        return signals

    def poll(self) -> list[Signal]:
        self.polls += 1
        try:
            changes = self.port.state_changes()
        except PlcUnavailable as exc:
            changes = [exc]
        signals: list[Signal] = []
        for change in changes:  # pictures, and the link's losses between them, in order
            signals.extend(self._lost(change) if isinstance(change, PlcUnavailable) else self._edges(change))
        return signals

    def _lost(self, exc: PlcUnavailable) -> list[Signal]:
        self._moving = False
        self.error = exc.message
        # Another PLC at the address is news even while the line's own is away
        # (and its going is news too): the alarm says which it is.
        mismatch = exc.code == PLC_IDENTITY_MISMATCH
        if self.connected is False and mismatch == self._mismatch:
            return []
        self.connected, self._mismatch = False, mismatch
        if mismatch:
            log.error("PLC refused: %s", exc.message)
        else:
            log.warning("PLC connection lost: %s", exc.message)
        return [(ev.PLC_CONNECTION, {"connected": False, "error": cut(exc.message), "errorCode": exc.code,
                                     "observedAt": self._stamp(None)})]

    def _edges(self, state: dict[str, Any]) -> list[Signal]:
        signals: list[Signal] = []
        if self.connected is not True:
            self.connected, self.error, self._mismatch = True, None, False
            log.info("PLC connected at %s", self.port.address)
            # with what the PLC holds now: the line_controller checks it against its
            # records (a PLC that restarted forgot its cycles)
            signals.append((ev.PLC_CONNECTION, {"connected": True, "plcState": state,
                                                "observedAt": self._stamp(state["observedAt"])}))
        self._moving = state["robot"].get("state") == "BUSY" or any(
            machine.get("running") or any(slot.get("running") for slot in machine["slots"])
            for machine in state["equipment"])
        robot_fault = state["robot"]["fault"]
        if robot_fault != self._robot_fault:
            signals.append((ev.ROBOT_FAULT, {"fault": robot_fault, "observedAt": self._stamp(state["observedAt"])}))
        self._robot_fault = robot_fault
        dock = state["dock"]
        if dock["arrivals"] != self._arrival_seq and (self._arrival_seq is not None or dock["pieces"]):
            signals.append((ev.PALLET_ARRIVED, {"count": dock["pieces"], "observedAt": state["observedAt"]}))
        self._arrival_seq = dock["arrivals"]
        for machine in state["equipment"]:
            fault, seen = machine["fault"], self._fault.get(machine["id"])
            if fault != seen:
                signals.append((ev.MACHINE_FAULT, {"machineId": machine["id"], "fault": fault,
                                                   "observedAt": state["observedAt"]}))
            self._fault[machine["id"]] = fault
            inspection = self.layout.equipment_by_id(machine["id"]).inspection
            for slot in machine["slots"]:
                key = (machine["id"], slot["slotNo"])
                seen = (slot["done"], slot["jobId"])
                if slot["done"] and self._done.get(key) != seen:
                    signals.extend(self._done_signals(machine["id"], slot, inspection))
                self._done[key] = seen
        return signals

    def _stamp(self, observed_at: str | None) -> str:
        """When an edge was seen (a picture's time, or now for a loss), never earlier
        than the edge before it: a loss has no picture, and pictures buffered before
        it (OPC UA's notifications) may bear earlier times than the loss's "now"."""
        when = datetime.fromisoformat(observed_at) if observed_at else datetime.now(UTC)
        if self._last_stamp is not None and when <= self._last_stamp:
            when = self._last_stamp + timedelta(microseconds=1)
        self._last_stamp = when
        return when.isoformat()

    @staticmethod
    def _done_signals(machine_id: str, slot: dict, inspection: bool) -> list[Signal]:
        payload: dict[str, Any] = {"machineId": machine_id, "slotNo": slot["slotNo"]}
        if slot["jobId"]:
            payload["jobId"] = slot["jobId"]
        if not inspection:
            return [(ev.MACHINE_DONE, payload)]
        verdict = {**payload, "pass": bool(slot["pass"])}
        # the slot may be unloaded (MachineDone), and the verdict (InspectionResult)
        return [(ev.MACHINE_DONE, verdict), (ev.INSPECTION_RESULT, verdict)]
