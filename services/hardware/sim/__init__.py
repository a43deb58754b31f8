"""The Modbus TCP line simulator: plays the PLC of deploy/REGISTER_MAP.md.

:class:`~services.hardware.sim.server.LineSimulator` runs it in a thread (tests)
or in the foreground (``linectl sim``); :class:`~services.hardware.sim.control.SimControl`
injects faults over Modbus like any outside tool could.
"""
