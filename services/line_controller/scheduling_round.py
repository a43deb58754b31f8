"""The loop's scheduling round: read a snapshot, let the scheduler choose, apply
the chosen actions as conditional transitions and tasks (a mixin of
:class:`~.loop.EventLoop`: ``self`` is the loop).

After a hardware action's result the round runs in that result's own
transaction (:meth:`SchedulingRound._round_within`), behind a savepoint: one
commit (and one flush) for the result and the next action it lets the line
start, not two. A failed condition rolls the round back to the savepoint, and
the result still commits (the next round re-plans from the state as it is).
After any other message, or while the database was away, the round runs after
the commit, in a transaction of its own (:meth:`SchedulingRound.schedule`): a
command or a signal changes what the loop keeps (a hardware stop, the PLC's
link, a robot fault, the recovery check), and a cycle's end is on record before
the unload it lets start (what an asynchronous standby may have lost is asked
about from that: tests/flow/test_failover.py)."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from . import messages as m
from .dbstate import Rejected
from .hardware_port import HardwareRequest
from .scheduler import build_system_state
from .unit_of_work import database_away

log = logging.getLogger("services.line_controller.loop")



class SchedulingRound:
    def _may_schedule(self) -> bool:
        return not (self.scheduler is None or self.recovering or self.hardware_away or self.cell_stopped)

    def _choose(self, db) -> list[HardwareRequest]:
        requests: list[HardwareRequest] = []
        state = build_system_state(Session(bind=db.conn), self.layout, db.now)
        for action in self.scheduler.choose(state):
            requests.extend(self.executor.apply(db, action))
        return requests

    def _round_within(self, work, body) -> tuple[bool, list[HardwareRequest]] | None:
        """The round in ``work``'s transaction, behind a savepoint: (whether it changed
        or was dropped, its requests); None when it must run after the commit."""
        if body.category != m.RESULT or self.uow.database_was_away or not self._may_schedule():
            return None
        db, before = work.db, len(work.db.events)
        # A plain SAVEPOINT, unknown to SQLAlchemy: the snapshot's ORM Session joins
        # the transaction as it always did (it would take a begin_nested() for its own).
        db.conn.exec_driver_sql("SAVEPOINT linectl_round")
        try:
            requests = self._choose(db)
            db.conn.exec_driver_sql("RELEASE SAVEPOINT linectl_round")
        except Exception as exc:
            self.ticks.drop()
            del db.events[before:]  # rolled back to the savepoint: so are its events
            if database_away(exc):
                raise  # the message is not recorded either: handled again
            db.conn.exec_driver_sql("ROLLBACK TO SAVEPOINT linectl_round")
            if isinstance(exc, Rejected):
                log.warning("scheduling round dropped: %s", exc.message)
            else:
                log.exception("scheduling round in %s failed; the next tick retries", work.tx_id)
            return True, []
        return len(db.events) > before, requests

    def _round_after(self, msg) -> bool:
        try:
            return self.schedule()
        except Exception as exc:  # the message is committed: its outcome stands
            self.uow.database_was_away |= database_away(exc)
            log.exception("scheduling round after %s (%s) failed; the next tick retries", msg.id, msg.type)
            return True

    def schedule(self) -> bool:
        """A round in a transaction of its own; a failed condition drops the whole
        round. Nothing before the recovery check. True when the round changed
        something or was dropped (the next one may differ)."""
        if not self._may_schedule():
            return False
        requests: list[HardwareRequest] = []
        staged: dict = {}
        try:
            with self.uow.begin() as work:
                requests = self._choose(work.db)
                if work.db.events:  # nothing chosen: no transaction to record
                    work.close(None, status="HANDLED")
                    staged = self._stage(work, requests)
                self.ticks.look(work.db, self)  # the timers after this round: when a tick is due
        except BaseException as exc:
            self.ticks.drop()
            self._discard(staged)
            if not isinstance(exc, Rejected):
                raise
            log.warning("scheduling round dropped: %s", exc.message)
            return True
        if work.closed:
            self._publish(work)
            self._send(requests, staged)
        else:
            self._discard(staged)
        return work.closed
