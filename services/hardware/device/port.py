"""The device port: what the robot queue, machine starts and the signal watcher
ask of the PLC, at the level of the handshake, whichever protocol carries it.

As a kombu transport sits behind kombu's ``Connection``, a driver sits behind
:class:`DevicePort`: ``modbus.py`` (deploy/REGISTER_MAP.md) and ``opcua.py``
(deploy/OPCUA_MAP.md). Nothing above the port knows which one runs;
:func:`services.hardware.device.open_port` picks it from the address.

Failures are :class:`PlcUnavailable` with one of shared.events.HW_ERROR_CODES;
``CONNECTION_REFUSED`` and ``MODBUS_TIMEOUT`` are *link failures* (the PLC may
come back) on either protocol, the names kept from the register map's days.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import eventlet

from shared.errors import CodedError

# A PLC answers at the address, but not the line's own (device/identity.py).
PLC_IDENTITY_MISMATCH = "PLC_IDENTITY_MISMATCH"
# The link failures after which the PLC may come back: an action they interrupt
# is not failed yet (see ActionRunner._handshake). A PLC of another identity is
# no link to the line's own: nothing was sent to it, and the right one may answer.
LINK_ERRORS = ("CONNECTION_REFUSED", "MODBUS_TIMEOUT", PLC_IDENTITY_MISMATCH)


class PlcUnavailable(CodedError):
    """A PLC exchange failed; ``code`` is one of shared.events.HW_ERROR_CODES."""


class RobotBusy(PlcUnavailable):
    """The PLC refused a robot command because the robot is busy (nothing happened):
    the sender waits until it is not and sends again. A driver whose PLC answers
    a command (OPC UA's ``Accepted``) raises it; over Modbus such a command is
    silently ignored, so the sender checks the robot's state before sending."""

    def __init__(self, message: str):
        super().__init__("NOT_SENT", message)


@dataclass(frozen=True)
class RobotStatus:
    fault: int       # 0, or an error code while the robot cannot move (8: emergency stop)
    ack_id: int      # the action id it accepted
    state: int       # plc.ROBOT_IDLE / ROBOT_BUSY / ROBOT_DONE / ROBOT_ERROR
    done_id: int     # the action id that finished (done or error)
    error_code: int  # PLC_ERRORS code of the finished action, 0 when done


@dataclass(frozen=True)
class MachineAnswer:
    ack_id: int      # the start action id the machine answered
    error_code: int  # 0 = started, else a PLC_ERRORS code


class DevicePort(abc.ABC):
    """One PLC, one protocol. Every method may raise :class:`PlcUnavailable`.

    The ``send_*`` / ``start_*`` / ``abort_*`` commands raise a link failure only
    when the PLC cannot have the command; once it may have it (the strobe was
    written, the method was called) a lost answer is not raised: the handshake
    that follows finds out from the acknowledged ids. They return True when the
    PLC answered that it has the command (OPC UA: the method's ``Accepted``;
    Modbus: the strobe's write was answered, and the PLC acknowledges a strobe
    it holds within its scan), False when it may have it (sent, the answer
    lost). A command the PLC has is acknowledged even if its ``AckId``/``ACK_ID``
    was not seen yet: a PLC that restarts before it is seen may have started it
    (docs/state-machines.md, "How each protocol closes the acknowledgement window")."""

    protocol: str = ""

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """Where the PLC is, for messages and logs."""

    @abc.abstractmethod
    def robot_status(self) -> RobotStatus: ...

    @abc.abstractmethod
    def send_robot_command(self, action_id: int, command) -> bool:
        """Send a robot/tool command (a ``RobotCommand``) under ``action_id``."""

    @abc.abstractmethod
    def scan_text(self) -> str:
        """The last SCAN's result (a barcode)."""

    @abc.abstractmethod
    def start_machine(self, equipment_id: str, action_id: int, jobs: dict[int, int]) -> bool:
        """Start the slots ``jobs`` (slotNo → jobId; empty: every loaded slot)."""

    @abc.abstractmethod
    def machine_answer(self, equipment_id: str) -> MachineAnswer: ...

    @abc.abstractmethod
    def abort_machine(self, equipment_id: str, action_id: int) -> bool:
        """Abort every running cycle of the machine (its pieces stay)."""

    @abc.abstractmethod
    def abort_answer(self, equipment_id: str) -> int:
        """The abort action id the machine last answered."""

    @abc.abstractmethod
    def answered_action_ids(self) -> list[int]:
        """Every action id the PLC holds as answered (robot ack and done, machine
        start acks): a restarted service continues after them."""

    @abc.abstractmethod
    def read_state(self) -> dict[str, Any]:
        """One consistent picture of the PLC: the ``plc_state()`` RPC shape
        (services/hardware/watcher.py documents it)."""

    def state_changes(self) -> list[dict[str, Any] | PlcUnavailable]:
        """The pictures since the last call, oldest first, with a link loss between
        them as the :class:`PlcUnavailable` it was (a driver that is notified
        keeps every one, so a short edge is never lost). Raises when the PLC
        cannot be read now. By default: the picture now."""
        return [self.read_state()]

    @abc.abstractmethod
    def wait_for_change(self, timeout: float) -> bool:
        """Block (the calling green thread only) until the PLC's state may have
        changed or ``timeout`` passed; True when something changed. Modbus cannot
        tell and waits its poll interval; OPC UA wakes on a data-change notification."""

    def wait_for_answer(self, timeout: float) -> None:
        """Block (the calling green thread) until a handshake's answer may be there
        (a robot or machine value changed) or ``timeout`` passed. By default the
        timeout: Modbus cannot tell, and the action reads again after its poll
        interval; a notified driver wakes its waiters on the notification, so an
        action's end is seen as it comes, not at the next poll."""
        eventlet.sleep(timeout)

    def wait_for_link(self, timeout: float) -> None:
        """Block (the calling green thread) until the link may be back or ``timeout``
        passed. By default the timeout (Modbus reconnects on the next request); a
        driver that keeps a session wakes its waiters as the session comes back, so
        an action in flight learns its fate no later than the watcher's edge."""
        eventlet.sleep(timeout)

    @abc.abstractmethod
    def close(self) -> None: ...
