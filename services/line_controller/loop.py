"""The production event loop: the one path that writes production state.

One consumer green thread takes messages from an in-memory inbox, strictly
one after another. For each message it, in ONE transaction (the loop's
:class:`~.unit_of_work.UnitOfWork`, through which every loop write goes):
takes the message in (``loop_message``: a message id already handled is a
duplicate and changes nothing), runs the handler its message class maps to
(reads, validation, conditional transitions through :class:`DBState`),
records the outcome, audits operator commands, and writes the transaction's
events to ``event_log`` numbered from its own gapless counter. After the
commit it publishes the frames, sends the hardware requests (never waiting
for the actions), runs a scheduling round, and only then answers the caller.

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
from datetime import UTC, datetime

import eventlet
from eventlet.queue import LightQueue
from sqlalchemy.engine import Engine

from shared.stats import Durations

from . import messages as m
from .action_executor import ActionExecutor
from .dbstate import DBState, Rejected
from .handlers import HANDLERS, HandlerContext
from .handlers.recovery import read_plc, recovery_check_message
from .hardware_port import HardwarePort, HardwareRequest
from .outage_recheck import OutageRecheck
from .outcome import Outcome, Pending
from .outgoing import Outgoing
from .payloads import instant
from .scheduler import Scheduler
from .scheduling_round import SchedulingRound
from .tick_gate import TickGate, next_due
from .unit_of_work import UnitOfWork, database_away

log = logging.getLogger(__name__)

# Ticks are frequent and carry nothing to de-duplicate: not recorded in loop_message.
UNRECORDED = ("ScheduleTick",)
RECOVERY_RETRY_SECONDS = 2.0


class EventLoop(Outgoing, SchedulingRound):
    def __init__(self, engine: Engine, layout, *, publish=None, scheduler: Scheduler | None = None,
                 executor: ActionExecutor | None = None, hardware: HardwarePort | None = None,
                 action_timeout_seconds: float = 120.0, cycle_overdue_factor: float = 3.0):
        self.engine = engine
        self.layout = layout
        self.publish = publish or (lambda tx_id, frames: None)
        self.scheduler = scheduler
        self.executor = executor or ActionExecutor(action_timeout_seconds)
        self.hardware = hardware
        self.cycle_overdue_factor = cycle_overdue_factor
        self.inbox: LightQueue = LightQueue()
        self._waiting: collections.deque = collections.deque()  # enqueue times, for lag
        self._pending: dict[str, list[Pending]] = {}
        self._consumer = None
        self.uow = UnitOfWork(engine, line_id=getattr(layout, "id", None))
        self.handled_total = 0
        self.duplicates_total = 0
        self.recovering = False
        self.outage_recheck = OutageRecheck(self)
        self._plc_state = None  # what start() was given to read the PLC's state
        self.heard_since: datetime | None = None  # the last recovery check (HandlerContext says why)
        # A hardware instance said it stops cleanly (its id): no scheduling round
        # sends it work until the next instance's start has been checked.
        self.hardware_away: str | None = None
        # The PLC does not answer, or the robot reports a fault (an emergency stop):
        # no scheduling round sends a robot or machine command until it is back, so
        # one stop asks one question per stopped machine, not one per retry.
        self.plc_away = False
        self.robot_stopped = False
        self.edges_seen: dict[str, datetime] = {}  # the last PLC link and robot edges applied (HandlerContext)
        self._hardware_started_at: datetime | None = None
        self.handling = Durations()  # per message type, for status() and /metrics
        # A tick that found nothing to do: no tick touches the database until a message or
        # the next moment a timer falls due (tick_gate).
        self.ticks = TickGate(self.uow)

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
            db = DBState(conn, line_id=self.uow.line_id)
            db.sync_equipment(self.layout)
            db.give_serials()
            db.track_machines([e.id for e in self.layout.equipment])
            self.uow.last_seq, self.uow.last_tx = db.last_seq_and_tx()
            backlog = db.queued_messages()
            in_process = recover and db.pieces_in_process() > 0
        with self.uow.begin() as work:  # time away while an order ran: a CONTROLLER_DOWN stop, now it is back
            if work.db.controller_back():
                work.close(None, status="HANDLED")
        self._plc_state = plc_state
        if recover:
            self.recovering = True
            state = read_plc(plc_state)
            # Only pieces in process need the PLC's word: otherwise check at once.
            if state is not None or plc_wait <= 0 or not in_process:
                self._enqueue(recovery_check_message(state))
            else:
                eventlet.spawn(self._recover_when_plc_answers, plc_state, plc_wait)
        for row in backlog:  # persisted before a crash or restart: they still run
            self._enqueue(m.EventLoopMessage(row.id, row.type, row.payload, row.correlation_id,
                                             row.actor, row.created_at))
        if consume:
            self._consumer = eventlet.spawn(self._run)

    def _recover_when_plc_answers(self, plc_state, wait: float) -> None:
        deadline = time.monotonic() + wait
        state = None
        while state is None and time.monotonic() < deadline:
            eventlet.sleep(1.0)
            state = read_plc(plc_state)
        self._enqueue(recovery_check_message(state))

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.kill()
            self._consumer = None
        self.uow.close()

    def status(self) -> dict:
        lag = time.monotonic() - self._waiting[0] if self._waiting else 0.0
        return {"queueLength": self.inbox.qsize(), "lagSeconds": round(lag, 3),
                "handledTotal": self.handled_total, "lastSeq": self.uow.last_seq,
                "recovering": self.recovering, "duplicatesTotal": self.duplicates_total,
                "failedTransactionsTotal": self.uow.failed_transactions,
                "hardwareAway": self.hardware_away is not None,
                "plcAway": self.plc_away, "robotStopped": self.robot_stopped,
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
            return Outcome.refused(msg.id, "IDEMPOTENCY_KEY_REUSED",
                                   "this idempotency key was used for a different request")
        if row.status != "QUEUED":
            return Outcome.from_row(row, replayed=True)
        return None

    def submit(self, msg: m.EventLoopMessage) -> Pending:
        pending = Pending(msg, replay=msg.id in self._pending)
        self._pending.setdefault(msg.id, []).append(pending)
        self._enqueue(msg)
        return pending

    def _enqueue(self, msg):
        if msg.type != "ScheduleTick":
            self.ticks.wake()  # something may change: the next tick looks again
        self._waiting.append(time.monotonic())
        self.inbox.put(msg)

    def tick_due(self) -> bool:
        """Whether a ``ScheduleTick`` has anything to look at now (see ``tick_gate``)."""
        return self.ticks.due()

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
        except Exception as exc:  # e.g. the database is gone: the loop must outlive one message
            self.uow.database_was_away |= database_away(exc)
            log.exception("message %s (%s) could not be handled", msg.id, msg.type)
            outcome = Outcome.refused(msg.id, "INTERNAL", "see logs", "FAILED")
        self.handling.observe(msg.type, time.perf_counter() - t0, outcome.status == "FAILED")
        if msg.type == "RecoveryCheck" and outcome.status != "HANDLED":
            # Not checked (e.g. the database is away): check again, still holding scheduling.
            eventlet.spawn_after(RECOVERY_RETRY_SECONDS, self._enqueue,
                                 recovery_check_message(msg.payload.get("plcState")))
        for pending in self._pending.pop(msg.id, []):
            pending.done.send(dataclasses.replace(outcome, replayed=True) if pending.replay else outcome)
        return outcome

    def handle(self, msg: m.EventLoopMessage) -> Outcome:
        """Handle one message to completion (also callable directly, serially, by tests)."""
        record = msg.type not in UNRECORDED
        tick = msg.type == "ScheduleTick"
        self.ticks.begin(tick)  # (also when handed in directly, not enqueued)
        try:
            body = msg.parse()
        except m.ValidationError as exc:
            return self._reject(msg, exc)
        staged: dict = {}
        try:
            with self.uow.begin(msg.id if record else None) as work:
                ctx = HandlerContext(work.db, msg, self.layout, cycle_overdue_factor=self.cycle_overdue_factor,
                                     heard_since=self.heard_since, edges_seen=self.edges_seen,
                                     recovering=self.recovering or self.uow.database_was_away)
                result = HANDLERS[type(body)](body, ctx)
                due = next_due(work.db, ctx.cycle_bounds) if tick else None
                status = ctx.outcome or "HANDLED"
                rounded = self._round_within(work, body)  # None: the round runs after the commit
                requests = ctx.requests + (rounded[1] if rounded else [])
                audit = self._audit(msg, ctx.target, status) if msg.category == m.COMMAND else None
                work.close(msg if record else None, status=status, result=result, audit=audit)
                if not tick and (rounded or not self._may_schedule()):  # (a round after the commit looks)
                    self.ticks.look(work.db, self)  # the timers now: when a tick is due
                staged = self._stage(work, requests)
            if work.duplicate:
                self._discard(staged)
                return self._duplicate(msg)
        except Rejected as exc:
            self._discard(staged)
            return self._reject(msg, exc)
        except Exception as exc:
            self._discard(staged)
            if database_away(exc):  # not recorded: a redelivery is handled, not a duplicate
                log.warning("message %s (%s) not handled: the database does not answer (%s)",
                            msg.id, msg.type, type(exc).__name__)
                self.uow.database_was_away = True
                return Outcome.refused(msg.id, "UNAVAILABLE", "the database does not answer", "FAILED")
            log.exception("message %s (%s) failed", msg.id, msg.type)
            return self._reject(msg, Rejected("INTERNAL", "the handler failed; see the logs"), "FAILED")
        self._publish(work)
        self.handled_total += 1
        self._keep_loop_state(body, result, status)
        self._send(requests, staged)
        for follow_up in ctx.follow_ups:
            self._enqueue(follow_up)
        self.outage_recheck.after(msg)
        chose = rounded[0] if rounded else self._round_after(msg)
        self.ticks.settle(due, tick=tick, changed=bool(chose or work.frames or requests),  # quiet until a timer
                          calm=not ctx.follow_ups and not self.uow.database_was_away and self.inbox.qsize() == 0)
        return Outcome(msg.id, status, result)

    def _keep_loop_state(self, body, result: dict | None, status: str) -> None:
        """What the loop itself keeps of a handled message: whether scheduling may run."""
        if status == "STALE":
            return  # a late edge, or a late worker result: nothing changed
        if isinstance(body, m.HardwareStopping):
            if body.started and self._hardware_started_at and body.started < self._hardware_started_at:
                return  # an older instance's late word: a newer one has started since
            log.info("hardware instance %s stops: robot work held until the next one starts",
                     body.instance_id)
            self.hardware_away = body.instance_id
        elif isinstance(body, m.PlcConnection):
            self._edge_applied("plc", body.observed_at)
            self.plc_away = not body.connected
            log.info("PLC %s", "back: scheduling resumes" if body.connected else "away: new work held")
        elif isinstance(body, m.RobotFault):
            self._edge_applied("robot", body.observed_at)
            self.robot_stopped = body.fault is not None
            log.info("robot %s", f"reports fault {body.fault}: new work held" if body.fault is not None
                     else "fault cleared: scheduling resumes")
        elif isinstance(body, m.RecoveryCheck):
            robot = (body.plc_state or {}).get("robot") or {}
            if body.plc_state and not body.hardware_started_at:
                self.robot_stopped = robot.get("fault") is not None
            if body.hardware_started:
                self._hardware_started_at = body.hardware_started
                self.edges_seen.clear()  # a new instance's clock (perhaps another host's)
                self.hardware_away = None
            self.recovering = False
            self.heard_since = datetime.now(UTC)
            log.info("recovery check: %s inconsistencies, manual actions %s; scheduling resumes",
                     result["inconsistencies"], result["manualActionIds"])

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
            outcome = Outcome.refused(msg.id, "VALIDATION_ERROR", str(exc), status)
        else:
            outcome = Outcome.refused(msg.id, exc.code, exc.message, status)
        if msg.type in m.MESSAGE_TYPES and msg.type not in UNRECORDED:
            error = outcome.error
            audit = (self._audit(msg, ("command", msg.id), status, error)
                     if msg.category == m.COMMAND else None)
            with self.uow.begin(msg.id) as work:
                work.close(msg, status=status, error=(error["code"], error["message"]), audit=audit)
            if work.duplicate:
                return self._duplicate(msg)
        self.handled_total += 1
        return outcome

    def refuse(self, req: HardwareRequest, error_code: str, error_message: str) -> None:
        """A hardware request that was not accepted comes back as a failed result."""
        self._enqueue(m.new_message(req.failure_type, {
            "correlationId": str(req.task_id), "action": req.rpc.upper(),
            "errorCode": error_code, "errorMessage": error_message,
        }, id=f"refused-{req.task_id}", correlation_id=str(req.task_id)))

    # -- the scheduling round -------------------------------------------------------------------

    def _edge_applied(self, edge: str, observed_at: str | None) -> None:
        when = instant("observedAt", observed_at)
        if when is not None:
            self.edges_seen[edge] = when

    @property
    def cell_stopped(self) -> bool:
        """The PLC is away or the robot is stopped: the line waits for it."""
        return self.plc_away or self.robot_stopped
