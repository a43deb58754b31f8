"""The OPC UA driver of the device port (deploy/OPCUA_MAP.md; nodes in
:mod:`services.hardware.opcua_map`).

Signals arrive by subscription: every variable of the map is a monitored item,
and a local copy of their values answers every read (``robot_status``,
``read_state``, …) without a round trip. Commands are method calls that return
at once with ``Accepted``; the handshake then watches the acknowledged ids, as
over Modbus.

Threads. asyncua is asyncio; the hardware service runs on eventlet. The
driver's loop runs in an OS thread of its own and is awaited from green threads
(:mod:`.asyncio_bridge`). Opening a session is :mod:`.opcua_session`; the
local copy of the values and the pictures the watcher reads, :mod:`.opcua_values`.

Sessions. One supervisor coroutine connects, reads every value, subscribes,
and waits for the session's loss (asyncua's ``connection_lost_callback``); then
it marks the link lost (the watcher's ``PlcConnection`` edge), backs off
(0.1 s doubling to 1 s) and starts over, by itself, until :meth:`close`. On
each reconnect the values read (and the subscription's first notifications)
go in as a new picture: the watcher finds the differences, nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import eventlet
import eventlet.event

from services.hardware import opcua_map as M
from services.hardware.device.asyncio_bridge import CallFailed, LoopClosed, LoopThread, NoAnswer
from services.hardware.device.identity import IdentityCheck
from services.hardware.device.opcua_errors import ProblemLog, quiet_asyncua, why_no_session
from services.hardware.device.opcua_session import (
    CONNECT_TIMEOUTS,
    connect,
    disconnect,
    granted_text,
    link_error,
    load_credentials,
    read_identity,
    resolve,
    subscribe,
    variants,
)
from services.hardware.device.opcua_values import ValueCopy, robot_status, watched_keys
from services.hardware.device.port import (
    PLC_IDENTITY_MISMATCH,
    DevicePort,
    MachineAnswer,
    PlcUnavailable,
    RobotBusy,
    RobotStatus,
)
from shared.layout import Layout

log = logging.getLogger(__name__)

# Seconds between reconnect attempts (an action waiting for the link asks for one at once).
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 1.0


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

    def __init__(self, url: str, layout: Layout, timeout: float = 2.0, options: dict | None = None,
                 clock: Callable[[], float] = time.monotonic, identity: IdentityCheck | None = None):
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
        self.identity = identity  # checked on every session, before anything else (device/identity.py)
        self.node_ids = M.node_ids(layout)  # LayoutError for an unknown name in the layout's opcua:
        self._watched = watched_keys(layout)
        self._copy = ValueCopy(layout, f"no OPC UA session with {self.url} yet")
        self._delivered_any = False
        self._client = None
        self._nodes: dict = {}
        self._namespaces: list[str] = []
        self._key_of: dict = {}
        self._changed = eventlet.event.Event()
        self._first_session = eventlet.event.Event()
        self._link_back = eventlet.event.Event()
        self._answer = eventlet.event.Event()  # replaced at each wake: every waiter wakes once
        self._startup_waited = False
        self._server_refused = False  # the last session's server refused it (set in the driver's thread)
        self._credentials = load_credentials(self.options) if security != "none" else None
        self._bridge = LoopThread("opcua-driver")
        quiet_asyncua()
        self.problems = ProblemLog(self._say, clock)  # why no session opens, once a minute at most
        # Set on the driver's loop only (bound to it at their first wait there).
        self._stop = asyncio.Event()
        self._retry_now = asyncio.Event()  # set: reconnect now, not after the back-off
        self._bridge.start(self._supervise)

    @property
    def sessions(self) -> int:
        """Sessions established (a reconnect adds one)."""
        return self._copy.sessions

    @property
    def address(self) -> str:
        return self.url

    # -- the driver's thread ------------------------------------------------------

    def _say(self, level: int, message: str, *args) -> None:
        """Log from the driver's thread (in the hub's thread)."""
        self._bridge.post(lambda: log.log(level, message, *args))

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            client, code = None, "CONNECTION_REFUSED"
            try:
                client, lost = await self._open_session()
                self.problems.opened()
                self._server_refused = False
                delay = BACKOFF_FIRST
                stop = asyncio.ensure_future(self._stop.wait())
                gone = asyncio.ensure_future(lost.wait())
                await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                gone.cancel()
                message = f"OPC UA session with {self.url} lost: {lost.reason if lost.is_set() else 'closed'}"
            except Exception as exc:  # refused, timed out, rejected credentials, another PLC, …
                level, message = await why_no_session(exc, self.url, self.timeout, self._credentials, self.options)
                self.problems.failed(level, message)
                if isinstance(exc, PlcUnavailable) and exc.code == PLC_IDENTITY_MISMATCH:
                    code = exc.code
                # The server itself said no (user, certificates, endpoints): an answer, as a
                # refused PLC is. A timeout or nobody listening may still end in a session.
                self._server_refused = level >= logging.ERROR and not isinstance(exc, PlcUnavailable)
            self._mark_lost(message[:300], code)
            if client is not None:
                await disconnect(client)
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
        """Connect, read every watched value (the first picture), subscribe."""
        client, lost = await connect(self.url, self.timeout, self._credentials)
        try:
            namespaces = await client.get_namespace_array()
            if self.identity is not None:  # before any other request: another PLC gets none
                self.identity.check(await read_identity(client, self.node_ids[M.IDENTITY], namespaces))
            self._namespaces = namespaces
            nodes = {key: client.get_node(resolve(self.node_ids[key], namespaces))
                     for key in [*self._watched, *M.devices(self.layout), *(m.key for m in M.methods(self.layout))]}
            self._nodes = nodes
            watched = [nodes[k] for k in self._watched]
            self._key_of = {n.nodeid: k for k, n in zip(self._watched, watched, strict=True)}
            values = await client.read_values(watched)
            self._client = client
            self._copy.session_up(dict(zip(self._watched, values, strict=True)))
            self._bridge.post(self._wake_watchers)
            self._say(logging.INFO, "OPC UA session with %s (security %s)", self.url, self.security)
            granted = await subscribe(client, watched, _Notifications(self))
            self._say(logging.INFO, "OPC UA subscription at %s: %s", self.url, granted_text(granted))
        except BaseException:
            await disconnect(client)
            raise
        return client, lost

    def _on_value(self, node_id, value) -> None:
        """One data-change notification (in the driver's thread)."""
        key = self._key_of.get(node_id)
        if key is not None and self._copy.on_value(key, value):
            # after every notification of this publish response (each is a task already scheduled)
            asyncio.get_running_loop().call_soon(self._close_batch)

    def _close_batch(self) -> None:
        if self._copy.close_batch():
            self._bridge.post(self._wake_watchers)

    def _mark_lost(self, message: str, code: str = "CONNECTION_REFUSED") -> None:
        was = self._copy.session_lost(message, code)
        self._client = None
        if was:
            self._say(logging.WARNING, "%s", message)
        if was or code == PLC_IDENTITY_MISMATCH or self._server_refused:  # an answer: nobody waits for more
            self._bridge.post(self._wake_watchers)

    def _wake_watchers(self) -> None:  # in the hub's thread
        if self._copy.connected and not self._link_back.ready():  # actions waiting for the link first
            self._link_back.send(True)
        if not self._changed.ready():
            self._changed.send(True)
        # Actions waiting for their answer. No wake-up is lost: a waiter reads the
        # values and then waits with no green switch between, and this runs green.
        answer, self._answer = self._answer, eventlet.event.Event()
        answer.send(True)
        if not self._first_session.ready() and (self._copy.ever_connected or self._server_refused
                                                 or self._copy.error_code == PLC_IDENTITY_MISMATCH):
            self._first_session.send(True)  # the start-up wait ends: a session, or the PLC refused

    # -- calls from green threads ------------------------------------------------

    def _run(self, make_coro, what: str, timeout: float | None = None):
        """Run ``make_coro()`` on the driver's loop; the calling green thread waits
        (the hub runs the others). Raises a link failure when it fails or takes longer
        than ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        try:
            return self._bridge.run(make_coro, timeout)
        except CallFailed as failed:
            raise link_error(failed.cause, what) from None
        except LoopClosed:  # the port is closed
            raise PlcUnavailable("CONNECTION_REFUSED", f"{what}: the OPC UA driver is closed") from None
        except NoAnswer as exc:
            raise PlcUnavailable("MODBUS_TIMEOUT", f"{what}: {exc}") from None

    def _require_session(self):
        """The values now, or a link failure when no session is up. Before the very
        first session, waits for it as long as opening one may take (the service is
        starting): the connect's bound, two request timeouts, and one more for the
        reads that follow. A secured session's handshake on a busy host takes longer
        than one request timeout without anything being wrong. A refused connection
        does not end the wait: under ``linectl up`` the hardware service tries before
        the OPC UA simulator listens (measured under load: 3.7 s against 5-7 s), and
        ending the wait there would raise PLC_DISCONNECTED at nearly every start. A
        session the server refused (its user, a certificate, no such endpoint) does end
        it, as another PLC's identity does: no wait changes that answer."""
        if not self._copy.ever_connected and not self._startup_waited:
            with eventlet.Timeout(self.timeout * (CONNECT_TIMEOUTS + 1), False):
                self._first_session.wait()
            self._startup_waited = True  # once: later calls fail at once while the PLC is away
        return self._copy.snapshot()

    def _call_method(self, device_key: str, method_key: str, args: list) -> bool | None:
        """Call a command method: its ``Accepted`` (True: the PLC took it, and that is
        the acknowledgement, whether or not its ``AckId`` notification came yet), or
        None when the call went out and its answer was lost (the handshake finds
        out). A link failure before the call went out is raised."""
        client = self._client
        if client is None or not self._copy.connected:
            raise self._copy.failure()
        obj, method = self._nodes[device_key], self._nodes[method_key].nodeid
        inputs = variants(args)
        try:
            result = self._run(lambda: obj.call_method(method, *inputs), f"{method_key} at {self.url}")
        except PlcUnavailable as exc:
            if exc.code == "PLC_ERROR":
                raise
            return None  # it may have gone out: the acknowledged ids say
        return bool(result[0] if isinstance(result, list) else result)

    def call(self, object_node_id: str, method_node_id: str, args: list[tuple[Any, str]]) -> list:
        """Call any method of the server (NodeId strings as in the layout; args as
        (value, variant type name)): for tools and the simulator's SimControl."""
        self._require_session()
        client, namespaces = self._client, self._namespaces
        if client is None:
            raise self._copy.failure()
        obj = client.get_node(resolve(object_node_id, namespaces))
        method = resolve(method_node_id, namespaces)
        inputs = variants(args)
        return self._run(lambda: obj.call_method(method, *inputs), f"{method_node_id} at {self.url}") or []

    # -- the port ---------------------------------------------------------------

    def robot_status(self) -> RobotStatus:
        return robot_status(self._require_session())

    def send_robot_command(self, action_id: int, command) -> bool:
        args = [(action_id, M.UINT16), (command.code, M.UINT16), (command.src[0], M.UINT16),
                (command.src[1], M.UINT16), (command.dst[0], M.UINT16), (command.dst[1], M.UINT16),
                (command.aux_slot, M.UINT16), (command.job_id, M.UINT32), (command.job2_id, M.UINT32),
                (command.text or "", M.STRING)]
        accepted = self._call_method(M.ROBOT, f"{M.ROBOT}.Execute", args)
        if accepted is False:
            raise RobotBusy(f"robot action {action_id}: the PLC did not accept it (the robot is busy)")
        return bool(accepted)

    def scan_text(self) -> str:
        return str(self._require_session()["Robot.ScanText"] or "")

    def start_machine(self, equipment_id: str, action_id: int, jobs: dict[int, int]) -> bool:
        slots = sorted(jobs)
        args = [(action_id, M.UINT16), (slots, M.UINT16 + "[]"), ([jobs[s] for s in slots], M.UINT32 + "[]")]
        # answered in AckId / ErrorCode; Accepted false (a refusal with its ErrorCode) is
        # an answer too, but only AckId says it: the handshake waits for that
        return bool(self._call_method(equipment_id, f"{equipment_id}.Start", args))

    def machine_answer(self, equipment_id: str) -> MachineAnswer:
        v = self._require_session()
        return MachineAnswer(int(v[f"{equipment_id}.AckId"]), int(v[f"{equipment_id}.ErrorCode"]))

    def abort_machine(self, equipment_id: str, action_id: int) -> bool:
        return bool(self._call_method(equipment_id, f"{equipment_id}.Abort", [(action_id, M.UINT16)]))

    def abort_answer(self, equipment_id: str) -> int:
        return int(self._require_session()[f"{equipment_id}.AbortAckId"])

    def answered_action_ids(self) -> list[int]:
        v = self._require_session()
        return [int(v["Robot.AckId"]), int(v["Robot.DoneId"])] + [int(v[f"{e.equipment_id}.AckId"])
                                                                  for e in self.layout.plc.equipment]

    def read_state(self) -> dict[str, Any]:
        self._require_session()
        return self._copy.picture()

    def state_changes(self) -> list[dict[str, Any] | PlcUnavailable]:
        if not self._copy.ever_connected:  # starting: not "lost" before the first session had a chance
            try:
                self._require_session()
            except PlcUnavailable:
                pass
        self._changed = eventlet.event.Event()  # before draining: a later change wakes the next wait
        changes, connected, _error = self._copy.drain()
        if not changes and not connected:  # still away: why, now (the watcher and /readyz say it)
            raise self._copy.failure()
        if not changes and not self._delivered_any:
            changes = [self.read_state()]
        self._delivered_any = self._delivered_any or any(isinstance(c, dict) for c in changes)
        return changes

    def wait_for_change(self, timeout: float) -> bool:
        if self._copy.pending():
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
        if self._copy.connected:
            return
        if self._link_back.ready():
            self._link_back = eventlet.event.Event()
        self._bridge.call_soon(self._retry_now.set)  # try now, as a Modbus request would reconnect
        with eventlet.Timeout(timeout, False):
            self._link_back.wait()

    def close(self) -> None:
        """End the session and the driver's thread. Waited for green (a join would
        block the hub, and with it a simulator served in this process)."""
        self._bridge.close(self._stop.set)




class _Notifications:
    """asyncua's subscription handler (called on the driver's loop)."""

    def __init__(self, port: OpcUaPort):
        self.port = port

    def datachange_notification(self, node, value, data) -> None:
        self.port._on_value(node.nodeid, value)

    def status_change_notification(self, status) -> None:
        pass  # a lost session is seen by connection_lost_callback
