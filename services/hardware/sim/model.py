"""The simulated line behind the register map: robot, dock, buffer, machines.

Pure Python, no I/O: a server feeds it every request (:meth:`LineModel.on_request`)
and serves :attr:`LineModel.mem` back. Time is simulated (wall clock × speed) and
advanced lazily on each request, so the model needs no thread of its own and its
state is exactly what a poll sees. Each concern is its own module, over the
register image and clock of :mod:`services.hardware.sim.cell`:

- :mod:`~services.hardware.sim.robot`: the robot's handshake;
- :mod:`~services.hardware.sim.moves`: what each robot command moves;
- :mod:`~services.hardware.sim.machines`: the machines' cycles;
- :mod:`~services.hardware.sim.faults`: fault injection, emergency stop, restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.hardware import plc as P
from services.hardware.sim.cell import SimOptions
from services.hardware.sim.faults import MACHINE_FAULT, FaultInjection
from services.hardware.sim.machines import MachineCycles
from services.hardware.sim.moves import CellMoves
from services.hardware.sim.robot import ROBOT_SECONDS, RobotHandshake
from shared.layout import IDENTITY_BLOCK, SIM_CONTROL_BLOCK, Layout

__all__ = ["MACHINE_FAULT", "ROBOT_SECONDS", "LineModel", "SimOptions"]


class LineModel(RobotHandshake, CellMoves, MachineCycles, FaultInjection):
    def __init__(self, layout: Layout, options: SimOptions, clock: Callable[[], float] = time.monotonic):
        super().__init__(layout, options, clock)
        self._robot_state()
        self._moves_state()
        self._machine_state()
        self._fault_state()
        self._pallet_arrives()
        self.writes = 0  # requests that wrote (a host's writes, method calls, injections)

    def on_request(self, address: int, values: list[int] | None) -> None:
        """One request: advance time, then apply a write (``values``; None for a read)."""
        self.advance()
        if values is None:
            return
        self.writes += 1
        for i, v in enumerate(values):
            self.mem[address + i] = int(v)
        touched = range(address, address + len(values))
        identity = self.map.identity_base
        if identity < touched.stop and touched.start < identity + IDENTITY_BLOCK:
            self._write_identity()  # read-only
        if self.map.robot_base + P.R_CMD_ID in touched:
            self._robot_command()
        for e in self.map.equipment:
            if e.base + P.M_START_ID in touched:
                self._machine_start(e)
            if e.base + P.M_ABORT_ID in touched:
                self._machine_abort(e)
        control = self.map.sim_control_base
        if control and any(control <= a < control + SIM_CONTROL_BLOCK for a in touched):
            self._control()
