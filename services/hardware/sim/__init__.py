"""The line simulator: plays the PLC of deploy/REGISTER_MAP.md (Modbus TCP,
:class:`~services.hardware.sim.server.LineSimulator`) or deploy/OPCUA_MAP.md
(OPC UA, :class:`~services.hardware.sim.opcua_server.OpcUaLineSimulator`), one
cell model (:mod:`~services.hardware.sim.model`) behind one server core
(:mod:`~services.hardware.sim.core`). Either runs in a thread (tests) or in the
foreground (``linectl sim``); :mod:`~services.hardware.sim.control` injects
faults from outside, like any client could.
"""
