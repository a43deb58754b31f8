"""A register image served over Modbus TCP: pymodbus' ``ModbusTcpServer`` over a
``SimDevice`` whose action hook sees every request. Knows no register map: the
server using it says how many registers there are, its unit id, and what a
request does (:meth:`ModbusTransport._on_request`).

Used by the simulator's Modbus front-end and by the tests' PLC written from
deploy/REGISTER_MAP.md alone (tests/support/register_map_plc.py), which share
this plumbing and nothing of each other's reading of the map.
"""

from __future__ import annotations

import asyncio

from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from services.hardware.sim.serving import LoopServer


class ModbusTransport(LoopServer):
    _modbus: ModbusTcpServer | None = None
    connections_accepted = 0  # TCP connections accepted since start (a host that reconnects shows here)

    # -- what the server using it says -----------------------------------------

    def _unit_id(self) -> int:
        raise NotImplementedError

    def _register_count(self) -> int:
        raise NotImplementedError

    async def _on_request(self, function_code, start_address, address, count, registers, set_values):
        """pymodbus' action hook: apply a write (``set_values``, None for a read)
        and fill ``registers`` (from ``start_address``) with what is answered."""
        raise NotImplementedError

    # -- serving ---------------------------------------------------------------

    async def _serve(self) -> None:
        device = SimDevice(id=self._unit_id(), action=self._on_request,
                           simdata=[SimData(address=0, count=self._register_count(), datatype=DataType.REGISTERS)])
        while not self._stopping.is_set():
            await self._pause(self._down_for())
            if self._stopping.is_set():
                break
            self._modbus = ModbusTcpServer(device, address=(self.host, self.port), trace_connect=self._traced)
            serving = asyncio.ensure_future(self._modbus.serve_forever())
            while self._modbus.transport is None and not serving.done():
                await asyncio.sleep(0.01)
            if serving.done():
                serving.result()  # could not listen: raises
            self._listening()
            await serving

    def _traced(self, connected: bool) -> None:
        if connected:
            self.connections_accepted += 1

    async def _close_connections(self) -> None:
        if self._modbus is not None:
            await self._modbus.shutdown()
