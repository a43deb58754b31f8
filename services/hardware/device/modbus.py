"""The Modbus TCP driver of the device port: the handshakes of
deploy/REGISTER_MAP.md over holding registers (:mod:`services.hardware.plc`
holds the offsets and the link).

Modbus cannot notify: the state is read whole on every :meth:`read_state`, and
:meth:`wait_for_change` is the poll interval.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import eventlet

from services.hardware import plc as P
from services.hardware.device.identity import IdentityCheck
from services.hardware.device.port import (
    LINK_ERRORS,
    PLC_IDENTITY_MISMATCH,
    DevicePort,
    MachineAnswer,
    PlcUnavailable,
    RobotStatus,
)
from services.hardware.plc import PlcLink
from shared.layout import Layout


class ModbusPort(DevicePort):
    protocol = "modbus"

    def __init__(self, link: PlcLink, layout: Layout, poll_interval: float = 0.1,
                 identity: IdentityCheck | None = None):
        if layout.plc is None:
            raise ValueError("the line layout has no plc: register map (see deploy/REGISTER_MAP.md)")
        self.link = link
        self.layout = layout
        self.map = layout.plc
        self.poll_interval = poll_interval
        self.identity = identity
        if identity is not None:  # every connection is checked before it serves a request
            link.on_connect = self._check_identity
            # a refused PLC is tried again after a poll interval, then less and less often
            link.refusal_backoff = (poll_interval, max(poll_interval, link.refusal_backoff[1]))

    def _check_identity(self, read) -> None:
        identity, version = read_identity(read, self.map.identity_base)
        self.identity.check(identity, version)

    @property
    def address(self) -> str:
        return self.link.address

    def robot_status(self) -> RobotStatus:
        fault, ack, state, done, error = self.link.read(self.map.robot_base + P.R_FAULT, 5)
        return RobotStatus(fault, ack, state, done, error)

    def send_robot_command(self, action_id: int, command) -> bool:
        base = self.map.robot_base
        params = [command.code, command.src[0], command.src[1], command.dst[0], command.dst[1],
                  command.aux_slot, *P.split_u32(command.job_id), *P.split_u32(command.job2_id)]
        self.link.write(base + P.R_CMD_CODE, params)
        self.link.write(base + P.R_TEXT_IN, P.encode_text(command.text))
        return self._strobe(base + P.R_CMD_ID, action_id)

    def _strobe(self, address: int, action_id: int) -> bool:
        """Write the action id that strobes a command; True when the write was
        answered (the PLC holds the strobe: it may act on it from now on, even if it
        restarts before its ACK_ID is read). Its answer may be lost with the
        connection after the PLC took it (False): the handshake that follows finds out."""
        try:
            self.link.write(address, [action_id])
        except PlcUnavailable as exc:
            # Another PLC's identity is refused before the write goes out: not sent.
            if exc.code not in LINK_ERRORS or exc.code == PLC_IDENTITY_MISMATCH:
                raise
            return False
        return True

    def scan_text(self) -> str:
        return P.decode_text(self.link.read(self.map.robot_base + P.R_TEXT_OUT, P.TEXT_REGISTERS))

    def start_machine(self, equipment_id: str, action_id: int, jobs: dict[int, int]) -> bool:
        regs = self.map.for_equipment(equipment_id)
        for slot, job in jobs.items():
            slot_base = regs.base + 8 + 8 * (slot - 1)
            self.link.write(slot_base + P.S_JOB_ID, P.split_u32(job))
            self.link.write(slot_base + P.S_START, [1])
        return self._strobe(regs.base + P.M_START_ID, action_id)

    def machine_answer(self, equipment_id: str) -> MachineAnswer:
        ack, error = self.link.read(self.map.for_equipment(equipment_id).base + P.M_ACK_ID, 2)
        return MachineAnswer(ack, error)

    def abort_machine(self, equipment_id: str, action_id: int) -> bool:
        # the strobe is its only write
        return self._strobe(self.map.for_equipment(equipment_id).base + P.M_ABORT_ID, action_id)

    def abort_answer(self, equipment_id: str) -> int:
        return self.link.read(self.map.for_equipment(equipment_id).base + P.M_ABORT_ACK_ID, 1)[0]

    def answered_action_ids(self) -> list[int]:
        ack, _state, done = self.link.read(self.map.robot_base + P.R_ACK_ID, 3)
        return [ack, done] + [self.link.read(e.base + P.M_ACK_ID, 1)[0] for e in self.map.equipment]

    def read_state(self) -> dict[str, Any]:
        return read_state(self.link, self.layout)

    def wait_for_change(self, timeout: float) -> bool:
        eventlet.sleep(min(self.poll_interval, timeout))
        return True  # cannot tell: read again

    def wait_for_link(self, timeout: float) -> None:
        self.link.retry_now()  # an action waiting: its next request reconnects, as over OPC UA
        eventlet.sleep(timeout)

    def close(self) -> None:
        self.link.close()


def read_identity(read, base: int) -> tuple[str | None, int | None]:
    """(identity, map version) from the identity block at ``base``; (None, …) for
    a PLC without one (its MAP_VERSION 0, or the registers refused)."""
    try:
        block = read(base + P.I_MAP_VERSION, 1 + P.IDENTITY_REGISTERS)
    except PlcUnavailable as exc:
        if exc.code != "PLC_ERROR":  # the link: raised as any failed request
            raise
        return None, None  # an exception answer (no such registers): no identity block
    version = block[P.I_MAP_VERSION]
    if not version:
        return None, 0
    text = P.decode_text(block[P.I_IDENTITY:P.I_IDENTITY + P.IDENTITY_REGISTERS])
    return text, version


def read_state(link: PlcLink, layout: Layout) -> dict[str, Any]:
    """The PLC's state per machine and slot, robot, dock and buffer, from its registers."""
    m = layout.plc
    began = datetime.now(UTC)  # the picture is as old as its first register
    fault, ack, state, done_id, error = link.read(m.robot_base + P.R_FAULT, 5)
    pieces, arrival_seq = link.read(m.dock_base, 2)
    buffer = link.read(m.buffer_base, layout.buffer_slots)
    machines = []
    for regs in m.equipment:
        block = link.read(regs.base, regs.size)
        slots = []
        for n in range(1, regs.slots + 1):
            s = block[8 + 8 * (n - 1):8 * (n + 1)]
            slots.append({"occupied": s[P.S_OCCUPIED], "running": s[P.S_RUNNING], "done": s[P.S_DONE],
                          "result": s[P.S_RESULT], "jobId": P.join_u32(s[P.S_JOB_ID], s[P.S_JOB_ID + 1])})
        machines.append((regs.equipment_id, block[P.M_RUNNING], block[P.M_FAULT], slots))
    return state_picture(layout, RobotStatus(fault, ack, state, done_id, error), pieces, arrival_seq,
                         buffer, machines, observed_at=began)


def state_picture(layout: Layout, robot: RobotStatus, pieces: int, arrivals: int, buffer: list[int],
                  machines: list[tuple[str, int, int, list[dict]]],
                  observed_at: datetime | None = None) -> dict[str, Any]:
    """The ``plc_state()`` shape from raw values (both drivers build it here, so
    it cannot differ between protocols). ``machines``: (id, running, fault,
    slots) with each slot's raw occupied/running/done/result (plc.RESULT_*)/jobId."""
    equipment = []
    for equipment_id, running, fault, raw_slots in machines:
        spec = layout.equipment_by_id(equipment_id)
        slots = []
        for n, s in enumerate(raw_slots, start=1):
            slot = {"slotNo": n, "occupied": bool(s["occupied"]), "running": bool(s["running"]),
                    "done": bool(s["done"]), "jobId": s["jobId"] or None}
            if spec.inspection:
                slot["pass"] = {P.RESULT_PASS: True, P.RESULT_FAIL: False}.get(s["result"])
            slots.append(slot)
        equipment.append({"id": equipment_id, "running": bool(running), "fault": fault or None, "slots": slots})
    state = robot.state
    return {
        "connected": True,
        # When the state was read (this process's clock; a read of several
        # requests: when it began): the line_controller keeps the newest of several
        # observations of the dock, and leaves out of a check what it sent after.
        "observedAt": (observed_at or datetime.now(UTC)).isoformat(),
        "robot": {"state": ("IDLE", "BUSY", "DONE", "ERROR")[state] if state < 4 else str(state),
                  "ackId": robot.ack_id, "doneId": robot.done_id, "errorCode": robot.error_code or None,
                  "fault": robot.fault or None},
        "dock": {"pieces": pieces, "arrivals": arrivals},
        "buffer": [{"slotNo": i + 1, "occupied": bool(v)} for i, v in enumerate(buffer)],
        "equipment": equipment,
    }
