"""Faults in the simulated cell: the injections of the "Simulator control" block
(deploy/REGISTER_MAP.md), the same injections in-process for tests, the
emergency stop, clearing, and what a PLC restart leaves of the registers."""

from __future__ import annotations

import logging

from services.hardware import plc as P
from services.hardware.sim.cell import CellBase
from shared.layout import SIM_CONTROL_BLOCK, EquipmentRegisters

log = logging.getLogger(__name__)

MACHINE_FAULT = 6  # the PLC error code FAULT_STATION sets


class FaultInjection(CellBase):
    def _fault_state(self) -> None:
        self.mem[self.map.sim_control_base + P.C_SCRAP_PERMILLE] = round(self.options.scrap_rate * 1000)
        self.drop_request_ms = 0  # read and reset by the server
        self.restart_request_ms = 0  # read and reset by the server
        self.response_delay_ms = 0

    def _fault(self, e: EquipmentRegisters, code: int = MACHINE_FAULT) -> None:
        self.mem[e.base + P.M_FAULT] = code
        self._abort_cycles(e)
        log.info("sim: machine %s faulted with %d (injected)", e.equipment_id, code)

    def machine_fault(self, equipment_id: str, code: int = MACHINE_FAULT) -> None:
        """As FAULT_STATION, in-process."""
        self.advance()
        self._fault(self.map.for_equipment(equipment_id), code)

    def emergency_stop(self) -> None:
        """Every machine and the robot fault with 8 until :meth:`clear_faults`."""
        self.advance()
        for e in self.map.equipment:
            self._fault(e, P.ERR_EMERGENCY_STOP)
        r = self.map.robot_base
        self.mem[r + P.R_FAULT] = P.ERR_EMERGENCY_STOP
        if self._robot_in_flight is not None:  # hung or not, it ends now, having moved nothing
            action_id, code, _token = self._robot_in_flight
            self.robot_hung = False
            self._robot_report(action_id, code, P.ERR_EMERGENCY_STOP)
        log.info("sim: emergency stop (injected)")

    def restart_registers(self) -> None:
        """The registers as a PLC comes back from a restart (deploy/REGISTER_MAP.md,
        "PLC restart"): handshakes, cycles and job ids gone, the pieces where they are."""
        self.advance()
        m, r = self.mem, self.map.robot_base
        for offset in (P.R_ACK_ID, P.R_STATE, P.R_DONE_ID, P.R_ERROR_CODE, P.R_FAULT):
            m[r + offset] = 0
        self._robot_in_flight, self.robot_hung = None, False  # forgotten: never reports
        for e in self.map.equipment:
            self._abort_cycles(e)
            for offset in (P.M_START_ID, P.M_ACK_ID, P.M_ERROR_CODE, P.M_RUNNING, P.M_FAULT,
                           P.M_ABORT_ID, P.M_ABORT_ACK_ID):
                m[e.base + offset] = 0
            for s in self._slots(e):
                occupied = m[s + P.S_OCCUPIED]
                self._clear_slot(s)
                m[s + P.S_OCCUPIED] = occupied
        m[self.map.dock_base + P.D_ARRIVAL_SEQ] = 0
        self.clear_faults()
        c = self.map.sim_control_base
        if c:  # injections are gone; the scrap rate is the simulator's setting, kept
            scrap_permille = m[c + P.C_SCRAP_PERMILLE]
            m[c:c + SIM_CONTROL_BLOCK] = [0] * SIM_CONTROL_BLOCK
            m[c + P.C_SCRAP_PERMILLE] = scrap_permille
        log.info("sim: PLC restart: registers reset, pieces kept")

    def _control(self) -> None:
        """Act on what was written into the control block; a one-shot register reads 0 after."""
        c, m = self.map.sim_control_base, self.mem
        if m[c + P.C_ROBOT_FAIL_NEXT]:
            self.robot_fail_next, m[c + P.C_ROBOT_FAIL_NEXT] = m[c + P.C_ROBOT_FAIL_NEXT], 0
        if m[c + P.C_ROBOT_HANG_NEXT]:
            self.robot_hang_next, m[c + P.C_ROBOT_HANG_NEXT] = True, 0
        if m[c + P.C_FAULT_STATION]:
            e = self.map.by_station(m[c + P.C_FAULT_STATION])
            m[c + P.C_FAULT_STATION] = 0
            if e is not None:
                self._fault(e)
        if m[c + P.C_HANG_STATION]:
            self.hung_stations.add(m[c + P.C_HANG_STATION])
            m[c + P.C_HANG_STATION] = 0
        if m[c + P.C_DROP_MS]:
            self.drop_request_ms, m[c + P.C_DROP_MS] = m[c + P.C_DROP_MS], 0
        if m[c + P.C_ESTOP]:
            m[c + P.C_ESTOP] = 0
            self.emergency_stop()
        if m[c + P.C_RESTART_MS]:
            self.restart_request_ms, m[c + P.C_RESTART_MS] = m[c + P.C_RESTART_MS], 0
        if m[c + P.C_TAKE_FROM_BUFFER]:
            self._take_from_buffer(m[c + P.C_TAKE_FROM_BUFFER])
            m[c + P.C_TAKE_FROM_BUFFER] = 0
        self.response_delay_ms = m[c + P.C_RESPONSE_DELAY_MS]
        if m[c + P.C_CLEAR]:
            m[c + P.C_CLEAR] = 0
            self.clear_faults()

    def _take_from_buffer(self, slot: int) -> None:
        b = self._buffer(slot)
        if b is not None and self.mem[b]:
            self.mem[b] = 0
            log.info("sim: the piece on a buffer slot taken out by hand (injected)")

    def clear_faults(self) -> None:
        c, m = self.map.sim_control_base, self.mem
        self.robot_fail_next, self.robot_hang_next = 0, False
        self.hung_stations.clear()
        for e in self.map.equipment:
            m[e.base + P.M_FAULT] = 0
        r = self.map.robot_base
        m[r + P.R_FAULT] = 0
        if self.robot_hung:
            self.robot_hung, self._robot_in_flight = False, None
            m[r + P.R_STATE] = P.ROBOT_IDLE  # the hung action is abandoned, never reported
        self.response_delay_ms = m[c + P.C_RESPONSE_DELAY_MS] = 0
        finishes, self._hung_finishes = self._hung_finishes, []
        for fn in finishes:
            fn()
