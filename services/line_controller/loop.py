"""The production event loop: the one path that writes production state.

One consumer green thread takes messages from an in-memory inbox, strictly
one after another. For each message it, in ONE transaction: takes the message
in (``loop_message``: a message id already handled is a duplicate and changes
nothing), runs the message's handler (reads, validation, conditional
transitions through :class:`DBState`), records the outcome, audits operator
commands, and writes the transaction's events to ``event_log`` numbered from
its own gapless counter. After the commit it publishes the frames, sends the
hardware requests (never waiting for the actions), runs a scheduling round,
and only then answers the caller.

Durability (at-least-once): a command is persisted as QUEUED by its RPC
entrypoint before it is enqueued (:meth:`EventLoop.persist`), so a command
answered with QUEUED survives a crash: :meth:`start` re-enqueues every QUEUED
row. Hardware events are acknowledged to the broker only after the loop has
committed them (the nameko handler waits), so a crash before that means
redelivery, and redelivery is harmless (de-duplication by id).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

import eventlet
from eventlet.event import Event
from eventlet.queue import LightQueue
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from shared.stats import Durations

from . import messages as m
from .actions import ActionExecutor
from .dbstate import DBState, Rejected
from .handlers import HANDLERS, HandlerContext
from .hardware_port import HardwarePort, HardwareRequest
from .scheduler import Scheduler, build_system_state

log = logging.getLogger(__name__)

# Ticks are frequent and carry nothing to de-duplicate: not recorded in loop_message.
UNRECORDED = ("ScheduleTick",)
RECOVERY_RETRY_SECONDS = 2.0


@dataclass
class Outcome:
    message_id: str
    status: str  # HANDLED | REJECTED | STALE | DUPLICATE | FAILED | QUEUED
    result: dict | None = None
    error: dict | None = None
    # The recorded outcome of an earlier delivery of this id (a client's retry):
    # the gateway answers 200 where the first answer was 201.
    replayed: bool = False

    def to_reply(self) -> dict:
        return {"commandId": self.message_id, "status": self.status, "result": self.result,
                "error": self.error, "replayed": self.replayed}

    @classmethod
    def from_row(cls, row, *, replayed: bool = False) -> Outcome:
        error = {"code": row.error_code, "message": row.error_message or ""} if row.error_code else None
        return cls(row.id, row.status, row.result, error, replayed)


def _reused(msg) -> Outcome:
    return Outcome(msg.id, "REJECTED", error={
        "code": "IDEMPOTENCY_KEY_REUSED",
        "message": "this idempotency key was used for a different request"})


@dataclass
class Pending:
    """A caller's handle on an enqueued message."""
    message: m.EventLoopMessage
    done: Event = field(default_factory=Event)
    replay: bool = False  # another caller already waits on this id

    def wait(self, timeout: float | None) -> Outcome | None:
        """The outcome, or None when ``timeout`` ran out (the message still runs)."""
        with eventlet.Timeout(timeout, False):
            return self.done.wait()
        return None


class EventLoop:
    def __init__(self, engine: Engine, layout, *, publish=None, scheduler: Scheduler | None = None,
                 executor: ActionExecutor | None = None, hardware: HardwarePort | None = None,
                 action_timeout_seconds: float = 120.0):
        self.engine = engine
        self.layout = layout
        self.publish = publish or (lambda tx_id, frames: None)
        self.scheduler = scheduler
        self.executor = executor or ActionExecutor(action_timeout_seconds)
        self.hardware = hardware
        self.inbox: LightQueue = LightQueue()
        self._waiting: collections.deque = collections.deque()  # enqueue times, for lag
        self._pending: dict[str, list[Pending]] = {}
        self._consumer = None
        self._conn = None
        self._routes: dict[int, list] = {}
        self.last_seq = 0
        self.last_tx = 0
        # After a failed transaction the counters may be behind the database (a
        # COMMIT can land on the server while its answer is lost): re-read first.
        self._counters_stale = False
        self.failed_transactions = 0
        self.handled_total = 0
        self.duplicates_total = 0
        self.recovering = False
        # A hardware instance said it stops cleanly (its id): no scheduling round
        # sends it work until the next instance's start has been checked.
        self.hardware_away: str | None = None
        self._hardware_started_at: datetime | None = None
        self.handling = Durations()  # per message type, for status() and /metrics

    # -- life cycle -----------------------------------------------------------------------

    def start(self, consume: bool = True, *, recover: bool = False, plc_state=None,
              plc_wait: float = 0.0) -> None:
        """Sync equipment, load the counters, re-enqueue QUEUED messages, and (unless
        ``consume`` is false: tests drive :meth:`handle` themselves) run the consumer.

        ``recover``: a ``RecoveryCheck`` carrying ``plc_state()`` (a callable; None or a
        failing one means the PLC could not be read) is enqueued, and no scheduling
        round runs until it has been handled. When the first read does not reach the
        PLC (the hardware service starts at the same time) and pieces are in process,
        reads are retried for up to ``plc_wait`` seconds in the background before the
        check runs without it."""
        with self.engine.begin() as conn:
            db = DBState(conn)
            db.sync_equipment(self.layout)
            db.track_machines([e.id for e in self.layout.equipment])
            self.last_seq, self.last_tx = db.last_seq_and_tx()
            backlog = db.queued_messages()
            in_process = recover and db.pieces_in_process() > 0
        if recover:
            self.recovering = True
            state = self._read_plc(plc_state)
            # Only pieces in process need the PLC's word: otherwise check at once.
            if state is not None or plc_wait <= 0 or not in_process:
                self._enqueue(self._recovery_check(state))
            else:
                eventlet.spawn(self._recover_when_plc_answers, plc_state, plc_wait)
        for row in backlog:  # persisted before a crash or restart: they still run
            self._enqueue(m.EventLoopMessage(row.id, row.type, row.payload, row.correlation_id,
                                             row.actor, row.created_at))
        if consume:
            self._consumer = eventlet.spawn(self._run)

    @staticmethod
    def _read_plc(plc_state) -> dict | None:
        """The PLC state if it could be read and the PLC is connected, else None."""
        if plc_state is None:
            return None
        try:
            state = plc_state()
        except Exception as exc:  # the hardware service is not there (yet)
            log.warning("recovery: the PLC state could not be read: %s", exc)
            return None
        return state if (state or {}).get("connected") else None

    def _recover_when_plc_answers(self, plc_state, wait: float) -> None:
        deadline = time.monotonic() + wait
        state = None
        while state is None and time.monotonic() < deadline:
            eventlet.sleep(1.0)
            state = self._read_plc(plc_state)
        self._enqueue(self._recovery_check(state))

    @staticmethod
    def _recovery_check(state: dict | None) -> m.EventLoopMessage:
        return m.new_message("RecoveryCheck", {"plcState": state}, actor="recovery")

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.kill()
            self._consumer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def status(self) -> dict:
        lag = time.monotonic() - self._waiting[0] if self._waiting else 0.0
        return {"queueLength": self.inbox.qsize(), "lagSeconds": round(lag, 3),
                "handledTotal": self.handled_total, "lastSeq": self.last_seq,
                "recovering": self.recovering, "duplicatesTotal": self.duplicates_total,
                "failedTransactionsTotal": self.failed_transactions,
                "hardwareAway": self.hardware_away is not None,
                "handling": self.handling.snapshot()}

    # -- the way in -------------------------------------------------------------------------

    def persist(self, msg: m.EventLoopMessage) -> Outcome | None:
        """Make a command durable before it is enqueued. None: enqueue it. Else the
        answer at once: the recorded outcome when this id was already handled, or
        ``IDEMPOTENCY_KEY_REUSED`` when the id was used for another request.
        (A concurrent insert of the same id waits on the key, then reads the winner.)"""
        with self.engine.begin() as conn:
            db = DBState(conn)
            db.persist_queued(msg)
            row = db.message_outcome(msg.id)
        if row.type != msg.type or row.payload != msg.payload:
            return _reused(msg)
        if row.status != "QUEUED":
            return Outcome.from_row(row, replayed=True)
        return None

    def submit(self, msg: m.EventLoopMessage) -> Pending:
        pending = Pending(msg, replay=msg.id in self._pending)
        self._pending.setdefault(msg.id, []).append(pending)
        self._enqueue(msg)
        return pending

    def _enqueue(self, msg):
        self._waiting.append(time.monotonic())
        self.inbox.put(msg)

    # -- the consumer -----------------------------------------------------------------------

    def _run(self):
        while True:
            self.handle_next()

    def handle_next(self, block: bool = True) -> Outcome | None:
        """Take one message from the inbox, handle it, answer its waiters."""
        if not block and self.inbox.qsize() == 0:
            return None
        msg = self.inbox.get()
        self._waiting.popleft()
        t0 = time.perf_counter()
        try:
            outcome = self.handle(msg)
        except Exception:  # e.g. the database is gone: the loop must outlive one message
            log.exception("message %s (%s) could not be handled", msg.id, msg.type)
            outcome = Outcome(msg.id, "FAILED", error={"code": "INTERNAL", "message": "see logs"})
        self.handling.observe(msg.type, time.perf_counter() - t0, outcome.status == "FAILED")
        if msg.type == "RecoveryCheck" and outcome.status != "HANDLED":
            # Not checked (e.g. the database is away): check again, still holding scheduling.
            eventlet.spawn_after(RECOVERY_RETRY_SECONDS, self._enqueue,
                                 self._recovery_check(msg.payload.get("plcState")))
        for pending in self._pending.pop(msg.id, []):
            pending.done.send(dataclasses.replace(outcome, replayed=True) if pending.replay else outcome)
        return outcome

    def _connection(self):
        """The loop's own connection: serial handling needs one, and keeping it saves
        a pool checkout (and its ping) per message. Replaced after a failure."""
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self.engine.connect()
        return self._conn

    def _transaction(self):
        conn = self._connection()
        try:
            tx = conn.begin()
            if self._counters_stale:
                self.last_seq, self.last_tx = DBState(conn).last_seq_and_tx()
                self._counters_stale = False
            return conn, tx
        except Exception:
            self._conn = None
            raise

    def _landed(self, message_id: str | None, frames: list[dict]) -> bool:
        """Whether a transaction whose COMMIT raised is in the database after all
        (the server committed, the answer was lost). Only the loop writes its
        message rows and the event log, so either tells. Unknowable (the database
        is away) counts as not landed: the caller answers FAILED."""
        try:
            with self.engine.connect() as conn:
                db = DBState(conn)
                if message_id is not None:
                    row = db.message_outcome(message_id)
                    return row is not None and row.status != "QUEUED"
                if frames:
                    return db.event_exists(frames[0]["seq"], frames[0]["txId"])
        except Exception:  # noqa: BLE001 - the database is unreachable
            log.warning("could not tell whether the failed commit landed", exc_info=True)
        return False

    def handle(self, msg: m.EventLoopMessage) -> Outcome:
        """Handle one message to completion (also callable directly, serially, by tests)."""
        requests: list[HardwareRequest] = []
        follow_ups: list[m.EventLoopMessage] = []
        record = msg.type not in UNRECORDED
        try:
            parsed = msg.parse()
        except m.ValidationError as exc:
            return self._reject(msg, exc)
        conn, tx = self._transaction()
        frames = None
        try:
            db = DBState(conn, routes=self._routes)
            ctx = HandlerContext(db, msg, self.layout, self.executor, requests, follow_ups)
            result = HANDLERS[msg.type](parsed, ctx)
            status = ctx.outcome or "HANDLED"
            audit = self._audit(msg, ctx.target, status) if msg.category == m.COMMAND else None
            frames = db.close_transaction(msg if record else None, status=status, result=result,
                                          audit=audit, first_seq=self.last_seq + 1,
                                          tx_id=self.last_tx + 1)
            if frames is None:
                tx.rollback()
                return self._duplicate(msg)
            tx.commit()
        except Rejected as exc:
            tx.rollback()
            return self._reject(msg, exc)
        except Exception:
            log.exception("message %s (%s) failed", msg.id, msg.type)
            self._abandon(tx)
            if frames is None or not self._landed(msg.id if record else None, frames):
                return self._reject(msg, Rejected("INTERNAL", "the handler failed; see the logs"),
                                    "FAILED")
            log.warning("message %s (%s): its commit landed after all", msg.id, msg.type)
        self._committed(frames)
        self.handled_total += 1
        if msg.type == "HardwareStopping":
            self._hardware_stopping(parsed)
        if msg.type == "RecoveryCheck" and parsed.hardware_started:
            self._hardware_started_at = parsed.hardware_started
            self.hardware_away = None
        if msg.type == "RecoveryCheck":
            self.recovering = False
            log.info("recovery check: %s inconsistencies, manual actions %s; scheduling resumes",
                     result["inconsistencies"], result["manualActionIds"])
        self._send(requests)
        for follow_up in follow_ups:
            self._enqueue(follow_up)
        try:
            self.schedule()
        except Exception:  # the message is committed: its outcome stands
            log.exception("scheduling round after %s (%s) failed; the next tick retries",
                          msg.id, msg.type)
        return Outcome(msg.id, status, result)

    def _hardware_stopping(self, evt: m.HardwareStopping) -> None:
        if evt.started and self._hardware_started_at and evt.started < self._hardware_started_at:
            return  # an older instance's late word: a newer one has started since
        log.info("hardware instance %s stops: robot work held until the next one starts", evt.instance_id)
        self.hardware_away = evt.instance_id

    def _abandon(self, tx) -> None:
        self.failed_transactions += 1
        self._counters_stale = True
        try:
            tx.rollback()
        except Exception:  # the connection itself is broken: start afresh next time
            self._conn = None

    @staticmethod
    def _audit(msg, target, outcome, error=None) -> dict:
        detail = {"payload": msg.payload}
        if error:
            detail["error"] = error
        actor, note = m.split_actor(msg.actor)
        if note:
            detail["actorNote"] = note
        return {"actor": actor or "unknown", "action": msg.type, "targetType": target[0],
                "targetId": target[1], "outcome": outcome, "detail": detail}

    def _duplicate(self, msg) -> Outcome:
        """Already handled: nothing changes; a command's caller gets the recorded outcome."""
        self.duplicates_total += 1
        log.info("duplicate message %s (%s) ignored", msg.id, msg.type)
        with self.engine.connect() as conn:
            recorded = Outcome.from_row(DBState(conn).message_outcome(msg.id))
        if msg.category == m.COMMAND:
            return dataclasses.replace(recorded, replayed=True)
        return Outcome(msg.id, "DUPLICATE", recorded.result, recorded.error)

    def _reject(self, msg, exc, status: str = "REJECTED") -> Outcome:
        if isinstance(exc, m.ValidationError):
            error = {"code": "VALIDATION_ERROR", "message": str(exc)}
        else:
            error = {"code": exc.code, "message": exc.message}
        known = msg.type in m.MESSAGE_TYPES
        if known and msg.type not in UNRECORDED:
            conn, tx = self._transaction()
            try:
                audit = (self._audit(msg, ("command", msg.id), status, error)
                         if msg.category == m.COMMAND else None)
                recorded = DBState(conn).close_transaction(
                    msg, status=status, error=(error["code"], error["message"]), audit=audit,
                    first_seq=self.last_seq + 1, tx_id=self.last_tx + 1)
                if recorded is None:
                    tx.rollback()
                    return self._duplicate(msg)
                tx.commit()
            except Exception:
                self._abandon(tx)
                raise
        self.handled_total += 1
        return Outcome(msg.id, status, None, error)

    def _committed(self, frames: list[dict]) -> None:
        if not frames:
            return
        self.last_seq += len(frames)
        self.last_tx += 1
        try:
            self.publish(self.last_tx, frames)
        except Exception:  # the event log has them; clients fill gaps from it
            log.exception("publishing tx %s failed", self.last_tx)

    def _send(self, requests: list[HardwareRequest]) -> None:
        for req in requests:
            if self.hardware is None:
                log.warning("no hardware port: task %s not sent", req.task_id)
                continue
            self.hardware.request(req)

    def refuse(self, req: HardwareRequest, error_code: str, error_message: str) -> None:
        """A hardware request that was not accepted comes back as a failed result."""
        self._enqueue(m.new_message(req.failure_type, {
            "correlationId": str(req.task_id), "action": req.rpc.upper(),
            "errorCode": error_code, "errorMessage": error_message,
        }, id=f"refused-{req.task_id}", correlation_id=str(req.task_id)))

    # -- the scheduling round -------------------------------------------------------------------

    def schedule(self) -> None:
        """Read a snapshot, let the scheduler choose, apply the chosen actions, all
        in one transaction; a failed condition drops the whole round (the next
        round re-plans from the state as it is). None before the recovery check."""
        if self.scheduler is None or self.recovering or self.hardware_away:
            return
        requests: list[HardwareRequest] = []
        conn, tx = self._transaction()
        frames = None
        try:
            db = DBState(conn, routes=self._routes)
            state = build_system_state(Session(bind=conn), self.layout, db.now)
            for action in self.scheduler.choose(state):
                requests.extend(self.executor.apply(db, action))
            if not db.events:  # nothing chosen: no transaction to record
                tx.rollback()
                return
            frames = db.close_transaction(None, status="HANDLED", first_seq=self.last_seq + 1,
                                          tx_id=self.last_tx + 1)
            tx.commit()
        except Rejected as exc:
            tx.rollback()
            log.warning("scheduling round dropped: %s", exc.message)
            return
        except Exception:
            self._abandon(tx)
            if frames is None or not self._landed(None, frames):
                raise
            log.warning("scheduling round tx %s: its commit landed after all", frames[0]["txId"])
        self._committed(frames)
        self._send(requests)
