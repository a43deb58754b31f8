"""An asyncio loop in a real OS thread of an eventlet-patched process, awaited
from green threads.

Why an OS thread: eventlet's patched threads cannot host an asyncio loop safely
(eventlet #673: a green lock contended across OS threads never wakes its
waiter). So the loop runs in a real thread (``eventlet.patcher.original``) with
the original selector, resolver and ``os``, and it never touches a green
primitive: results go back through :class:`GreenWaker`, a deque under a real
lock plus a pipe the hub watches, drained by one green thread that runs the
callables handed over (typically waking a waiting green thread's
``eventlet.event.Event``). The loop's thread logs nothing itself (logging's
handler locks are green): every record made there is handed over the same way
(:func:`install_log_hand_over`).

:class:`LoopThread` puts these together: start a main coroutine in the thread,
run a coroutine from a green thread and wait for its result green, hand a
callable to the hub, stop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import eventlet
import eventlet.event
import eventlet.hubs
import eventlet.patcher

os_threading = eventlet.patcher.original("threading")  # real threads and locks
_socket = eventlet.patcher.original("socket")
_selectors = eventlet.patcher.original("selectors")
_select = eventlet.patcher.original("select")
_os = eventlet.patcher.original("os")

log = logging.getLogger(__name__)


class LoopClosed(Exception):
    """The loop has stopped: nothing can be run on it any more."""


class NoAnswer(Exception):
    """A coroutine run from a green thread gave no result in time."""


class CallFailed(Exception):
    """A coroutine run from a green thread raised ``cause`` (any BaseException)."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class GreenWaker:
    """Runs callables in the eventlet hub's thread on behalf of another OS thread.

    :meth:`post` (any thread) appends under a real lock, then writes a byte to a
    pipe; one green thread waits for the pipe through the hub and runs every
    callable queued. The byte is written after the append and the deque drained
    after the byte is read, so no wake-up is lost."""

    def __init__(self):
        self._read_fd, self._write_fd = _os.pipe()
        _os.set_blocking(self._read_fd, False)
        _os.set_blocking(self._write_fd, False)
        self._lock = os_threading.Lock()
        self._calls: collections.deque = collections.deque()
        self._closed = False
        self.posted = 0
        self._reader = eventlet.spawn(self._run)

    def post(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            if self._closed:
                return
            self._calls.append(fn)
            self.posted += 1
        try:
            _os.write(self._write_fd, b"\0")
        except BlockingIOError:  # the pipe is full: the reader is due to wake anyway
            pass
        except OSError:  # closed meanwhile
            pass

    def _run(self) -> None:
        while not self._closed:
            try:
                eventlet.hubs.trampoline(self._read_fd, read=True)
                _os.read(self._read_fd, 65536)
            except BlockingIOError:
                pass
            except (OSError, eventlet.hubs.IOClosed):
                return
            while True:
                with self._lock:
                    if not self._calls:
                        break
                    fn = self._calls.popleft()
                try:
                    fn()
                except Exception:
                    log.exception("asyncio bridge: a hand-over failed")

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._reader.kill()
        for fd in (self._read_fd, self._write_fd):
            try:
                _os.close(fd)
            except OSError:
                pass


class _PollSelector(_selectors._PollLikeSelector):
    """The stdlib's PollSelector on the C ``select.poll`` (eventlet patches ``select``
    in place: the selectors module, even "original", would pick its green select)."""

    _selector_cls = _select.poll
    _EVENT_READ = _select.POLLIN
    _EVENT_WRITE = _select.POLLOUT


class ThreadLoop(asyncio.SelectorEventLoop):
    """An asyncio loop for a real OS thread of an eventlet-patched process: the
    original selector, and name resolution in this thread (asyncio's default
    executor would start green threads no hub here ever runs)."""

    def __init__(self):
        super().__init__(_PollSelector())

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        return _socket.getaddrinfo(host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        return _socket.getnameinfo(sockaddr, flags)


_loop_threads: set[int] = set()  # idents of the loops' OS threads
_log_waker: GreenWaker | None = None


def install_log_hand_over() -> bool:
    """Once, from the hub's thread (the waker's green thread lives there): every
    log record made in a loop's thread is handled in the hub's thread instead.
    True the first time (it was installed now).

    Handlers' locks are green after monkey-patching (pytest's, a file handler's)
    and a green lock contended across OS threads hangs; the libraries a loop runs
    log from its thread through any logger, so the diversion is at
    ``Logger.handle``, for every logger, for those threads only."""
    global _log_waker
    if _log_waker is not None:
        return False
    _log_waker = GreenWaker()
    # Two locks every log call may take are green too (eventlet greens the RLocks
    # that exist when it patches): logging's module lock (getLogger, isEnabledFor)
    # and threading's registry lock (a LogRecord asks current_thread()). Real locks
    # instead: both are held for a few statements, never across a green switch.
    logging._lock = os_threading.RLock()
    sys.modules["threading"]._active_limbo_lock = os_threading.RLock()
    handle = logging.Logger.handle

    def handle_in_the_hub(logger: logging.Logger, record: logging.LogRecord) -> None:
        if os_threading.get_ident() in _loop_threads:
            _log_waker.post(lambda: handle(logger, record))
        else:
            handle(logger, record)

    logging.Logger.handle = handle_in_the_hub
    return True


class LoopThread:
    """A :class:`ThreadLoop` running one main coroutine in its own OS thread,
    and the means for green threads to use it."""

    def __init__(self, name: str):
        self.waker = GreenWaker()
        install_log_hand_over()
        self.loop = ThreadLoop()
        self._main: Callable[[], Awaitable[Any]] | None = None
        self._thread = os_threading.Thread(target=self._thread_main, name=name, daemon=True)

    def start(self, main: Callable[[], Awaitable[Any]]) -> None:
        """Run ``main()`` on the loop, in the thread, until it returns."""
        self._main = main
        self._thread.start()

    def _thread_main(self) -> None:
        _loop_threads.add(os_threading.get_ident())
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()
            _loop_threads.discard(os_threading.get_ident())

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def post(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` in the hub's thread (from the loop's thread)."""
        self.waker.post(fn)

    def call_soon(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` on the loop (from any thread); False when the loop has closed."""
        try:
            self.loop.call_soon_threadsafe(fn)
            return True
        except RuntimeError:
            return False

    def run(self, make_coro: Callable[[], Awaitable[Any]], timeout: float, grace: float = 1.0) -> Any:
        """Run ``make_coro()`` on the loop within ``timeout``; the calling green thread
        waits (the hub runs the others). Raises :class:`CallFailed` (the coroutine
        raised, or timed out), :class:`LoopClosed`, or :class:`NoAnswer` when no
        result came back within ``timeout + grace``."""
        done = eventlet.event.Event()

        async def run():
            try:
                outcome = (True, await asyncio.wait_for(make_coro(), timeout))
            except BaseException as exc:  # handed over, raised in the caller
                outcome = (False, exc)
            self.waker.post(lambda: done.send(outcome))

        if not self.call_soon(lambda: asyncio.ensure_future(run())):
            raise LoopClosed("the loop has closed")
        with eventlet.Timeout(timeout + grace, False):
            ok, value = done.wait()
            if ok:
                return value
            raise CallFailed(value) from value
        raise NoAnswer(f"no answer within {timeout + grace:g}s")

    def close(self, stop: Callable[[], Any], wait: float = 5.0) -> None:
        """Call ``stop()`` on the loop (it should end the main coroutine) and wait for
        the thread green, at most ``wait`` seconds (a join would block the hub, and
        with it anything else this process serves)."""
        if self._thread.is_alive():
            self.call_soon(stop)
        deadline = time.monotonic() + wait
        while self._thread.is_alive() and time.monotonic() < deadline:
            eventlet.sleep(0.01)
        self.waker.close()
