"""A server on its own asyncio loop, as a PLC runs: started in a thread (tests)
or in the foreground (``linectl sim``), stopped, and down for a while when a
drop or a restart is played. Knows no protocol and no register map: a
protocol's part overrides :meth:`LoopServer._serve` and
:meth:`LoopServer._close_connections`.

In a process eventlet monkey-patched (tests, next to nameko containers) the
thread is a green thread: asyncio's selector is then eventlet's, so the loop
yields to the hub while it waits. A real OS thread would not do there: it would
share eventlet's green locks (logging's, for one) with the hub's thread, and a
contended green lock cannot wake a waiter in another OS thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
SHORT_PAUSE = 0.05  # seconds: a pause this short is slept through, even by a stop
STOP_GRACE = 10.0  # seconds a signalled stop may take before the process just ends
# ``linectl sim``'s exit status when it cannot listen on its port (sysexits' EX_UNAVAILABLE):
# ``linectl up`` then stops, rather than restarting it while the port is another's.
EXIT_CANNOT_LISTEN = 69


def cannot_listen(host: str, port: int) -> str | None:
    """Why a server cannot listen on ``host:port`` now (None: it can): bound and
    released at once, as the servers bind (address reuse on, so a port in
    TIME_WAIT is free, a port another process listens on is not)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"{host}: {exc.strerror or exc}"
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


class LoopServer:
    start_timeout = 10.0  # seconds start() waits for the server to listen

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._down_until = 0.0  # monotonic time before which no connection is accepted

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        """What serves, for the log and errors."""
        return type(self).__name__

    # -- the protocol's part ---------------------------------------------------

    async def _serve(self) -> None:
        """Serve until ``self._stopping`` is set, listening again after a drop once
        :meth:`_down_for` is 0; call :meth:`_listening` once the port listens."""
        raise NotImplementedError

    async def _close_connections(self) -> None:
        """Stop listening and close every connection."""
        raise NotImplementedError

    # -- running ---------------------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        await self._serve()

    def serve(self) -> None:
        """Run in the foreground until SIGINT or SIGTERM, then stop as :meth:`stop`
        does. Not by cancelling the serving task (asyncio.run's SIGINT): a server
        task that swallows the cancellation (pymodbus' may) left it serving on."""

        async def serve_until_signalled():
            loop = asyncio.get_running_loop()

            def signalled():
                if self._stopping.is_set():  # a second signal: at once
                    os._exit(130)
                asyncio.ensure_future(self._stop_serving())
                loop.call_later(STOP_GRACE, os._exit, 1)  # a stop that hangs still ends

            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, signalled)
            await self.run()

        asyncio.run(serve_until_signalled())

    async def _stop_serving(self) -> None:
        self._stopping.set()
        await self._close_connections()

    def start(self, timeout: float | None = None):
        """Run in a background thread (green under eventlet, see above); returns
        once the port listens."""

        def target():
            try:
                asyncio.run(self.run())
            except BaseException as exc:  # reported to start()'s caller
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=target, name=f"{type(self).__name__}-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout or self.start_timeout) or self._error:
            raise RuntimeError(f"{self.describe()} did not start on {self.address}: {self._error}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return

        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._stop_serving()))
        self._thread.join(timeout)

    def _listening(self) -> None:
        if not self._ready.is_set():
            log.info("%s on %s", self.describe(), self.address)
            self._ready.set()

    def _on_loop(self, fn: Callable, *args, timeout: float = 10.0):
        """Run ``fn`` on the server's loop (every state change happens there), wait
        for it and return its result."""

        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout)

    # -- down time -------------------------------------------------------------

    async def drop_connections(self, seconds: float) -> None:
        """Every connection dropped; none accepted for ``seconds``."""
        self._down_until = time.monotonic() + seconds
        await self._close_connections()

    def _down_for(self) -> float:
        """Seconds before a connection may be accepted again (0: now)."""
        return max(0.0, self._down_until - time.monotonic())

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the server stops meanwhile."""
        if 0 < seconds <= SHORT_PAUSE:
            # A tick: a stop waits no longer than that, and a plain sleep spares the
            # task and timer wait_for makes on each call (200 times a second).
            await asyncio.sleep(seconds)
        elif seconds > 0 and not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), seconds)
            except TimeoutError:
                pass
