"""Reading the whole PLC state, and turning successive reads into edge events.

:func:`read_state` is one consistent picture (the ``plc_state()`` RPC shape);
:class:`SignalWatcher` compares it with the previous picture and returns the
signals to dispatch, once per edge: a slot's done flag rising, the dock's
arrival counter moving, a machine's fault register changing, the connection
going up or down. Its memory survives
reconnects, so a dropped link never repeats an event; on the very first read
after start-up, a done slot or a waiting pallet counts as an edge (the
line_controller may have missed it while the service was down), and so does
a machine in fault.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from services.hardware import plc as P
from services.hardware.plc import PlcLink, PlcUnavailable
from shared import events as ev
from shared.layout import Layout

Signal = tuple[str, dict[str, Any]]
log = logging.getLogger(__name__)


def read_state(link: PlcLink, layout: Layout) -> dict[str, Any]:
    """The PLC's state per machine and slot, robot, dock and buffer."""
    m = layout.plc
    ack, state, done_id, error = link.read(m.robot_base + P.R_ACK_ID, 4)
    pieces, arrival_seq = link.read(m.dock_base, 2)
    buffer = link.read(m.buffer_base, layout.buffer_slots)
    equipment = []
    for regs in m.equipment:
        spec = layout.equipment_by_id(regs.equipment_id)
        block = link.read(regs.base, regs.size)
        slots = []
        for n in range(1, regs.slots + 1):
            s = block[8 + 8 * (n - 1):8 * (n + 1)]
            job = P.join_u32(s[P.S_JOB_ID], s[P.S_JOB_ID + 1])
            slot = {"slotNo": n, "occupied": bool(s[P.S_OCCUPIED]), "running": bool(s[P.S_RUNNING]),
                    "done": bool(s[P.S_DONE]), "jobId": job or None}
            if spec.inspection:
                slot["pass"] = {P.RESULT_PASS: True, P.RESULT_FAIL: False}.get(s[P.S_RESULT])
            slots.append(slot)
        equipment.append({"id": regs.equipment_id, "running": bool(block[P.M_RUNNING]),
                          "fault": block[P.M_FAULT] or None, "slots": slots})
    return {
        "connected": True,
        # When the registers were read (this process's clock): the line_controller
        # keeps the newest of several observations of the dock.
        "observedAt": datetime.now(UTC).isoformat(),
        "robot": {"state": ("IDLE", "BUSY", "DONE", "ERROR")[state] if state < 4 else str(state),
                  "ackId": ack, "doneId": done_id, "errorCode": error or None},
        "dock": {"pieces": pieces, "arrivals": arrival_seq},
        "buffer": [{"slotNo": i + 1, "occupied": bool(v)} for i, v in enumerate(buffer)],
        "equipment": equipment,
    }


class SignalWatcher:
    def __init__(self, link: PlcLink, layout: Layout):
        self.link = link
        self.layout = layout
        self.connected: bool | None = None  # unknown until the first poll
        # (done, jobId) per slot as last seen: a new piece done on the same slot is an
        # edge even when unload, load and its whole cycle fell between two polls.
        self._done: dict[tuple[str, int], tuple[bool, int | None]] = {}
        self._arrival_seq: int | None = None
        self._fault: dict[str, int | None] = {}  # machine → fault code as last seen
        self.polls = 0

    def poll(self) -> list[Signal]:
        self.polls += 1
        try:
            state = read_state(self.link, self.layout)
        except PlcUnavailable as exc:
            if self.connected is not False:
                self.connected = False
                log.warning("PLC connection lost: %s", exc.message)
                return [(ev.PLC_CONNECTION, {"connected": False, "error": exc.message})]
            return []
        signals: list[Signal] = []
        if self.connected is not True:
            self.connected = True
            log.info("PLC connected at %s", self.link.address)
            signals.append((ev.PLC_CONNECTION, {"connected": True}))
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
