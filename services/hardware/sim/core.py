"""The line simulator's server core, whichever protocol serves it: one
:class:`~services.hardware.sim.model.LineModel`, the injections that act on the
server rather than the cell (answer late, drop every connection, restart), and
the same injections in-process for tests.

A protocol's front-end is a subclass giving :class:`LoopServer`'s hooks (how it
listens and closes connections) and handing each request to the model, then
calling :meth:`SimulatorCore._after_request`, as a kombu transport gives a
channel's few hooks: services/hardware/sim/server.py (Modbus TCP) and
services/hardware/sim/opcua_server.py (OPC UA).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from services.hardware.sim.model import LineModel, SimOptions
from services.hardware.sim.serving import LoopServer
from shared.layout import Layout

log = logging.getLogger(__name__)

# A drop or a restart asked for in a request waits this long, so that the
# request's own answer goes out first.
ANSWER_FIRST = 0.05


class SimulatorCore(LoopServer):
    protocol = ""  # "modbus" or "opcua", for the log

    def __init__(self, layout: Layout, options: SimOptions, host: str, port: int,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(host, port)
        self.layout = layout
        self.model = LineModel(layout, options, clock)  # a test's clock lets it say when cycles end

    def describe(self) -> str:
        return f"sim-{self.protocol} (speed {self.model.options.speed}x)"

    # -- around each request ---------------------------------------------------

    async def _answer_late(self) -> None:
        """As the control block's RESPONSE_DELAY_MS asks, before a request is answered."""
        if self.model.response_delay_ms:
            await asyncio.sleep(self.model.response_delay_ms / 1000)

    def _after_request(self) -> None:
        """A drop or a restart the request asked for (DROP_MS, RESTART_MS), once it is answered."""
        model, loop = self.model, asyncio.get_running_loop()
        if model.drop_request_ms:
            ms, model.drop_request_ms = model.drop_request_ms, 0
            loop.call_later(ANSWER_FIRST, lambda: asyncio.ensure_future(self._drop(ms / 1000)))
        if model.restart_request_ms:
            ms, model.restart_request_ms = model.restart_request_ms, 0
            loop.call_later(ANSWER_FIRST, lambda: asyncio.ensure_future(self._restart(ms / 1000)))

    async def _drop(self, seconds: float) -> None:
        log.info("sim: dropping every connection for %.2fs (injected)", seconds)
        await self.drop_connections(seconds)

    async def _restart(self, seconds: float, identity: str | None = None) -> None:
        log.info("sim: PLC restart, down for %.2fs (injected)", seconds)
        self.model.restart_registers()
        if identity is not None:  # another PLC at this address now (a swapped cable, another program)
            self.model.serve_identity(identity)
        await self.drop_connections(seconds)

    # -- the same injections in-process, named as tests/support/register_map_plc.py
    # names them, so a test can drive either PLC; they run on the server's loop

    def restart(self, seconds: float, timeout: float = 10.0, identity: str | None = None) -> None:
        """Restart as a PLC does, from the test's side: returns once every connection
        is dropped; new ones are refused for ``seconds``, then the registers are
        those of deploy/REGISTER_MAP.md "PLC restart". ``identity``: it comes back
        as that PLC (deploy/REGISTER_MAP.md, "Identity block")."""
        asyncio.run_coroutine_threadsafe(self._restart(seconds, identity), self._loop).result(timeout)

    def fault(self, equipment_id: str) -> None:
        """The machine faults now (FAULT = 6, running cycles abort), as FAULT_STATION."""
        self._on_loop(self.model.machine_fault, equipment_id)

    def emergency_stop(self) -> None:
        self._on_loop(self.model.emergency_stop)

    def clear(self) -> None:
        """Every injected fault cleared, as CLEAR."""
        self._on_loop(self.model.clear_faults)
