"""The simulated robot's handshake (deploy/REGISTER_MAP.md, "Robot block"): a
new CMD_ID is acknowledged and the robot busy, its command takes its time, then
DONE_ID and ERROR_CODE report it. What a command moves is in
:mod:`services.hardware.sim.moves`."""

from __future__ import annotations

import logging

from services.hardware import plc as P
from services.hardware.sim.cell import CellBase

log = logging.getLogger(__name__)

# Robot action durations in simulated seconds.
ROBOT_SECONDS = {
    P.CMD_DOCK_TO_BUFFER: 6.0,
    P.CMD_BUFFER_TO_EQUIPMENT: 8.0,
    P.CMD_EQUIPMENT_TO_BUFFER: 8.0,
    P.CMD_SWAP: 14.0,
    P.CMD_SCAN: 3.0,
    P.CMD_MARK: 5.0,
    P.CMD_BUFFER_TO_DOCK: 6.0,
}


class RobotHandshake(CellBase):
    def _robot_state(self) -> None:
        self.robot_fail_next = 0
        self.robot_hang_next = False
        self.robot_hung = False
        # the robot action being executed (action id, command code, token), or None; its
        # finish timer only acts while the token is current, so an e-stop or a restart can end it
        self._robot_in_flight: tuple[int, int, int] | None = None
        # (action id, command code, simulated start, simulated end or None): what the robot did
        self.robot_log: list[list] = []

    def _robot_command(self) -> None:
        r = self.map.robot_base
        action_id = self.mem[r + P.R_CMD_ID]
        if action_id == 0 or action_id == self.mem[r + P.R_ACK_ID] or self.mem[r + P.R_STATE] == P.ROBOT_BUSY:
            return  # not a new command, or the robot is busy: never acknowledged
        code = self.mem[r + P.R_CMD_CODE]
        self.mem[r + P.R_ACK_ID] = action_id
        self.mem[r + P.R_STATE] = P.ROBOT_BUSY
        self.robot_log.append([action_id, code, self.now(), None])
        if self.mem[r + P.R_FAULT]:  # the robot cannot move: refused at once, nothing moved
            self._robot_report(action_id, code, self.mem[r + P.R_FAULT])
            return
        token = next(self._seq)
        self._robot_in_flight = (action_id, code, token)
        if self.robot_hang_next:
            self.robot_hang_next, self.robot_hung = False, True
            log.info("sim: robot action %d hangs (injected)", action_id)
            return
        injected, self.robot_fail_next = self.robot_fail_next, 0
        self._after(ROBOT_SECONDS.get(code, 1.0), lambda: self._robot_finish(token, injected))

    def _robot_finish(self, token: int, injected: int) -> None:
        if self._robot_in_flight is None or self._robot_in_flight[2] != token:
            return  # ended by an emergency stop, or forgotten by a restart
        action_id, code, _token = self._robot_in_flight
        # _robot_effect: what the command moves (CellMoves, services/hardware/sim/moves.py)
        self._robot_report(action_id, code, injected or self._robot_effect(code))

    def _robot_report(self, action_id: int, code: int, error: int) -> None:
        r = self.map.robot_base
        self._robot_in_flight = None
        self.mem[r + P.R_ERROR_CODE] = error
        self.mem[r + P.R_STATE] = P.ROBOT_ERROR if error else P.ROBOT_DONE
        self.mem[r + P.R_DONE_ID] = action_id
        self.robot_log[-1][3] = self.now()
        log.info("sim: robot action %d (code %d) finished, error %d", action_id, code, error)
