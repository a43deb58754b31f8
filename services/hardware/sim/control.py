"""Fault injection from outside: writes the simulator's control registers
(deploy/REGISTER_MAP.md, "Simulator control") over Modbus TCP, as any Modbus
tool could. Used by the tests and the benchmark."""

from __future__ import annotations

from services.hardware import plc as P
from services.hardware.plc import PlcLink
from shared.layout import Layout


class SimControl:
    def __init__(self, layout: Layout, host: str, port: int):
        self.layout = layout
        self.base = layout.plc.sim_control_base
        self.link = PlcLink(host, port, layout.plc.unit_id, timeout=10.0)

    def _set(self, offset: int, value: int) -> None:
        self.link.write(self.base + offset, [value])

    def robot_error(self, code: int = 3) -> None:
        """The next robot/tool action finishes with PLC error ``code``."""
        self._set(P.C_ROBOT_FAIL_NEXT, code)

    def robot_hang(self) -> None:
        """The next robot/tool action is acknowledged and never finishes."""
        self._set(P.C_ROBOT_HANG_NEXT, 1)

    def machine_fault(self, equipment_id: str) -> None:
        self._set(P.C_FAULT_STATION, self.layout.plc.for_equipment(equipment_id).station)

    def machine_hang(self, equipment_id: str) -> None:
        """That machine's cycles never report done (until ``clear``)."""
        self._set(P.C_HANG_STATION, self.layout.plc.for_equipment(equipment_id).station)

    def drop(self, seconds: float) -> None:
        """Drop every connection and refuse new ones for ``seconds``."""
        self._set(P.C_DROP_MS, max(1, min(65535, round(seconds * 1000))))

    def delay(self, seconds: float) -> None:
        """Answer every request ``seconds`` late (0 to stop)."""
        self._set(P.C_RESPONSE_DELAY_MS, max(0, min(65535, round(seconds * 1000))))

    def scrap_rate(self, rate: float) -> None:
        self._set(P.C_SCRAP_PERMILLE, round(rate * 1000))

    def clear(self) -> None:
        """Clear every injected fault; hung cycles finish now."""
        self._set(P.C_CLEAR, 1)

    def close(self) -> None:
        self.link.close()
