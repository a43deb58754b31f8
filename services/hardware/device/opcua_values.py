"""The OPC UA driver's copy of the cell (:mod:`.opcua`): the watched variables'
values as the subscription reports them, whether a session is up, and the
pictures of the cell the watcher has yet to read (one per publish, and one
more where a publish carries two values of one item, so no edge is lost).
Written in the driver's thread, read from green threads, under a real lock."""

from __future__ import annotations

import collections
from typing import Any

from services.hardware import opcua_map as M
from services.hardware.device.asyncio_bridge import os_threading
from services.hardware.device.modbus import state_picture
from services.hardware.device.port import PlcUnavailable, RobotStatus
from shared.layout import Layout

MAX_PENDING_PICTURES = 10000  # pictures kept for the watcher (a watcher that stopped draining loses the oldest)


def watched_keys(layout: Layout) -> list[str]:
    """The signals the driver subscribes to: the robot, dock and buffer whole; of a
    machine and its slots, what the handshake and the watcher read."""
    keys = []
    for signal in M.signals(layout):
        name = signal.path[-1]
        if (signal.device in (M.ROBOT, M.DOCK, M.BUFFER)
                or name in (M.SLOT_WATCHED if len(signal.path) == 2 else M.MACHINE_WATCHED)):
            keys.append(signal.key)
    return keys


def robot_status(v: dict[str, Any]) -> RobotStatus:
    return RobotStatus(int(v["Robot.Fault"]), int(v["Robot.AckId"]), int(v["Robot.State"]),
                       int(v["Robot.DoneId"]), int(v["Robot.ErrorCode"]))


class ValueCopy:
    def __init__(self, layout: Layout, first_error: str):
        self.layout = layout
        self.lock = os_threading.Lock()
        self.values: dict[str, Any] = {}
        self.connected = False
        self.ever_connected = False
        self.error = first_error
        self.error_code = "CONNECTION_REFUSED"  # or PLC_IDENTITY_MISMATCH: why no session is up
        self.pictures: collections.deque = collections.deque(maxlen=MAX_PENDING_PICTURES)
        self._batch: set[str] = set()  # keys changed since the last picture
        self._picture_due = False
        self.sessions = 0  # sessions established (a reconnect adds one)
        self.notifications = 0

    # -- the driver's thread ------------------------------------------------------

    def session_up(self, values: dict[str, Any]) -> None:
        """A new session read every value: a new picture (the watcher finds the differences)."""
        with self.lock:
            self.values = dict(values)
            self.connected = True
            self.ever_connected = True
            self._batch.clear()
            self.pictures.append(self._picture_locked())
            self.sessions += 1

    def on_value(self, key: str, value: Any) -> bool:
        """One data-change notification. True when the publish's picture is to be
        closed once its other notifications are in (:meth:`close_batch`)."""
        with self.lock:
            self.notifications += 1
            if key in self._batch:  # a second value of the same item in one publish: keep the first visible
                self.pictures.append(self._picture_locked())
                self._batch.clear()
            self.values[key] = value
            self._batch.add(key)
            due, self._picture_due = self._picture_due, True
        return not due

    def close_batch(self) -> bool:
        """The picture of the values changed since the last one; True when one was added."""
        with self.lock:
            self._picture_due = False
            if not self._batch or not self.connected:
                return False
            self._batch.clear()
            self.pictures.append(self._picture_locked())
            return True

    def session_lost(self, message: str, code: str = "CONNECTION_REFUSED") -> bool:
        """No session any more (or none opened: ``code`` says why); True when there
        was one (the watcher gets the loss)."""
        with self.lock:
            was = self.connected
            self.connected = False
            self.error, self.error_code = message, code
            if was:
                self.pictures.append(PlcUnavailable("CONNECTION_REFUSED", message))
            return was

    def failure(self) -> PlcUnavailable:
        """Why no session is up, as the port raises it."""
        with self.lock:
            return PlcUnavailable(self.error_code, self.error)

    # -- green threads ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The values now, or a link failure when no session is up."""
        with self.lock:
            if not self.connected:
                raise PlcUnavailable(self.error_code, self.error)
            return dict(self.values)

    def picture(self) -> dict[str, Any]:
        with self.lock:
            if not self.connected:
                raise PlcUnavailable(self.error_code, self.error)
            return self._picture_locked()

    def drain(self) -> tuple[list[dict[str, Any] | PlcUnavailable], bool, str]:
        """The pictures not read yet, whether a session is up, the last error."""
        with self.lock:
            changes = list(self.pictures)
            self.pictures.clear()
            return changes, self.connected, self.error

    def pending(self) -> bool:
        with self.lock:
            return bool(self.pictures)

    def _picture_locked(self) -> dict[str, Any]:
        v = self.values
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
        return state_picture(self.layout, robot_status(v), int(v["Dock.Pieces"]), int(v["Dock.Arrivals"]),
                             buffer, machines)
