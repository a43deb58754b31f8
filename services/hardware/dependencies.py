"""The hardware service's DependencyProvider: the PLC link, the robot queue,
machine starts and the signal watcher, built once per container from config.
Every link checks the PLC's identity on every connect before anything is sent
(device/identity.py: the layout's ``plc.identity``, else the line's id for the
simulator).

Config keys (nameko config, all optional):

- ``LINECTL_PLC_ADDRESS`` ``"host:port"`` (Modbus) or ``"opc.tcp://host:port[/path]"``
  (OPC UA): overrides ``load_settings().plc_url``
- ``LINECTL_OPCUA_SECURITY`` / ``_USER`` / ``_PASSWORD`` / ``_CERT`` / ``_KEY`` /
  ``_SERVER_CERT``: override the settings of the same names (deploy/OPCUA_MAP.md)
- ``LINECTL_LINE_FILE``: overrides ``load_settings().line_file``
- ``LINECTL_HW_ACTION_TIMEOUT`` seconds an accepted action may take (default 120)
- ``LINECTL_HW_MODBUS_TIMEOUT`` seconds a PLC request may take (default 2; OPC UA too)
- ``LINECTL_HW_RECONNECT_GRACE`` seconds an action in flight waits for a lost
  PLC to answer again before it is reported not sent or of unknown outcome (default 5)
- ``LINECTL_HW_STOP_GRACE`` seconds a clean stop waits for the action the robot
  (or a machine start) is executing (default 25; the supervisor's and systemd's
  stop timeouts are longer)
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Any

import eventlet
import eventlet.hubs
from nameko.extensions import DependencyProvider
from nameko.standalone.events import event_dispatcher

from services.hardware.action_requests import (
    ActionRequest,
    ActionResult,
    CommandBuilder,
    MachineAbort,
    MachineStart,
)
from services.hardware.device import PlcUnavailable, open_port
from services.hardware.device.identity import IdentityCheck, expected_identity
from services.hardware.robot import ActionRunner, RobotQueue
from services.hardware.watcher import SignalWatcher
from shared import events as ev
from shared.config import load_settings
from shared.layout import load_layout
from shared.stats import Durations

log = logging.getLogger(__name__)
WATCH_POLL_INTERVAL = 0.1  # seconds between the watcher's Modbus polls
# How long an event that could not be published (the transport's database failing
# over) is offered again before it is given up: longer than a Patroni failover.
PUBLISH_PERSIST_SECONDS = 120.0
# RPC context data the action entrypoints set from the delivery (service.ActionRpc):
# the transport delivered the request before, to a consumer that did not acknowledge it.
REDELIVERED_CONTEXT_KEY = "linectl_redelivered"
# pymodbus logs every failed connect and timeout (10 times a second while the
# PLC is away); the watcher reports connection loss once per edge instead.
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def opcua_options(config: dict, settings) -> dict[str, Any]:
    """The OPC UA client's settings (used only when the address is opc.tcp://)."""
    def pick(key: str, default):
        value = config.get(f"LINECTL_OPCUA_{key}")
        return default if value in (None, "") else value

    return {"security": str(pick("SECURITY", settings.opcua_security_mode)).lower(),
            "user": pick("USER", settings.opcua_user),
            "password": pick("PASSWORD", settings.opcua_password),
            "cert": pick("CERT", settings.opcua_cert),
            "key": pick("KEY", settings.opcua_key),
            "server_cert": pick("SERVER_CERT", settings.opcua_server_cert),
            "cert_dir": config.get("LINECTL_OPCUA_CERT_DIR") or settings.opcua_cert_dir,
            "data_dir": config.get("LINECTL_DATA_DIR") or settings.data_dir}


class LineHardware:
    """What the service's entrypoints see (one instance per container)."""

    def __init__(self, config: dict, spawn, service_name: str = ev.HARDWARE):
        settings = load_settings()
        self.source = service_name  # this line's hardware: the events' source
        self.layout = load_layout(config.get("LINECTL_LINE_FILE") or settings.line_file)
        if self.layout.plc is None:
            raise ValueError("the line layout has no plc: register map (see deploy/REGISTER_MAP.md)")
        address = config.get("LINECTL_PLC_ADDRESS") or settings.plc_url
        timeout = float(config.get("LINECTL_HW_MODBUS_TIMEOUT", 2.0))
        # Checked on every connect of every link, before anything is sent (PRODUCT.md, "PLC identity").
        self.identity = IdentityCheck(expected_identity(self.layout, settings), self.layout.id, address)
        # Modbus: one link for the actions, one for the watcher (a poll never waits
        # behind a handshake). OPC UA: one session serves both (reads come from its
        # subscription), so the watcher shares the port.
        self.port = open_port(address, self.layout, timeout=timeout, options=opcua_options(config, settings),
                              identity=self.identity)
        self.commands = CommandBuilder(self.layout)
        self.runner = ActionRunner(self.port, self.layout,
                                   float(config.get("LINECTL_HW_ACTION_TIMEOUT", 120.0)),
                                   reconnect_grace=float(config.get("LINECTL_HW_RECONNECT_GRACE", 5.0)))
        self._dispatch = event_dispatcher(config)
        self.robot = RobotQueue(self.runner, self.publish)
        watcher_port = (self.port if self.port.protocol == "opcua"
                        else open_port(address, self.layout, timeout=timeout, poll_interval=WATCH_POLL_INTERVAL,
                                       identity=self.identity))
        self.watcher = SignalWatcher(watcher_port, self.layout)
        self._spawn = spawn
        self.stop_grace = float(config.get("LINECTL_HW_STOP_GRACE", 25.0))
        self._machine_starts: set = set()  # greenthreads of machine starts in progress
        # Names this instance in HardwareStarted, HardwareStopping and every acceptance.
        self.instance_id = uuid.uuid4().hex
        # Correlation ids this instance accepted and has not answered yet, and the
        # last ones it answered: a restarted line_controller need not ask an
        # operator about an action the hardware still holds or has reported.
        self._open: dict[str, int] = {}
        self._answered: deque[str] = deque(maxlen=1000)
        # Requests an earlier instance took and never acknowledged (see submit): not
        # run, and not run when asked again either.
        self._disowned: deque[str] = deque(maxlen=1000)
        # The line_controller instance that last read known_actions(): requests from
        # an earlier (replaced) instance that arrive later are refused, so that
        # reading stays the whole truth about what this service will still do.
        self.fence: str | None = None
        self._next_id = 1
        self._ids_synced = False
        self.durations = Durations()  # per action kind, for status() and /metrics
        # Before any RPC is accepted: tasks the loop started earlier went to a previous instance.
        self.started_at = datetime.now(UTC).isoformat()
        self._sync_action_ids()

    def _sync_action_ids(self) -> None:
        """Continue after the ids the PLC last answered, so a restarted service
        never mistakes an old acknowledgement for a new one. Tried until the
        PLC first answers."""
        try:
            seen = self.port.answered_action_ids()
        except PlcUnavailable:
            return
        self._next_id = max(self._next_id, max(seen) + 1)
        self._ids_synced = True

    def next_action_id(self) -> int:
        if not self._ids_synced:
            self._sync_action_ids()
        action_id, self._next_id = self._next_id, self._next_id + 1
        return (action_id - 1) % 0xFFFF + 1  # 1..65535: a register holds it

    def publish(self, result: ActionResult) -> None:
        cid = result.request.correlation_id
        self._open.pop(cid, None)
        self._answered.append(cid)
        self.durations.observe(result.request.action, result.duration_ms / 1000.0, not result.ok)
        log.info("action %s %s -> %s", result.request.action_id, result.request.action, result.event_type)
        self.send(self._dispatch, result.event_type, result.payload(), self.source)

    @staticmethod
    def send(dispatch, event_type: str, payload: dict, source: str = ev.HARDWARE) -> None:
        """Publish one event, offering it again while the transport is away: a
        result or an edge the watcher saw exists only here, and lost it would
        leave the loop waiting (a cycle "overdue", a move never answered). A
        publish repeated after a lost confirm is a duplicate the loop drops."""
        deadline, pause = time.monotonic() + PUBLISH_PERSIST_SECONDS, 0.25
        while True:
            try:
                dispatch(source, event_type, payload)
                return
            except Exception as exc:  # noqa: BLE001 - the transport is away; anything else repeats too
                if time.monotonic() > deadline:
                    raise
                log.warning("publishing %s failed (%s); again in %.2f s", event_type, type(exc).__name__, pause)
                eventlet.sleep(pause)
                pause = min(pause * 2, 2.0)  # soon after the transport is back

    def submit(self, correlation_id: str, command, redelivered: bool = False) -> dict[str, Any]:
        if self.robot.stopping:  # nothing moved: the line_controller puts the job back
            return {"accepted": False, "errorCode": ev.NOT_EXECUTED,
                    "errorMessage": "the hardware service is stopping"}
        if correlation_id in self._open or correlation_id in self._answered:
            # The same request again: its caller lost the answer (a failover of the
            # transport's database, a timeout) and asks once more. It runs once; its
            # result is (or was) published as usual.
            return {"accepted": True, "actionId": self._open.get(correlation_id), "instanceId": self.instance_id,
                    "repeated": True}
        if redelivered or correlation_id in self._disowned:
            # Delivered before, to a consumer that ended without acknowledging it: an
            # earlier instance, killed after taking it, which may have sent it to the PLC
            # (its ack goes out after its reply, pgsql:// a second later). Sent again, the
            # robot would move twice; whether it happened is the operator's to say.
            if correlation_id not in self._disowned:
                self._disowned.append(correlation_id)
                log.warning("request %s (%s) was delivered before to an instance that ended without "
                            "acknowledging it: not run, its outcome is unknown", correlation_id,
                            getattr(command, "action", type(command).__name__))
            return {"accepted": False, "errorCode": ev.OUTCOME_UNKNOWN, "instanceId": self.instance_id,
                    "errorMessage": "an earlier instance of the hardware service took this request and ended "
                                    "before acknowledging it: whether the PLC got it is unknown"}
        request = ActionRequest(correlation_id, self.next_action_id(), command)
        self._open[correlation_id] = request.action_id
        self.watcher.hurry()  # its edges are read at the port's rate
        if isinstance(command, MachineStart | MachineAbort):  # machines run beside the robot
            thread = self._spawn(lambda: self._start_machine(request))
            if thread is not None:
                self._machine_starts.add(thread)
                thread.link(lambda gt: self._machine_starts.discard(gt))
        else:
            self.robot.put(request)
        return {"accepted": True, "actionId": request.action_id, "instanceId": self.instance_id}

    def _start_machine(self, request: ActionRequest) -> None:
        try:
            self.publish(self.runner.run(request))
        except Exception:  # an exception in a managed thread would kill the container
            log.exception("machine start %s: could not publish its result", request.action_id)

    def drain(self) -> None:
        """The clean stop (SIGTERM): tell the line_controller (it holds new robot
        work until the next instance starts), refuse new actions, answer the
        queued ones NOT_EXECUTED, and give the executing ones ``stop_grace``
        seconds to finish and report. What does not finish in time stays open:
        the next instance's start puts it to an operator, as after a kill."""
        self.robot.stopping = True
        try:
            self._dispatch(self.source, ev.HARDWARE_STOPPING, {"instanceId": self.instance_id,
                                                                "startedAt": self.started_at})
        except Exception:  # the transport is away: the queued actions are answered anyway
            log.exception("could not announce the hardware service's stop")
        deadline = eventlet.hubs.get_hub().clock() + self.stop_grace
        self.robot.drain(self.stop_grace)
        for thread in list(self._machine_starts):
            left = deadline - eventlet.hubs.get_hub().clock()
            with eventlet.Timeout(max(left, 0.0), False):
                thread.wait()
        if self._open:  # accepted and not answered: still executing
            log.warning("stopped with %s action(s) still executing: %s", len(self._open), list(self._open))
        else:
            log.info("stopped cleanly: every accepted action answered")

    def plc_state(self) -> dict[str, Any]:
        try:
            return self.port.read_state()
        except PlcUnavailable as exc:
            return {"connected": False, "error": exc.message, "robot": {}, "equipment": []}

    def admits(self, controller: str | None) -> bool:
        """Whether a request from line_controller instance ``controller`` (None: a
        caller that does not say, e.g. an operator's shell) may run."""
        return controller is None or self.fence is None or controller == self.fence

    def known_actions(self, controller: str | None = None) -> dict[str, Any]:
        """What this instance knows of the actions it accepted: ``open`` (queued
        or running: a result will come) and ``answered`` (the last 1000
        correlation ids whose result it has published). Asked by a
        line_controller instance, it fences out every earlier one."""
        if controller is not None:
            self.fence = controller
        return {"instanceStartedAt": self.started_at, "instanceId": self.instance_id,
                "open": list(self._open), "answered": list(self._answered)}

    def announce_start(self) -> None:
        """Tell the line_controller this is a new instance (``HardwareStarted``):
        whatever the previous one had accepted will never report back."""
        started_at = self.started_at
        state = self.plc_state()
        try:
            self._dispatch(self.source, ev.HARDWARE_STARTED,
                           {"instanceId": self.instance_id, "startedAt": started_at,
                            "plcState": state if state.get("connected") else None})
        except Exception:  # the transport is away: the line_controller's own start-up check covers it
            log.exception("could not announce the hardware service's start")

    def status(self) -> dict[str, Any]:
        """Cheap (no PLC request): the watcher's last view of the PLC link (where,
        and why it is not reached) and the action histograms."""
        connected = bool(self.watcher.connected)
        return {"plcConnected": connected, "plcAddress": self.port.address,
                "plcError": None if connected else self.watcher.error,
                # what the PLC at the address last said it is (None: not read yet, or it publishes none)
                "plcIdentity": self.identity.found, "plcIdentityExpected": self.identity.expected,
                "actions": self.durations.snapshot()}

    def close(self) -> None:
        self.port.close()
        if self.watcher.port is not self.port:
            self.watcher.port.close()


class Hardware(DependencyProvider):
    def setup(self):
        # built before any entrypoint starts (setup of every extension precedes start)
        self.hardware = LineHardware(self.container.config, self.container.spawn_managed_thread,
                                     self.container.service_name)

    def start(self):
        self.container.spawn_managed_thread(self.hardware.robot.run_forever)
        self.container.spawn_managed_thread(self.hardware.announce_start)

    def stop(self):
        # nameko stops the entrypoints first: no RPC arrives any more.
        self.hardware.drain()
        self.hardware.close()

    def get_dependency(self, worker_ctx):
        return HardwareHandle(self.hardware, worker_ctx.context_data)


class HardwareHandle:
    """What an entrypoint gets: the container's hardware, and which line_controller
    instance (if any) sent the call."""

    def __init__(self, hardware: LineHardware, context: dict):
        self._hardware = hardware
        self._context = context
        self.controller: str | None = context.get(ev.CONTROLLER_CONTEXT_KEY)

    def __getattr__(self, name):
        return getattr(self._hardware, name)

    def admitted(self) -> bool:
        return self._hardware.admits(self.controller)

    @property
    def redelivered(self) -> bool:
        """Whether the transport delivered this call's request before (action RPCs only)."""
        return bool(self._context.get(REDELIVERED_CONTEXT_KEY))

    def known_actions(self) -> dict[str, Any]:
        return self._hardware.known_actions(self.controller)
