"""The OPC UA driver of the device port (deploy/OPCUA_MAP.md; nodes in
:mod:`services.hardware.opcua_map`).

Signals arrive by subscription: every variable of the map is a monitored item,
and a local copy of their values answers every read (``robot_status``,
``read_state``, …) without a round trip. Commands are method calls that return
at once with ``Accepted``; the handshake then watches the acknowledged ids, as
over Modbus.

Threads. asyncua is asyncio; the hardware service runs on eventlet, whose
patched threads cannot host an asyncio loop safely (eventlet #673: a green
lock contended across OS threads never wakes its waiter). So the loop runs in
a real OS thread (``eventlet.patcher.original("threading")``) with the
original selector, resolver and ``os``, and it never touches a green
primitive: results go back through :class:`_GreenWaker`, a deque under a real
lock plus a pipe the hub watches, drained by one green thread that wakes the
waiting green threads (an ``eventlet.event.Event`` each). The OS thread logs
nothing itself (logging's handler locks are green): asyncua's records and the
driver's own are handed over the same way.

Sessions. One supervisor coroutine connects, reads every value, subscribes,
and waits for the session's loss (asyncua's ``connection_lost_callback``); then
it marks the link lost (the watcher's ``PlcConnection`` edge), backs off
(0.1 s doubling to 2 s) and starts over, by itself, until :meth:`close`. On
each reconnect the values read (and the subscription's first notifications)
go in as a new picture: the watcher finds the differences, nothing is lost.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import eventlet
import eventlet.event
import eventlet.hubs
import eventlet.patcher

from services.hardware import opcua_map as M
from services.hardware.device.modbus import state_picture
from services.hardware.device.port import DevicePort, MachineAnswer, PlcUnavailable, RobotBusy, RobotStatus
from shared.layout import Layout

_threading = eventlet.patcher.original("threading")
_socket = eventlet.patcher.original("socket")
_selectors = eventlet.patcher.original("selectors")
_select = eventlet.patcher.original("select")
_os = eventlet.patcher.original("os")

log = logging.getLogger(__name__)

PUBLISHING_INTERVAL_MS = 10   # the subscription's publishing interval
QUEUE_SIZE = 16               # values the server keeps per item between publishes: no edge is lost
# Seconds between reconnect attempts (an action waiting for the link asks for one at once).
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 1.0
# Opening a session (hello, secure channel, session, activation) may take this many request timeouts.
CONNECT_TIMEOUTS = 2
MAX_PENDING_PICTURES = 10000  # pictures kept for the watcher (a watcher that stopped draining loses the oldest)
CLIENT_APP_URI = "urn:linectl:hardware"


class _GreenWaker:
    """Runs callables in the eventlet hub's thread on behalf of another OS thread.

    :meth:`post` (any thread) appends under a real lock, then writes a byte to a
    pipe; one green thread waits for the pipe through the hub and runs every
    callable queued. The byte is written after the append and the deque drained
    after the byte is read, so no wake-up is lost."""

    def __init__(self):
        self._read_fd, self._write_fd = _os.pipe()
        _os.set_blocking(self._read_fd, False)
        _os.set_blocking(self._write_fd, False)
        self._lock = _threading.Lock()
        self._calls: collections.deque = collections.deque()
        self._closed = False
        self.posted = 0
        self._reader = eventlet.spawn(self._run)

    def post(self, fn) -> None:
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
                    log.exception("OPC UA driver: a hand-over failed")

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


class _ThreadLoop(asyncio.SelectorEventLoop):
    """An asyncio loop for a real OS thread of an eventlet-patched process: the
    original selector, and name resolution in this thread (asyncio's default
    executor would start green threads no hub here ever runs)."""

    def __init__(self):
        super().__init__(_PollSelector())

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        return _socket.getaddrinfo(host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        return _socket.getnameinfo(sockaddr, flags)


_driver_threads: set[int] = set()  # idents of the drivers' OS threads
_log_waker: _GreenWaker | None = None


def _install_log_hand_over() -> None:
    """Once, from the hub's thread (the waker's green thread lives there): every
    log record made in a driver's thread is handled in the hub's thread instead.

    Handlers' locks are green after monkey-patching (pytest's, a file handler's)
    and a green lock contended across OS threads hangs; asyncua, asyncio and
    their helpers log from the driver's thread through any logger, so the
    diversion is at ``Logger.handle``, for every logger, for those threads only."""
    global _log_waker
    if _log_waker is not None:
        return
    _log_waker = _GreenWaker()
    # Two locks every log call may take are green too (eventlet greens the RLocks
    # that exist when it patches): logging's module lock (getLogger, isEnabledFor)
    # and threading's registry lock (a LogRecord asks current_thread()). Real locks
    # instead: both are held for a few statements, never across a green switch.
    logging._lock = _threading.RLock()
    sys.modules["threading"]._active_limbo_lock = _threading.RLock()
    handle = logging.Logger.handle

    def handle_in_the_hub(logger: logging.Logger, record: logging.LogRecord) -> None:
        if _threading.get_ident() in _driver_threads:
            _log_waker.post(lambda: handle(logger, record))
        else:
            handle(logger, record)

    logging.Logger.handle = handle_in_the_hub
    asyncua_log = logging.getLogger("asyncua")
    # asyncua logs every request and publish at INFO: warnings and worse are news.
    if asyncua_log.level < logging.WARNING:
        asyncua_log.setLevel(logging.WARNING)


def _link_error(exc: BaseException, what: str) -> PlcUnavailable:
    if isinstance(exc, PlcUnavailable):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return PlcUnavailable("MODBUS_TIMEOUT", f"{what}: no answer in time")
    return PlcUnavailable("CONNECTION_REFUSED", f"{what}: {type(exc).__name__}: {exc}"[:300])


def parse_url(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "opc.tcp" or not parts.hostname or port is None:
        raise ValueError(f"expected opc.tcp://host:port[/path], got {url!r}")
    return url


class OpcUaPort(DevicePort):
    protocol = "opcua"

    def __init__(self, url: str, layout: Layout, timeout: float = 2.0, options: dict | None = None):
        if layout.plc is None:
            raise ValueError("the line layout has no plc: map (stations and devices, see deploy/OPCUA_MAP.md)")
        self.url = parse_url(url)
        self.layout = layout
        self.timeout = timeout
        self.options = dict(options or {})
        security = self.options.get("security") or "none"
        if security not in ("none", "sign-and-encrypt"):
            raise ValueError(f"OPC UA security: expected 'none' or 'sign-and-encrypt', got {security!r}")
        self.security = security
        if security != "none" and not (self.options.get("user") and self.options.get("password")):
            raise ValueError("OPC UA sign-and-encrypt needs LINECTL_OPCUA_USER and LINECTL_OPCUA_PASSWORD")
        self.node_ids = M.node_ids(layout)  # LayoutError for an unknown name in the layout's opcua:
        self._signals = M.signals(layout)
        self._watched = [s.key for s in self._signals if self._is_watched(s)]
        self._lock = _threading.Lock()  # the values and the pictures, between the two threads
        self._values: dict[str, Any] = {}
        self._connected = False
        self._ever_connected = False
        self._error = f"no OPC UA session with {self.url} yet"
        self._pictures: collections.deque = collections.deque(maxlen=MAX_PENDING_PICTURES)
        self._delivered_any = False
        self._batch: set[str] = set()  # keys changed since the last picture
        self._picture_due = False
        self.sessions = 0  # sessions established (a reconnect adds one)
        self.notifications = 0
        self._client = None
        self._nodes: dict = {}
        self._namespaces: list[str] = []
        self._key_of: dict = {}
        self._changed = eventlet.event.Event()
        self._first_session = eventlet.event.Event()
        self._link_back = eventlet.event.Event()
        self._answer = eventlet.event.Event()  # replaced at each wake: every waiter wakes once
        self._startup_waited = False
        self._waker = _GreenWaker()
        _install_log_hand_over()
        self._credentials = self._load_credentials() if security != "none" else None
        self._loop = _ThreadLoop()
        self._stop: asyncio.Event | None = None
        self._retry_now: asyncio.Event | None = None  # set: reconnect now, not after the back-off
        self._thread = _threading.Thread(target=self._thread_main, name="opcua-driver", daemon=True)
        self._thread.start()

    @staticmethod
    def _is_watched(signal: M.Signal) -> bool:
        name = signal.path[-1]
        if signal.device in (M.ROBOT, M.DOCK, M.BUFFER):
            return True
        return name in (M.SLOT_WATCHED if len(signal.path) == 2 else M.MACHINE_WATCHED)

    @property
    def address(self) -> str:
        return self.url

    # -- credentials (read here, in the green thread: plain files) ---------------

    def _load_credentials(self) -> dict[str, Any]:
        from services.hardware.opcua_certs import ensure_certificate, read_certificate

        opts = self.options
        if opts.get("cert") and opts.get("key"):
            cert, cert_format = read_certificate(Path(opts["cert"]))
            key = Path(opts["key"]).read_bytes()
        elif opts.get("cert") or opts.get("key"):
            raise ValueError("LINECTL_OPCUA_CERT and LINECTL_OPCUA_KEY go together")
        else:
            cert, key = ensure_certificate(Path(opts.get("data_dir") or "var") / "opcua", "linectl-hardware",
                                           CLIENT_APP_URI, server=False)
            cert_format = "der"
        server_cert = read_certificate(Path(opts["server_cert"])) if opts.get("server_cert") else None
        key_format = "pem" if key.lstrip().startswith(b"-----BEGIN") else "der"
        return {"cert": (cert, cert_format), "key": (key, key_format), "server_cert": server_cert,
                "user": str(opts["user"]), "password": str(opts["password"])}

    # -- the driver's thread ------------------------------------------------------

    def _thread_main(self) -> None:
        _driver_threads.add(_threading.get_ident())
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._supervise())
        finally:
            self._loop.close()
            _driver_threads.discard(_threading.get_ident())

    def _say(self, level: int, message: str, *args) -> None:
        """Log from the driver's thread (in the hub's thread)."""
        self._waker.post(lambda: log.log(level, message, *args))

    async def _supervise(self) -> None:
        self._stop = asyncio.Event()
        self._retry_now = asyncio.Event()
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            client = None
            try:
                client, lost = await self._open_session()
                delay = BACKOFF_FIRST
                stop = asyncio.ensure_future(self._stop.wait())
                gone = asyncio.ensure_future(lost.wait())
                await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                gone.cancel()
                reason = lost.reason if lost.is_set() else "closed"
            except Exception as exc:  # refused, timed out, rejected credentials, …
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self._mark_lost(f"OPC UA session with {self.url} lost: {reason}"[:300])
            if client is not None:
                try:
                    await asyncio.wait_for(client.disconnect(), 1.0)
                except Exception:
                    pass
            if self._stop.is_set():
                break
            # The back-off, cut short by an action waiting for the link: it is not left
            # waiting out a long back-off once the PLC is back (its grace would run out).
            stop = asyncio.ensure_future(self._stop.wait())
            retry = asyncio.ensure_future(self._retry_now.wait())
            await asyncio.wait({stop, retry}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            retry.cancel()
            self._retry_now.clear()
            delay = min(delay * 2, BACKOFF_MAX)

    async def _open_session(self):
        from asyncua import Client, ua
        from asyncua.crypto import security_policies

        # asyncua probes the server's state every watchdog interval and gives the probe
        # that long to answer (min(session timeout / 2, interval)): at 1 s a busy server
        # or host lost the session for nothing. The request timeout is the bound.
        client = Client(self.url, timeout=self.timeout, watchdog_intervall=max(self.timeout, 1.0))
        client.application_uri = CLIENT_APP_URI
        client.session_timeout = 600_000  # what servers grant (asyncua asks an hour, then warns)
        client.name = client.description = "linectl hardware service"
        lost = asyncio.Event()
        lost.reason = ""

        async def on_lost(exc):
            lost.reason = f"{type(exc).__name__}: {exc}"
            lost.set()

        client.connection_lost_callback = on_lost
        if self._credentials is not None:
            c = self._credentials
            from asyncua.crypto import uacrypto

            server_cert = (uacrypto.CertProperties(c["server_cert"][0], extension=c["server_cert"][1])
                           if c["server_cert"] else None)
            await client.set_security(
                security_policies.SecurityPolicyBasic256Sha256,
                uacrypto.CertProperties(c["cert"][0], extension=c["cert"][1]),
                uacrypto.CertProperties(c["key"][0], extension=c["key"][1]),
                server_certificate=server_cert, mode=ua.MessageSecurityMode.SignAndEncrypt)
            client.set_user(c["user"])
            client.set_password(c["password"])
        await asyncio.wait_for(client.connect(), self.timeout * CONNECT_TIMEOUTS)
        try:
            namespaces = await client.get_namespace_array()
            self._namespaces = namespaces
            nodes = {key: client.get_node(self._resolve(self.node_ids[key], namespaces, ua))
                     for key in [*self._watched, *M.devices(self.layout), *(m.key for m in M.methods(self.layout))]}
            self._nodes = nodes
            watched = [nodes[k] for k in self._watched]
            self._key_of = {n.nodeid: k for k, n in zip(self._watched, watched, strict=True)}
            values = await client.read_values(watched)
            with self._lock:
                self._values = dict(zip(self._watched, values, strict=True))
                self._connected = True
                self._ever_connected = True
                self._batch.clear()
                self._pictures.append(self._picture_locked())
                self.sessions += 1
                self._client = client
            self._waker.post(self._wake_watchers)
            self._say(logging.INFO, "OPC UA session with %s (security %s)", self.url, self.security)
            sub = await client.create_subscription(PUBLISHING_INTERVAL_MS, _Notifications(self))
            await sub.subscribe_data_change(watched, queuesize=QUEUE_SIZE)
        except BaseException:
            try:
                await asyncio.wait_for(client.disconnect(), 1.0)
            except Exception:
                pass
            raise
        return client, lost

    @staticmethod
    def _resolve(node_id: str, namespaces: list[str], ua):
        """A NodeId string, ``nsu=<uri>;…`` resolved against the server's namespace array."""
        if node_id.startswith("nsu="):
            uri, _, rest = node_id[4:].partition(";")
            if uri not in namespaces:
                raise PlcUnavailable("PLC_ERROR", f"the server has no namespace {uri!r} (deploy/OPCUA_MAP.md)")
            node_id = f"ns={namespaces.index(uri)};{rest}"
        return ua.NodeId.from_string(node_id)

    def _on_value(self, node_id, value) -> None:
        """One data-change notification (in the driver's thread)."""
        key = self._key_of.get(node_id)
        if key is None:
            return
        with self._lock:
            self.notifications += 1
            if key in self._batch:  # a second value of the same item in one publish: keep the first visible
                self._pictures.append(self._picture_locked())
                self._batch.clear()
            self._values[key] = value
            self._batch.add(key)
            due, self._picture_due = self._picture_due, True
        if not due:
            # after every notification of this publish response (each is a task already scheduled)
            asyncio.get_running_loop().call_soon(self._close_batch)

    def _close_batch(self) -> None:
        with self._lock:
            self._picture_due = False
            if not self._batch or not self._connected:
                return
            self._batch.clear()
            self._pictures.append(self._picture_locked())
        self._waker.post(self._wake_watchers)

    def _mark_lost(self, message: str) -> None:
        with self._lock:
            was = self._connected
            self._connected = False
            self._error = message
            self._client = None
            if was:
                self._pictures.append(PlcUnavailable("CONNECTION_REFUSED", message))
        if was:
            self._say(logging.WARNING, "%s", message)
            self._waker.post(self._wake_watchers)

    def _wake_watchers(self) -> None:  # in the hub's thread
        if self._connected and not self._link_back.ready():  # actions waiting for the link first
            self._link_back.send(True)
        if not self._changed.ready():
            self._changed.send(True)
        # Actions waiting for their answer. No wake-up is lost: a waiter reads the
        # values and then waits with no green switch between, and this runs green.
        answer, self._answer = self._answer, eventlet.event.Event()
        answer.send(True)
        if not self._first_session.ready() and self._ever_connected:
            self._first_session.send(True)

    # -- calls from green threads ------------------------------------------------

    def _run(self, make_coro, what: str, timeout: float | None = None):
        """Run ``make_coro()`` on the driver's loop; the calling green thread waits
        (the hub runs the others). Raises a link failure when it fails or takes longer
        than ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        done = eventlet.event.Event()

        async def run():
            try:
                outcome = (True, await asyncio.wait_for(make_coro(), timeout))
            except BaseException as exc:  # handed over, raised in the caller
                outcome = (False, exc)
            self._waker.post(lambda: done.send(outcome))

        try:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(run()))
        except RuntimeError:  # the port is closed
            raise PlcUnavailable("CONNECTION_REFUSED", f"{what}: the OPC UA driver is closed") from None
        with eventlet.Timeout(timeout + 1.0, False):
            ok, value = done.wait()
            if ok:
                return value
            raise _link_error(value, what) if not _is_status_error(value) else PlcUnavailable(
                "PLC_ERROR", f"{what}: the server answered {value}")
        raise PlcUnavailable("MODBUS_TIMEOUT", f"{what}: no answer within {timeout + 1.0:g}s")

    def _require_session(self):
        """The values now, or a link failure when no session is up. Before the very
        first session, waits for it as long as opening one may take (the service is
        starting): the connect's bound, two request timeouts, and one more for the
        reads that follow. A secured session's handshake on a busy host takes longer
        than one request timeout without anything being wrong."""
        if not self._ever_connected and not self._startup_waited:
            with eventlet.Timeout(self.timeout * (CONNECT_TIMEOUTS + 1), False):
                self._first_session.wait()
            self._startup_waited = True  # once: later calls fail at once while the PLC is away
        with self._lock:
            if not self._connected:
                raise PlcUnavailable("CONNECTION_REFUSED", self._error)
            return dict(self._values)

    def _call_method(self, device_key: str, method_key: str, args: list) -> bool:
        """Call a command method; True when it answered Accepted. A link failure
        before the call went out is raised; after, it is not (the handshake finds out)."""
        from asyncua import ua

        with self._lock:
            client = self._client
        if client is None or not self._connected:
            raise PlcUnavailable("CONNECTION_REFUSED", self._error)
        obj, method = self._nodes[device_key], self._nodes[method_key].nodeid
        variants = [ua.Variant(v, getattr(ua.VariantType, t.removesuffix("[]"))) for v, t in args]
        try:
            result = self._run(lambda: obj.call_method(method, *variants), f"{method_key} at {self.url}")
        except PlcUnavailable as exc:
            if exc.code == "PLC_ERROR":
                raise
            return True  # it may have gone out: the acknowledged ids say
        return bool(result[0] if isinstance(result, list) else result)

    def call(self, object_node_id: str, method_node_id: str, args: list[tuple[Any, str]]) -> list:
        """Call any method of the server (NodeId strings as in the layout; args as
        (value, variant type name)): for tools and the simulator's SimControl."""
        from asyncua import ua

        self._require_session()
        with self._lock:
            client, namespaces = self._client, self._namespaces
        if client is None:
            raise PlcUnavailable("CONNECTION_REFUSED", self._error)
        obj = client.get_node(self._resolve(object_node_id, namespaces, ua))
        method = self._resolve(method_node_id, namespaces, ua)
        variants = [ua.Variant(v, getattr(ua.VariantType, t.removesuffix("[]"))) for v, t in args]
        return self._run(lambda: obj.call_method(method, *variants), f"{method_node_id} at {self.url}") or []

    # -- the port ---------------------------------------------------------------

    def robot_status(self) -> RobotStatus:
        v = self._require_session()
        return RobotStatus(int(v["Robot.Fault"]), int(v["Robot.AckId"]), int(v["Robot.State"]),
                           int(v["Robot.DoneId"]), int(v["Robot.ErrorCode"]))

    def send_robot_command(self, action_id: int, command) -> None:
        args = [(action_id, M.UINT16), (command.code, M.UINT16), (command.src[0], M.UINT16),
                (command.src[1], M.UINT16), (command.dst[0], M.UINT16), (command.dst[1], M.UINT16),
                (command.aux_slot, M.UINT16), (command.job_id, M.UINT32), (command.job2_id, M.UINT32),
                (command.text or "", M.STRING)]
        if not self._call_method(M.ROBOT, f"{M.ROBOT}.Execute", args):
            raise RobotBusy(f"robot action {action_id}: the PLC did not accept it (the robot is busy)")

    def scan_text(self) -> str:
        return str(self._require_session()["Robot.ScanText"] or "")

    def start_machine(self, equipment_id: str, action_id: int, jobs: dict[int, int]) -> None:
        slots = sorted(jobs)
        args = [(action_id, M.UINT16), (slots, M.UINT16 + "[]"), ([jobs[s] for s in slots], M.UINT32 + "[]")]
        self._call_method(equipment_id, f"{equipment_id}.Start", args)  # answered in AckId / ErrorCode

    def machine_answer(self, equipment_id: str) -> MachineAnswer:
        v = self._require_session()
        return MachineAnswer(int(v[f"{equipment_id}.AckId"]), int(v[f"{equipment_id}.ErrorCode"]))

    def abort_machine(self, equipment_id: str, action_id: int) -> None:
        self._call_method(equipment_id, f"{equipment_id}.Abort", [(action_id, M.UINT16)])

    def abort_answer(self, equipment_id: str) -> int:
        return int(self._require_session()[f"{equipment_id}.AbortAckId"])

    def answered_action_ids(self) -> list[int]:
        v = self._require_session()
        return [int(v["Robot.AckId"]), int(v["Robot.DoneId"])] + [int(v[f"{e.equipment_id}.AckId"])
                                                                  for e in self.layout.plc.equipment]

    def _picture_locked(self) -> dict[str, Any]:
        v = self._values
        robot = RobotStatus(int(v["Robot.Fault"]), int(v["Robot.AckId"]), int(v["Robot.State"]),
                            int(v["Robot.DoneId"]), int(v["Robot.ErrorCode"]))
        buffer = [int(bool(v[f"Buffer.{M.slot_name(i)}"])) for i in range(1, self.layout.buffer_slots + 1)]
        machines = []
        for e in self.layout.plc.equipment:
            slots = []
            for n in range(1, e.slots + 1):
                k = f"{e.equipment_id}.{M.slot_name(n)}"
                slots.append({"occupied": bool(v[f"{k}.Occupied"]), "running": bool(v[f"{k}.Running"]),
                              "done": bool(v[f"{k}.Done"]), "result": int(v[f"{k}.ResultEvaluation"] or 0),
                              "jobId": int(v[f"{k}.JobId"] or 0)})
            machines.append((e.equipment_id, int(bool(v[f"{e.equipment_id}.Running"])),
                             int(v[f"{e.equipment_id}.Fault"]), slots))
        return state_picture(self.layout, robot, int(v["Dock.Pieces"]), int(v["Dock.Arrivals"]), buffer, machines)

    def read_state(self) -> dict[str, Any]:
        self._require_session()
        with self._lock:
            if not self._connected:
                raise PlcUnavailable("CONNECTION_REFUSED", self._error)
            return self._picture_locked()

    def state_changes(self) -> list[dict[str, Any] | PlcUnavailable]:
        if not self._ever_connected:  # starting: not "lost" before the first session had a chance
            try:
                self._require_session()
            except PlcUnavailable:
                pass
        self._changed = eventlet.event.Event()  # before draining: a later change wakes the next wait
        with self._lock:
            changes = list(self._pictures)
            self._pictures.clear()
            connected, error = self._connected, self._error
        if not changes and not self._delivered_any:
            if not connected:
                raise PlcUnavailable("CONNECTION_REFUSED", error)
            changes = [self.read_state()]
        self._delivered_any = self._delivered_any or any(isinstance(c, dict) for c in changes)
        return changes

    def wait_for_change(self, timeout: float) -> bool:
        with self._lock:
            pending = bool(self._pictures)
        if pending:
            return True
        with eventlet.Timeout(timeout, False):
            self._changed.wait()
            return True
        return False

    def wait_for_answer(self, timeout: float) -> None:
        answer = self._answer
        with eventlet.Timeout(timeout, False):
            answer.wait()

    def wait_for_link(self, timeout: float) -> None:
        with self._lock:
            if self._connected:
                return
        if self._link_back.ready():
            self._link_back = eventlet.event.Event()
        retry_now = self._retry_now
        if retry_now is not None:  # try now, as a Modbus request would reconnect
            try:
                self._loop.call_soon_threadsafe(retry_now.set)
            except RuntimeError:  # the loop has closed (the port is closing)
                pass
        with eventlet.Timeout(timeout, False):
            self._link_back.wait()

    def close(self) -> None:
        """End the session and the driver's thread. Waited for green (a join would
        block the hub, and with it a simulator served in this process)."""
        if self._thread.is_alive() and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop has closed already
                pass
        deadline = time.monotonic() + 5.0
        while self._thread.is_alive() and time.monotonic() < deadline:
            eventlet.sleep(0.01)
        self._waker.close()


def _is_status_error(exc: BaseException) -> bool:
    from asyncua import ua

    return isinstance(exc, ua.UaStatusCodeError)


class _Notifications:
    """asyncua's subscription handler (called on the driver's loop)."""

    def __init__(self, port: OpcUaPort):
        self.port = port

    def datachange_notification(self, node, value, data) -> None:
        self.port._on_value(node.nodeid, value)

    def status_change_notification(self, status) -> None:
        pass  # a lost session is seen by connection_lost_callback
