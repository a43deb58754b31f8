"""Running actions over the device port (either protocol), and the one robot's serial queue.

:class:`ActionRunner` performs one handshake (robot/tool command or machine
start) and turns every outcome into an :class:`ActionResult`: nothing raises.
:class:`RobotQueue` feeds robot and tool actions to it strictly one at a time,
in request order, from a single greenthread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import eventlet
from eventlet.queue import Queue
from eventlet.semaphore import Semaphore

from services.hardware import plc as P
from services.hardware.action_requests import (
    ActionRequest,
    ActionResult,
    MachineAbort,
    MachineStart,
    RobotCommand,
)
from services.hardware.device import LINK_ERRORS, DevicePort, PlcUnavailable, RobotBusy
from shared import events as ev
from shared.events import NOT_EXECUTED
from shared.layout import Layout

log = logging.getLogger(__name__)

RECONNECT_INTERVAL = 0.2  # seconds between reconnect attempts in the middle of an action


class ActionRunner:
    def __init__(self, port: DevicePort, layout: Layout, action_timeout: float, poll_interval: float = 0.02,
                 reconnect_grace: float = 5.0):
        self.port = port
        # How long an action in flight waits for a lost PLC to answer again before
        # its outcome is reported unknown (or, never acknowledged, not sent).
        self.reconnect_grace = reconnect_grace
        self.layout = layout
        self.action_timeout = action_timeout
        self.poll_interval = poll_interval
        self._machine_locks = {e.equipment_id: Semaphore() for e in layout.plc.equipment}

    def run(self, request: ActionRequest) -> ActionResult:
        started = time.monotonic()

        def result(ok, data=None, code=None, message=None):
            return ActionResult(request, ok, round((time.monotonic() - started) * 1000),
                                data or {}, code, message)

        try:
            if isinstance(request.command, RobotCommand):
                data = self._robot(request.action_id, request.command, started)
            elif isinstance(request.command, MachineAbort):
                data = self._abort(request.action_id, request.command, started)
            else:
                data = self._machine(request.action_id, request.command, started)
        except PlcUnavailable as exc:
            log.warning("action %s (%s) failed: %s", request.action_id, request.action, exc.message)
            return result(False, code=exc.code, message=exc.message)
        except Exception as exc:  # still exactly one result for an accepted action
            log.exception("action %s (%s) failed unexpectedly", request.action_id, request.action)
            return result(False, code="PLC_ERROR", message=f"unexpected error: {exc}")
        return result(True, data)

    def _wait(self, started: float, what: str) -> None:
        if time.monotonic() - started > self.action_timeout:
            raise PlcUnavailable("ACTION_TIMEOUT", f"{what}: no answer within {self.action_timeout:g}s")
        self.port.wait_for_answer(self.poll_interval)  # Modbus: the poll interval; OPC UA: the notification

    def _read_after_loss(self, read: Callable[[], tuple], deadline: float | None = None) -> tuple | None:
        """``read()`` once the PLC answers again before ``deadline`` (default: within
        ``reconnect_grace``); None if it does not."""
        deadline = time.monotonic() + self.reconnect_grace if deadline is None else deadline
        while True:
            try:
                return read()
            except PlcUnavailable as exc:
                if exc.code not in LINK_ERRORS or time.monotonic() >= deadline:
                    return None
            self.port.wait_for_link(min(RECONNECT_INTERVAL, max(deadline - time.monotonic(), 0.0)))

    def _handshake(self, action_id: int, what: str, started: float, read: Callable[[], tuple],
                   answered, taken: bool, before: int | None) -> tuple:
        """Wait for the PLC's answer to the command just sent: ``read()`` until
        ``answered(values)``, ``values[0]`` being the id the PLC acknowledged.

        Acknowledged is the id seen, or ``taken``: the PLC answered the command
        itself (OPC UA ``Accepted``, a Modbus strobe's write answered), which may
        come before the id is seen. A connection lost on the way is not a failure
        yet: once the PLC answers again, its answer says whether it had the
        action. Acknowledged: the device goes on without the link, so the PLC is
        waited for until the action's deadline; back with the action, the
        handshake goes on; back without it (it restarted) or not back:
        OUTCOME_UNKNOWN, reported at once. Never acknowledged: it did not happen
        (NOT_SENT) only when the PLC is back within ``reconnect_grace`` still
        showing ``before``, the id it showed before the command (it did not
        restart, so it never had the command), or when the command never went
        out (``before`` None); otherwise it may have had it (OUTCOME_UNKNOWN).
        A PLC that showed the id, then another with no loss seen in between,
        restarted unseen: OUTCOME_UNKNOWN too."""
        acked, seen = taken, False
        while True:
            try:
                values = read()
            except PlcUnavailable as exc:
                if exc.code not in LINK_ERRORS:
                    raise
                values = self._read_after_loss(read, started + self.action_timeout if acked else None)
                if values is None or values[0] != action_id:
                    untouched = before is None or (values is not None and values[0] == before != 0)
                    raise self._lost(what, exc.message, acked, untouched) from None
            if seen and values[0] != action_id:
                raise self._lost(what, "the PLC restarted", True, False)
            seen = seen or values[0] == action_id
            acked = acked or seen
            if answered(values):
                return values
            self._wait(started, what)

    @staticmethod
    def _lost(what: str, reason: str, acked: bool, untouched: bool) -> PlcUnavailable:
        """The action's fate after the PLC came back without it (or did not come back)."""
        if acked:
            return PlcUnavailable(ev.OUTCOME_UNKNOWN, f"{what}: the PLC acknowledged it, then the connection "
                                  f"was lost ({reason}) and the PLC came back without it")
        if untouched:
            return PlcUnavailable(ev.NOT_SENT, f"{what}: never acknowledged, the connection was lost "
                                  f"({reason}) and the PLC came back as it was before it")
        return PlcUnavailable(ev.OUTCOME_UNKNOWN, f"{what}: sent, its answer lost with the connection "
                              f"({reason}), and the PLC came back changed or not at all: it may have had it")

    def _robot_answer(self) -> tuple:
        status = self.port.robot_status()
        return status.ack_id, status.state, status.done_id, status.error_code

    def _robot(self, action_id: int, cmd: RobotCommand, started: float) -> dict:
        what = f"robot action {action_id}"
        ready_by = time.monotonic() + self.reconnect_grace
        try:
            # A robot still busy with an action a previous instance of this service sent
            # (it was restarted mid-action) ignores a new command: wait until it is done.
            # A PLC away or a robot stopped (an emergency stop) may be back in a moment:
            # waited for up to reconnect_grace, then the action is not sent.
            while True:
                try:
                    status = self.port.robot_status()
                except PlcUnavailable as exc:
                    if exc.code not in LINK_ERRORS or time.monotonic() >= ready_by:
                        raise
                    self.port.wait_for_link(RECONNECT_INTERVAL)
                    continue
                if status.fault:
                    if time.monotonic() >= ready_by:
                        raise PlcUnavailable(ev.NOT_SENT, f"{what} not sent: the robot reports "
                                             f"{P.plc_error_message(status.fault)}")
                    eventlet.sleep(RECONNECT_INTERVAL)
                    continue
                if status.state != P.ROBOT_BUSY:
                    try:
                        taken = self.port.send_robot_command(action_id, cmd)
                        break
                    except RobotBusy:  # busy after all (the state read was older): wait as above
                        pass
                self._wait(started, f"robot busy before action {action_id}")
        except PlcUnavailable as exc:
            if exc.code in LINK_ERRORS:  # the port raises those only before the PLC can have it
                raise PlcUnavailable(ev.NOT_SENT, f"{what} not sent: {exc.message}") from None
            raise
        _ack, state, _done, error = self._handshake(
            action_id, what, started, self._robot_answer, lambda v: v[2] == action_id, taken, status.ack_id)
        if state == P.ROBOT_ERROR or error:
            code = "SOURCE_EMPTY" if error == P.ERR_SOURCE_EMPTY else "PLC_ERROR"
            raise PlcUnavailable(code, P.plc_error_message(error))
        if cmd.code == P.CMD_SCAN:
            return {"code": self.port.scan_text()}
        if cmd.code == P.CMD_MARK:
            return {"text": cmd.text}
        return {}

    def _machine(self, action_id: int, cmd: MachineStart, started: float) -> dict:
        what = f"start {action_id} of {cmd.equipment_id}"

        def answer() -> tuple:
            reply = self.port.machine_answer(cmd.equipment_id)
            return reply.ack_id, reply.error_code

        with self._machine_locks[cmd.equipment_id]:
            for attempt in (1, 2):  # away for a moment? waited for as a robot action is, then again
                try:
                    before = answer()[0]
                    taken = self.port.start_machine(cmd.equipment_id, action_id, dict(cmd.jobs))
                    break
                except PlcUnavailable as exc:
                    if exc.code not in LINK_ERRORS:
                        raise
                    if attempt == 2 or self._read_after_loss(answer) is None:
                        raise PlcUnavailable(ev.NOT_SENT, f"{what} not sent: {exc.message}") from None
            _ack, error = self._handshake(action_id, what, started, answer, lambda v: v[0] == action_id,
                                          taken, before)
        if error:
            raise PlcUnavailable("PLC_ERROR", P.plc_error_message(error))
        return {"equipmentId": cmd.equipment_id, "slots": sorted(cmd.jobs)}

    def _abort(self, action_id: int, cmd: MachineAbort, started: float) -> dict:
        what = f"abort {action_id} of {cmd.equipment_id}"
        with self._machine_locks[cmd.equipment_id]:
            # A PLC away is waited for by the handshake (never acknowledged within the grace: NOT_SENT).
            taken = False
            try:
                before = self.port.abort_answer(cmd.equipment_id)
                taken = self.port.abort_machine(cmd.equipment_id, action_id)
            except PlcUnavailable as exc:
                if exc.code not in LINK_ERRORS:
                    raise
                before = None  # it never went out
            self._handshake(action_id, what, started, lambda: (self.port.abort_answer(cmd.equipment_id),),
                            lambda v: v[0] == action_id, taken, before)
        return {"equipmentId": cmd.equipment_id}


def not_executed(request: ActionRequest) -> ActionResult:
    """The result of an accepted action that never reached the PLC: nothing moved."""
    return ActionResult(request, False, 0, {}, NOT_EXECUTED, "the hardware service stopped before it ran")


class RobotQueue:
    """The one robot: requests run one after another in arrival order.

    :meth:`drain` is the clean stop: no further request starts, the queued ones
    are answered ``NOT_EXECUTED`` (nothing moved), and the one the robot is
    executing is given a bounded time to finish and report."""

    def __init__(self, runner: ActionRunner, publish: Callable[[ActionResult], None]):
        self.runner = runner
        self.publish = publish
        self._queue: Queue = Queue()
        self.current: ActionRequest | None = None
        self.stopping = False
        self._executing = Semaphore()  # held while an action runs

    def put(self, request: ActionRequest) -> None:
        self._queue.put(request)

    def __len__(self) -> int:
        return self._queue.qsize()

    def run_forever(self) -> None:
        while True:
            request = self._queue.get()
            with self._executing:
                if self.stopping:  # taken in the instant the stop began: it never starts
                    self._publish(not_executed(request))
                    continue
                self.current = request
                try:
                    self._publish(self.runner.run(request))
                finally:
                    self.current = None

    def _publish(self, result: ActionResult) -> None:
        try:
            self.publish(result)
        except Exception:  # a failed publish must not stop the robot
            log.exception("robot action %s: could not publish its result", result.request.action_id)

    def drain(self, grace: float) -> None:
        """Stop taking requests; answer the queued ones NOT_EXECUTED; wait up to
        ``grace`` seconds for the executing one (one that does not finish never
        reports; the next instance's start puts it to an operator)."""
        self.stopping = True
        while self._queue.qsize():
            self._publish(not_executed(self._queue.get_nowait()))
        if self._executing.acquire(timeout=grace):
            self._executing.release()
