"""The device port and its drivers (see port.py): :func:`open_port` builds the
one the address names — ``host:port`` Modbus TCP, ``opc.tcp://…`` OPC UA."""

from __future__ import annotations

from services.hardware.device.port import (
    LINK_ERRORS,
    PLC_IDENTITY_MISMATCH,
    DevicePort,
    MachineAnswer,
    PlcUnavailable,
    RobotBusy,
    RobotStatus,
)
from shared.layout import Layout

__all__ = ["LINK_ERRORS", "PLC_IDENTITY_MISMATCH", "DevicePort",
           "MachineAnswer", "PlcUnavailable", "RobotBusy", "RobotStatus", "open_port"]


def open_port(address: str, layout: Layout, *, timeout: float = 2.0, poll_interval: float = 0.1,
              options=None, identity=None) -> DevicePort:
    """The driver for ``address``: ``opc.tcp://host:port[/path]`` (OPC UA, with
    ``options`` the dict of dependencies.opcua_options) or ``host:port`` (Modbus TCP).
    ``identity``: the line's :class:`~services.hardware.device.identity.IdentityCheck`,
    made on every connect before anything else (None: none)."""
    if address.startswith("opc.tcp://"):
        from services.hardware.device.opcua import OpcUaPort  # asyncua loads only when used

        return OpcUaPort(address, layout, timeout=timeout, options=options, identity=identity)
    from services.hardware.device.modbus import ModbusPort
    from services.hardware.plc import PlcLink, parse_address

    host, port = parse_address(address)
    return ModbusPort(PlcLink(host, port, layout.plc.unit_id, timeout=timeout), layout, poll_interval,
                      identity=identity)
