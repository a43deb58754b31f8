"""When a ``ScheduleTick`` has anything to do (issue 55): a tick that found
nothing to do knows the next moment a timer can matter, and until then the
timer's ticks send no message and so no statement.

The moments (:func:`next_due`, read in the tick's own transaction): a running
task's deadline (``StepTimeout``), a shelved alarm's end, each open machine
cycle's overdue bound (``handlers.timers._overdue_cycles``) and, while an order
runs (the open line stretch is not ``IDLE``), the controller's next heartbeat
stamp (``HEARTBEAT_SECONDS`` after this tick's: ``dbstate.line_tracking``).
The scheduling round is not time-based: what it chooses changes only with a
message, and any message ends the quiet (the next tick looks again)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# A running line's ticks stamp the controller's heartbeat this often when nothing
# else is due (dbstate.line_tracking.CONTROLLER_AWAY_SECONDS allows for it).
HEARTBEAT_SECONDS = 5.0


def next_due(db, cycle_bounds: list[datetime]) -> datetime | None:
    """In a tick's transaction: the first moment a timer falls due after it, in
    the loop's time (``db.now``); None for never. ``cycle_bounds``: the open
    cycles' overdue bounds the tick found not yet passed."""
    watched, shelf, deadline = db.timers()
    moments = list(cycle_bounds)
    if shelf is not None:
        moments.append(shelf)
    if deadline is not None:  # a task's deadline is the database's wall time: as a delay from now
        moments.append(db.now + (deadline - datetime.now(UTC)))
    if watched:
        moments.append(db.now + timedelta(seconds=HEARTBEAT_SECONDS))
    return min(moments, default=None)


class TickGate:
    """Whether the timer's next tick is sent: not while quiet, until ``until``."""

    def __init__(self, uow):
        self.uow = uow  # its clock is the loop's time (tests play hours in a second)
        self.quiet = False
        self.until: datetime | None = None

    def due(self) -> bool:
        if not self.quiet:
            return True
        now = self.uow.clock() if self.uow.clock else datetime.now(UTC)
        return self.until is not None and now >= self.until

    def wake(self) -> None:
        """Something may have changed (a message): the next tick looks again."""
        self.quiet = False

    def quiet_until(self, moment: datetime | None) -> None:
        self.quiet, self.until = True, moment
