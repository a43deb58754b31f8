"""The check after the database was away (a restart, a failover): the line is
checked against the PLC as after a start (``handlers.recovery``), scheduling held
until then. With a synchronous standby nothing was lost and nothing is asked; an
asynchronous one may have lost commits, and the PLC shows them.

Only a task that the hardware neither holds nor answered is in question, and
two kinds of task are neither without being lost:

- a request the port is still sending (its transport met the outage too): the
  hardware is read once the port has it accepted (then listed) or refused (its
  failure is queued ahead of the check);
- a task started after the hardware was read: messages queued ahead of the check
  (a result whose piece is then taken out, say) start tasks of their own. The
  check names the last task there was (``tasksUpTo``); later ones are not in it.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import eventlet

from .dbstate import DBState
from .handlers.recovery import read_plc, recovery_check_message
from .unit_of_work import database_away

log = logging.getLogger(__name__)

# How long the check waits for requests still being sent; past it, what is still
# unsent is asked about (the port gives up on its own by then).
SENDING_WAIT_SECONDS = 30.0


class OutageRecheck:
    def __init__(self, loop):
        self.loop = loop

    def after(self, msg) -> None:
        """Called once ``msg`` is handled and its requests sent."""
        loop = self.loop
        if not loop.uow.database_was_away or msg.type == "RecoveryCheck":
            return
        loop.uow.database_was_away = False
        if loop._plc_state is None:  # nothing to check against (a loop driven by hand)
            loop.heard_since = datetime.now(UTC)
            return
        try:
            with loop.engine.connect() as conn:
                up_to = DBState(conn).last_task_id()
        except Exception as exc:
            if not database_away(exc):
                raise
            loop.uow.database_was_away = True  # away again: the next message tries again
            return
        loop.recovering = True
        log.warning("the database answers again: checking the line against the PLC")
        if self._sending(up_to):
            eventlet.spawn(self._check_once_sent, up_to)
        else:
            loop._enqueue(recovery_check_message(read_plc(loop._plc_state), tasks_up_to=up_to))

    def _sending(self, up_to: int) -> bool:
        hardware = self.loop.hardware
        return hardware is not None and any(int(t) <= up_to for t in hardware.sending())

    def _check_once_sent(self, up_to: int) -> None:
        deadline = time.monotonic() + SENDING_WAIT_SECONDS
        while self._sending(up_to) and time.monotonic() < deadline:
            eventlet.sleep(0.05)
        self.loop._enqueue(recovery_check_message(read_plc(self.loop._plc_state), tasks_up_to=up_to))
