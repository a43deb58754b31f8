"""Fault injection from outside, as any client could: :class:`SimControl`
writes the simulator's control registers over Modbus TCP (deploy/REGISTER_MAP.md,
"Simulator control"); :class:`OpcUaSimControl` calls the same operations as
methods of the ``SimControl`` object over OPC UA (deploy/OPCUA_MAP.md). Used by
the tests and the benchmark; :func:`sim_control` picks by address."""

from __future__ import annotations

from services.hardware import opcua_map as M
from services.hardware import plc as P
from services.hardware.device.opcua import OpcUaPort
from services.hardware.plc import PlcLink, parse_address
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

    def emergency_stop(self) -> None:
        """Every machine and the robot fault with 8 now (until ``clear``): running
        cycles abort, the robot's action in flight finishes with error 8."""
        self._set(P.C_ESTOP, 1)

    def restart_plc(self, seconds: float) -> None:
        """The PLC restarts: drops every connection, refuses new ones for
        ``seconds``, comes back with its registers reset (the pieces stay put)."""
        self._set(P.C_RESTART_MS, max(1, min(65535, round(seconds * 1000))))

    def clear(self) -> None:
        """Clear every injected fault (the emergency stop too); hung cycles finish now."""
        self._set(P.C_CLEAR, 1)

    def take_from_buffer(self, slot_no: int) -> None:
        """A person takes the piece on buffer slot ``slot_no`` out by hand."""
        self._set(P.C_TAKE_FROM_BUFFER, slot_no)

    def close(self) -> None:
        self.link.close()


class OpcUaSimControl:
    """The same operations as :class:`SimControl`, as OPC UA method calls on the
    simulator's ``SimControl`` object (through the hardware service's own driver)."""

    def __init__(self, layout: Layout, url: str, options: dict | None = None):
        self.layout = layout
        self.port = OpcUaPort(url, layout, timeout=10.0, options=options)

    def _call(self, name: str, *args) -> None:
        self.port.call(M.default_node_id(M.SIM_CONTROL), M.default_node_id(f"{M.SIM_CONTROL}.{name}"), list(args))

    def robot_error(self, code: int = 3) -> None:
        self._call("RobotError", (code, "UInt16"))

    def robot_hang(self) -> None:
        self._call("RobotHang")

    def machine_fault(self, equipment_id: str) -> None:
        self._call("MachineFault", (equipment_id, "String"))

    def machine_hang(self, equipment_id: str) -> None:
        self._call("MachineHang", (equipment_id, "String"))

    def drop(self, seconds: float) -> None:
        self._call("Drop", (max(1, round(seconds * 1000)), "UInt32"))

    def delay(self, seconds: float) -> None:
        self._call("Delay", (max(0, min(65535, round(seconds * 1000))), "UInt32"))

    def scrap_rate(self, rate: float) -> None:
        self._call("ScrapRate", (round(rate * 1000), "UInt16"))

    def emergency_stop(self) -> None:
        self._call("EmergencyStop")

    def restart_plc(self, seconds: float) -> None:
        self._call("RestartPlc", (max(1, round(seconds * 1000)), "UInt32"))

    def clear(self) -> None:
        self._call("Clear")

    def take_from_buffer(self, slot_no: int) -> None:
        self._call("TakeFromBuffer", (slot_no, "UInt16"))

    def close(self) -> None:
        self.port.close()


def sim_control(layout: Layout, address: str, options: dict | None = None):
    """The control client for a simulator at ``address`` (``host:port`` or ``opc.tcp://…``)."""
    if address.startswith("opc.tcp://"):
        return OpcUaSimControl(layout, address, options)
    host, port = parse_address(address)
    return SimControl(layout, host, port)
