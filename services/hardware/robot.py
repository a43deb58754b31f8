"""Running actions over the register map, and the one robot's serial queue.

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
    MachineStart,
    RobotCommand,
)
from services.hardware.plc import PlcLink, PlcUnavailable
from shared.events import NOT_EXECUTED
from shared.layout import Layout

log = logging.getLogger(__name__)


class ActionRunner:
    def __init__(self, link: PlcLink, layout: Layout, action_timeout: float, poll_interval: float = 0.02):
        self.link = link
        self.layout = layout
        self.map = layout.plc
        self.action_timeout = action_timeout
        self.poll_interval = poll_interval
        self._machine_locks = {e.equipment_id: Semaphore() for e in self.map.equipment}

    def run(self, request: ActionRequest) -> ActionResult:
        started = time.monotonic()

        def result(ok, data=None, code=None, message=None):
            return ActionResult(request, ok, round((time.monotonic() - started) * 1000),
                                data or {}, code, message)

        try:
            if isinstance(request.command, RobotCommand):
                data = self._robot(request.action_id, request.command, started)
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
        eventlet.sleep(self.poll_interval)

    def _robot(self, action_id: int, cmd: RobotCommand, started: float) -> dict:
        base = self.map.robot_base
        # A robot still busy with an action a previous instance of this service sent
        # (it was restarted mid-action) ignores a new command: wait until it is done.
        while self.link.read(base + P.R_STATE, 1)[0] == P.ROBOT_BUSY:
            self._wait(started, f"robot busy before action {action_id}")
        params = [cmd.code, cmd.src[0], cmd.src[1], cmd.dst[0], cmd.dst[1], cmd.aux_slot,
                  *P.split_u32(cmd.job_id), *P.split_u32(cmd.job2_id)]
        self.link.write(base + P.R_CMD_CODE, params)
        self.link.write(base + P.R_TEXT_IN, P.encode_text(cmd.text))
        self.link.write(base + P.R_CMD_ID, [action_id])  # the strobe, last
        while True:
            _ack, state, done_id, error = self.link.read(base + P.R_ACK_ID, 4)
            if done_id == action_id:
                if state == P.ROBOT_ERROR or error:
                    code = "SOURCE_EMPTY" if error == P.ERR_SOURCE_EMPTY else "PLC_ERROR"
                    raise PlcUnavailable(code, P.plc_error_message(error))
                break
            self._wait(started, f"robot action {action_id}")
        if cmd.code == P.CMD_SCAN:
            text = self.link.read(base + P.R_TEXT_OUT, P.TEXT_REGISTERS)
            return {"code": P.decode_text(text)}
        if cmd.code == P.CMD_MARK:
            return {"text": cmd.text}
        return {}

    def _machine(self, action_id: int, cmd: MachineStart, started: float) -> dict:
        regs = self.map.for_equipment(cmd.equipment_id)
        with self._machine_locks[cmd.equipment_id]:
            for slot, job in cmd.jobs.items():
                slot_base = regs.base + 8 + 8 * (slot - 1)
                self.link.write(slot_base + P.S_JOB_ID, P.split_u32(job))
                self.link.write(slot_base + P.S_START, [1])
            self.link.write(regs.base + P.M_START_ID, [action_id])
            while True:
                ack, error = self.link.read(regs.base + P.M_ACK_ID, 2)
                if ack == action_id:
                    break
                self._wait(started, f"start of {cmd.equipment_id}")
        if error:
            raise PlcUnavailable("PLC_ERROR", P.plc_error_message(error))
        return {"equipmentId": cmd.equipment_id, "slots": sorted(cmd.jobs)}


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
