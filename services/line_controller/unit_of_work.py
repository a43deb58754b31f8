"""The loop's unit of work: every transaction the loop writes goes through here.

:meth:`UnitOfWork.begin` opens a transaction on the loop's own connection and
yields a :class:`LoopTransaction`: its ``db`` (:class:`DBState`) for reads and
conditional transitions, and :meth:`LoopTransaction.close` that records the
outcome (``DBState.close_transaction``: message row, events, audit). Leaving the
block commits what was closed; rolls back what was not closed or turned out a
duplicate; rolls back and re-raises a :class:`Rejected`; and abandons the
transaction on any other failure, unless its COMMIT landed on the server after
all (the answer was lost), in which case it counts as committed. The unit of
work also keeps the event log's counters (``last_seq``, ``last_tx``), numbering
each transaction's events gaplessly.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from shared.transport.pgsql.outbox import Outbox, publishing_in

from .dbstate import DBState, Rejected
from .messages import EventLoopMessage

log = logging.getLogger(__name__)

# How long a commit of unknown outcome is asked after, and how often: longer
# than a failover takes (Patroni's ttl is 30 s), so a promoted standby answers.
LANDED_WAIT_SECONDS = 45.0
LANDED_RETRY_SECONDS = 0.25


# A kept connection not used for longer is checked before a transaction relies on it.
KEPT_IDLE_CHECK_SECONDS = 1.0


def database_away(exc: BaseException) -> bool:
    """The failure is the database's absence (a restart, a failover), not the
    handler's: the message was not handled and must be handled again."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


@dataclass
class LoopTransaction:
    db: DBState
    first_seq: int  # the number of its first event
    tx_id: int
    closed: bool = False
    frames: list[dict] | None = None  # the committed events, as published
    outbox: Outbox | None = None  # what was published in this transaction (pgsql:// on its database)
    published: bool = False  # its frames were published in it

    @contextlib.contextmanager
    def publishing(self, role: str | None):
        """Publishes of this block go into this transaction (``shared.transport.pgsql.outbox``)."""
        if self.outbox is None:
            self.outbox = Outbox(self.db.conn.connection.dbapi_connection, role=role)
        with publishing_in(self.outbox):
            yield self.outbox

    def close(self, msg: EventLoopMessage | None, *, status: str, **outcome) -> None:
        """Record the outcome (``msg`` None: a scheduling round, no message row)."""
        self.frames = self.db.close_transaction(msg, status=status, first_seq=self.first_seq,
                                                tx_id=self.tx_id, **outcome)
        self.closed = True

    @property
    def duplicate(self) -> bool:
        """The message id was already handled: nothing was written."""
        return self.closed and self.frames is None


class UnitOfWork:
    """Owns the loop's connection: serial handling needs one, and keeping it saves
    a pool checkout (and its ping) per message. Replaced after a failure."""

    def __init__(self, engine: Engine, *, line_id: str | None = None):
        self.engine = engine
        self.line_id = line_id  # the line the transactions are of (its pieces' serials)
        self.routes: dict[int, list] = {}  # work order routes, cached across transactions
        self.last_seq = 0
        self.last_tx = 0
        self.failed_transactions = 0
        # After a failed transaction the counters may be behind the database (a
        # COMMIT can land on the server while its answer is lost): re-read first.
        self._counters_stale = False
        self._conn: Connection | None = None
        self._used_at = 0.0  # monotonic: when the kept connection last began a transaction
        self.database_was_away = False  # a transaction or message met an absent database (the loop re-checks)
        # The transactions' time (None: the wall clock): a test plays a shift of hours in a second.
        self.clock = None
        # The transport is pgsql:// on this database: what a transaction publishes is
        # written in it (an outbox), as the role's login (``outbox_role``: the role the
        # loop's statements run as, which may not write the transport's rows).
        self.outbox = False
        self.outbox_role: str | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def begin(self, message_id: str | None = None) -> Iterator[LoopTransaction]:
        """One transaction; ``message_id``: the message row it records, if any
        (how a COMMIT whose answer was lost is found in the database)."""
        conn, tx = self._begin()
        db = DBState(conn, routes=self.routes, line_id=self.line_id, now=self.clock() if self.clock else None)
        work = LoopTransaction(db, self.last_seq + 1, self.last_tx + 1)
        try:
            yield work
            if work.frames is None:  # nothing recorded, or a duplicate: nothing changes
                tx.rollback()
                return
            if not work.frames and message_id is None and work.outbox is None:
                # A tick's heartbeat stamp alone (line_tracking): lost in a crash, the
                # CONTROLLER_DOWN stop starts one heartbeat earlier; no WAL flush waited for.
                conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
            tx.commit()
        except Rejected:
            tx.rollback()
            raise
        except Exception as exc:
            self.database_was_away = self.database_was_away or database_away(exc)
            self._abandon(tx)
            if work.frames is None or not self._landed(message_id, work.frames):
                raise
            log.warning("tx %s: its commit landed after all", work.tx_id)
        if work.frames:
            self.last_seq += len(work.frames)
            self.last_tx += 1
        self._wake(work)

    def _wake(self, work: LoopTransaction) -> None:
        """Wake the consumers of what the committed transaction published, without
        waiting for a flush. Lost (the database went away), the rows wait for their
        queue's next wake-up or a consumer's start, as a lost notification does."""
        wake = work.outbox.wake() if work.outbox is not None else None
        if wake is None:
            return
        try:
            with self._conn.begin():
                self._conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                self._conn.exec_driver_sql(*wake)
        except Exception as exc:  # noqa: BLE001 - the commit stands; see above
            self._conn = None
            log.warning("tx %s: its messages' wake-up failed (%s)", work.tx_id, type(exc).__name__)

    def _begin(self):
        # A quiet line sends no statement for seconds (no tick finds a dead connection
        # first): a kept connection idle that long is checked by the transaction's first
        # statement, and a server restarted meanwhile costs a new connection, not the message.
        check = time.monotonic() - self._used_at > KEPT_IDLE_CHECK_SECONDS
        self._used_at = time.monotonic()
        while True:
            if self._conn is None or self._conn.closed or self._conn.invalidated:
                self._conn, check = self.engine.connect(), False  # the pool pings a checkout
            try:
                tx = self._conn.begin()
                if check:
                    self._conn.exec_driver_sql("SELECT 1")
                if self._counters_stale:
                    self.last_seq, self.last_tx = DBState(self._conn).last_seq_and_tx()
                    self._counters_stale = False
                return self._conn, tx
            except Exception as exc:
                self._conn = None
                if not (check and database_away(exc)):
                    raise

    def _abandon(self, tx) -> None:
        self.failed_transactions += 1
        self._counters_stale = True
        try:
            tx.rollback()
        except Exception:  # the connection itself is broken: start afresh next time
            self._conn = None

    def _landed(self, message_id: str | None, frames: list[dict]) -> bool:
        """Whether a transaction whose COMMIT raised is in the database after all
        (the server committed, the answer was lost). Only the loop writes its
        message rows and the event log, so either tells. While the database does
        not answer (a failover: the standby that has every acknowledged commit is
        being promoted) it is asked again for up to ``LANDED_WAIT_SECONDS``: going
        on without knowing could send a move twice, or never. Still unknowable
        after that counts as not landed: the caller answers FAILED."""
        deadline = time.monotonic() + LANDED_WAIT_SECONDS
        while True:
            try:
                with self.engine.connect() as conn:
                    db = DBState(conn)
                    if message_id is not None:
                        row = db.message_outcome(message_id)
                        return row is not None and row.status != "QUEUED"
                    if frames:
                        return db.event_exists(frames[0]["seq"], frames[0]["txId"])
                    return False
            except Exception:  # noqa: BLE001 - the database is unreachable
                if time.monotonic() >= deadline:
                    log.warning("could not tell whether the failed commit landed", exc_info=True)
                    return False
                log.info("the database does not answer; asking again whether the commit landed")
                time.sleep(LANDED_RETRY_SECONDS)
