"""The simulator's Modbus TCP front-end (deploy/REGISTER_MAP.md): every request
goes to the :class:`LineModel` (time advances, a write acts), and the model's
registers are answered. The rest is the core's (services/hardware/sim/core.py)
and the Modbus plumbing's (services/hardware/sim/modbus_transport.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from services.hardware.sim.core import SimulatorCore
from services.hardware.sim.modbus_transport import ModbusTransport
from services.hardware.sim.model import SimOptions
from shared.layout import Layout


class LineSimulator(ModbusTransport, SimulatorCore):
    protocol = "modbus"

    def __init__(self, layout: Layout, options: SimOptions, host: str = "127.0.0.1", port: int = 5020,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(layout, options, host, port, clock)

    def _unit_id(self) -> int:
        return self.model.map.unit_id

    def _register_count(self) -> int:
        return len(self.model.mem)

    async def _on_request(self, _fc, start_address, address, _count, registers, set_values):
        await self._answer_late()
        model = self.model
        model.on_request(address, None if set_values is None else list(set_values))
        registers[:len(model.mem)] = [v & 0xFFFF for v in model.mem[start_address:]]
        self._after_request()
        return None
