"""A host's side of deploy/REGISTER_MAP.md for the PLC tests: the robot and
machine handshakes over Modbus, with the offsets of services.hardware.plc (the
ones the hardware service uses), so that a PLC that reads the map otherwise
fails the tests."""

from __future__ import annotations

import itertools

from services.hardware import plc as P
from services.hardware.plc import PlcLink, PlcUnavailable
from shared.layout import Layout
from tests.support.waiting import wait_for


class RobotMoves:
    """The robot moves and their ending, the same over any protocol: a host gives
    ``send()`` (a robot command, its action id back) and ``robot()`` (the robot's
    side: fault, ack, state, done, error), and ``self.map`` (the layout's plc map)."""

    def finished(self, action_id: int, timeout: float = 10.0) -> dict:
        """The robot block once ``action_id`` is done or failed."""
        return wait_for(lambda: (lambda s: s if s["done"] == action_id else None)(self.robot()), timeout,
                        message=f"robot action {action_id} finishing")

    def dock_to_buffer(self, slot: int) -> int:
        return self.send(P.CMD_DOCK_TO_BUFFER, (self.map.dock_station, 0), (self.map.buffer_station, slot))

    def buffer_to_machine(self, slot: int, equipment_id: str, machine_slot: int, job: int) -> int:
        station = self.map.for_equipment(equipment_id).station
        return self.send(P.CMD_BUFFER_TO_EQUIPMENT, (self.map.buffer_station, slot), (station, machine_slot), job=job)

    def machine_to_buffer(self, equipment_id: str, machine_slot: int, slot: int) -> int:
        station = self.map.for_equipment(equipment_id).station
        return self.send(P.CMD_EQUIPMENT_TO_BUFFER, (station, machine_slot), (self.map.buffer_station, slot))

    def ok(self, action_id: int) -> None:
        state = self.finished(action_id)
        assert (state["state"], state["error"]) == (P.ROBOT_DONE, 0), state

    def reset_slots(self, equipment_id: str) -> list[dict]:
        """What a restarted PLC shows: the robot's and the machine's registers at
        zero (checked here); the machine's slots, to check what they still hold."""
        assert self.robot() == {"fault": 0, "ack": 0, "state": 0, "done": 0, "error": 0}
        machine = self.machine(equipment_id)
        assert {k: v for k, v in machine.items() if k != "slots"} == {
            "start_id": 0, "ack": 0, "error": 0, "running": 0, "fault": 0, "abort_id": 0, "abort_ack": 0}
        return machine["slots"]


class PlcHost(RobotMoves):
    SLOT_FIELDS = ("occupied", "done", "result", "job", "running", "start")  # what machine() shows per slot

    def __init__(self, layout: Layout, host: str, port: int):
        self.layout, self.map = layout, layout.plc
        self.link = PlcLink(host, port, layout.plc.unit_id, timeout=5.0)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.link.close()

    # -- robot ---------------------------------------------------------------

    def robot(self) -> dict:
        """The PLC's side of the robot block."""
        r = self.map.robot_base
        regs = self.link.read(r, P.R_TEXT_IN)
        return {"fault": regs[P.R_FAULT], "ack": regs[P.R_ACK_ID], "state": regs[P.R_STATE],
                "done": regs[P.R_DONE_ID], "error": regs[P.R_ERROR_CODE]}

    def send(self, code: int, src: tuple[int, int] = (0, 0), dst: tuple[int, int] = (0, 0),
             aux_slot: int = 0, job: int = 0, job2: int = 0) -> int:
        """Write a robot command and strobe it; returns its action id."""
        action_id = next(self._ids)
        r = self.map.robot_base
        self.link.write(r + P.R_CMD_CODE, [code, *src, *dst, aux_slot, *P.split_u32(job), *P.split_u32(job2)])
        self.link.write(r + P.R_CMD_ID, [action_id])
        return action_id

    # -- machines ------------------------------------------------------------

    def machine(self, equipment_id: str) -> dict:
        e = self.map.for_equipment(equipment_id)
        head = self.link.read(e.base, 8)
        slots = []
        for n in range(e.slots):
            s = self.link.read(e.base + 8 + 8 * n, 8)
            slots.append({"occupied": s[P.S_OCCUPIED], "done": s[P.S_DONE], "result": s[P.S_RESULT],
                          "job": P.join_u32(s[P.S_JOB_ID], s[P.S_JOB_ID + 1]), "running": s[P.S_RUNNING],
                          "start": s[P.S_START]})
        return {"start_id": head[P.M_START_ID], "ack": head[P.M_ACK_ID], "error": head[P.M_ERROR_CODE],
                "running": head[P.M_RUNNING], "fault": head[P.M_FAULT], "abort_id": head[P.M_ABORT_ID],
                "abort_ack": head[P.M_ABORT_ACK_ID], "slots": slots}

    def start(self, equipment_id: str, slots: dict[int, int] | None = None) -> dict:
        """Start the machine (``slots``: slot no → job id, flagged START); returns
        the machine block once the start is answered."""
        e = self.map.for_equipment(equipment_id)
        for slot_no, job in (slots or {}).items():
            s = e.base + 8 + 8 * (slot_no - 1)
            self.link.write(s + P.S_JOB_ID, P.split_u32(job))
            self.link.write(s + P.S_START, [1])
        action_id = next(self._ids)
        self.link.write(e.base + P.M_START_ID, [action_id])
        return wait_for(lambda: (lambda m: m if m["ack"] == action_id else None)(self.machine(equipment_id)),
                        10, message=f"{equipment_id} answering start {action_id}")

    def abort(self, equipment_id: str) -> dict:
        """The abort handshake; returns the machine block once answered."""
        e = self.map.for_equipment(equipment_id)
        action_id = next(self._ids)
        self.link.write(e.base + P.M_ABORT_ID, [action_id])
        return wait_for(lambda: (lambda m: m if m["abort_ack"] == action_id else None)(self.machine(equipment_id)),
                        10, message=f"{equipment_id} answering abort {action_id}")

    # -- dock and buffer -----------------------------------------------------

    def dock(self) -> tuple[int, int]:
        pieces, seq = self.link.read(self.map.dock_base + P.D_PIECES, 2)
        return pieces, seq

    def buffer(self) -> list[int]:
        return self.link.read(self.map.buffer_base, self.layout.buffer_slots)

    def reachable(self) -> bool:
        try:
            self.link.read(self.map.dock_base, 1)
        except PlcUnavailable:
            return False
        return True
