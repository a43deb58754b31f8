"""The simulator's Modbus TCP server: pymodbus ``ModbusTcpServer`` over a
``SimDevice`` whose action hook hands every request to the :class:`LineModel`.

The asyncio loop runs in a thread (``start``) or in the foreground (``serve``,
the ``linectl sim`` process). In a process eventlet monkey-patched (tests, next
to nameko containers) that thread is a green thread: asyncio's selector is then
eventlet's, so the loop yields to the hub while it waits. A real OS thread
would not do there: it would share eventlet's green locks (logging's, for one)
with the hub's thread, and a contended green lock cannot wake a waiter in
another OS thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from services.hardware.sim.model import LineModel, SimOptions
from shared.layout import Layout

log = logging.getLogger(__name__)


class LineSimulator:
    def __init__(self, layout: Layout, options: SimOptions, host: str = "127.0.0.1", port: int = 5020,
                 clock: Callable[[], float] = time.monotonic):
        self.model = LineModel(layout, options, clock)  # a test's clock lets it say when cycles end
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ModbusTcpServer | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = None
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _on_request(self, _fc, start_address, address, _count, registers, set_values):
        model = self.model
        if model.response_delay_ms:
            await asyncio.sleep(model.response_delay_ms / 1000)
        model.on_request(address, None if set_values is None else list(set_values))
        registers[:len(model.mem)] = [v & 0xFFFF for v in model.mem[start_address:]]
        if model.drop_request_ms:
            ms, model.drop_request_ms = model.drop_request_ms, 0
            # after this answer went out: drop every connection, refuse new ones for ms
            asyncio.get_running_loop().call_later(0.05, self._drop, ms / 1000)
        if model.restart_request_ms:
            ms, model.restart_request_ms = model.restart_request_ms, 0
            asyncio.get_running_loop().call_later(
                0.05, lambda: asyncio.ensure_future(self._restart(ms / 1000)))
        return None

    def _drop(self, seconds: float) -> None:
        log.info("sim: dropping every connection for %.2fs (injected)", seconds)
        self._down_for = seconds
        asyncio.ensure_future(self._server.shutdown())

    async def _restart(self, seconds: float) -> None:
        log.info("sim: PLC restart, down for %.2fs (injected)", seconds)
        self._down_for = seconds
        self.model.restart_registers()
        await self._server.shutdown()

    def restart(self, seconds: float, timeout: float = 10.0) -> None:
        """Restart as a PLC does, from the test's side: returns once every connection
        is dropped; new ones are refused for ``seconds``, then the registers are
        those of deploy/REGISTER_MAP.md "PLC restart"."""
        asyncio.run_coroutine_threadsafe(self._restart(seconds), self._loop).result(timeout)

    # The same injections in-process, named as tests/support/register_map_plc.py names
    # them, so a test can drive either PLC; they run on the server's loop.

    def _on_loop(self, fn, *args, timeout: float = 10.0) -> None:
        async def call():
            fn(*args)

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout)

    def fault(self, equipment_id: str) -> None:
        """The machine faults now (FAULT = 6, running cycles abort), as FAULT_STATION."""
        self._on_loop(self.model.machine_fault, equipment_id)

    def emergency_stop(self) -> None:
        self._on_loop(self.model.emergency_stop)

    def clear(self) -> None:
        """Every injected fault cleared, as CLEAR."""
        self._on_loop(self.model.clear_faults)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        device = SimDevice(
            id=self.model.map.unit_id,
            simdata=[SimData(address=0, count=len(self.model.mem), datatype=DataType.REGISTERS)],
            action=self._on_request,
        )
        while not self._stopping.is_set():
            self._down_for = 0.0
            self._server = ModbusTcpServer(device, address=(self.host, self.port))
            serving = asyncio.ensure_future(self._server.serve_forever())
            await asyncio.sleep(0)
            if not self._ready.is_set():
                await self._wait_listening()
                log.info("sim: Modbus TCP server on %s (speed %sx)", self.address, self.model.options.speed)
                self._ready.set()
            await serving
            if self._down_for and not self._stopping.is_set():
                try:
                    await asyncio.wait_for(self._stopping.wait(), self._down_for)
                except TimeoutError:
                    pass

    async def _wait_listening(self) -> None:
        for _ in range(500):
            if self._server.transport is not None:
                return
            await asyncio.sleep(0.01)
        raise OSError(f"simulator could not listen on {self.address}")

    def serve(self) -> None:
        """Run in the foreground until interrupted."""
        asyncio.run(self.run())

    def start(self, timeout: float = 10.0) -> LineSimulator:
        """Run in a background thread (green under eventlet, see above); returns
        once the port listens."""

        def target():
            try:
                asyncio.run(self.run())
            except BaseException as exc:  # reported to start()'s caller
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=target, name=f"sim-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error:
            raise RuntimeError(f"simulator did not start on {self.address}: {self._error}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return

        async def _stop():
            self._stopping.set()
            await self._server.shutdown()

        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(_stop()))
        self._thread.join(timeout)
