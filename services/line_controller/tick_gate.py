"""When a ``ScheduleTick`` has anything to do (issue 55): the loop knows the
next moment a timer can matter, and until then the timer's ticks send no
message and so no statement.

The moments (:func:`next_due`): a running task's deadline (``StepTimeout``), a
shelved alarm's end, each open machine cycle's overdue bound
(``handlers.timers``) and, while an order runs, the controller's next heartbeat
stamp (``HEARTBEAT_SECONDS`` after this transaction's: ``dbstate.line_tracking``).
They are read after each message (:meth:`TickGate.look`, once its changes
and its scheduling round's are written: in the round's transaction, or in the
message's when the round ran in it or none runs), and by each tick that runs, in
its own. The scheduling round itself is not time-based: what it chooses changes
only with a message. A message that was not looked after (refused, a duplicate,
its round dropped) leaves the next tick due, as does an open cycle's bound
already passed (a message may have made it count: the tick judges it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .handlers.timers import open_cycle_bounds

# A running line's ticks stamp the controller's heartbeat this often when nothing
# else is due (dbstate.line_tracking.CONTROLLER_AWAY_SECONDS allows for it).
HEARTBEAT_SECONDS = 5.0
_UNSEEN = object()  # no round looked since the last message


def next_due(db, cycle_bounds: list[datetime]) -> datetime | None:
    """The first moment a timer falls due, in the loop's time (``db.now``); None
    for never. ``cycle_bounds``: the open cycles' overdue bounds."""
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
        self.looked = _UNSEEN  # what the last look after a message found (next_due)
        self.dropped = False  # the message's scheduling round was dropped: the next tick retries
        self.ticking = False  # the message handled is a tick (it reads its own timers)

    def due(self) -> bool:
        if not self.quiet:
            return True
        now = self.uow.clock() if self.uow.clock else datetime.now(UTC)
        return self.until is not None and now >= self.until

    def begin(self, tick: bool) -> None:
        self.ticking = tick
        if not tick:
            self.wake()

    def wake(self) -> None:
        """Something may have changed (a message): the next tick looks again."""
        self.quiet, self.looked, self.dropped = False, _UNSEEN, False

    def drop(self) -> None:
        self.looked, self.dropped = _UNSEEN, True

    def look(self, db, loop) -> None:
        """In a loop transaction after a message, once its changes are written."""
        if self.dropped or self.ticking:
            return
        bounds = [] if loop.recovering else [
            passes for *_, passes in open_cycle_bounds(db, loop.layout, loop.cycle_overdue_factor,
                                                       loop.heard_since)]
        self.looked = next_due(db, bounds)

    def settle(self, tick_due: datetime | None, *, tick: bool, calm: bool, changed: bool) -> None:
        """After a message. ``tick_due``: what a tick found (:func:`next_due` in its
        transaction, its own passed bounds judged); ``calm``: nothing waits in the
        inbox or follows up, the database answered; ``changed``: the tick or its
        round changed something (the next tick looks again)."""
        looked, self.looked, self.dropped = self.looked, _UNSEEN, False
        if not calm:
            return
        if tick and not changed:
            self.quiet, self.until = True, tick_due
        elif not tick and looked is not _UNSEEN:
            self.quiet, self.until = True, looked
