"""SQLAlchemy models of every table. Tables are created by Alembic migrations
only (``migrations/``); ``tests/integration/test_migrations.py`` checks that
these models and the migrations agree.

Two bounded contexts share the database:

* line control (seed 004): work_order, job, equipment, equipment_slot, dock, task,
  alarm, manual_action, event_log, loop_message, audit_log. Only the
  line_controller's event loop writes them.
* AI Runtime jobs (seed 000): ai_runtime_job, ai_runtime_result,
  ai_job_transition, ai_snapshot, ai_credential.

The status vocabularies are the spec's; they are listed here once and checked
by CHECK constraints so that no writer can invent a status.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    func,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# -- vocabularies -------------------------------------------------------------

WORK_ORDER_STATUSES = ("CREATED", "RUNNING", "PAUSED", "COMPLETED", "CANCELLED")
WORK_ORDER_TERMINAL = ("COMPLETED", "CANCELLED")
JOB_STATUSES = (
    "PENDING", "QUEUED", "MOVING", "PROCESSING", "WAITING_UNLOAD", "PAUSED",
    "SUSPENDED", "ERROR", "COMPLETED", "SCRAPPED", "CANCELLED",
)
JOB_TERMINAL = ("COMPLETED", "SCRAPPED", "CANCELLED")
# Held for an operator: ``held_status`` keeps the status the job returns to.
JOB_HELD = ("PAUSED", "SUSPENDED")
JOB_LIVE = tuple(s for s in JOB_STATUSES if s not in JOB_TERMINAL)
POSITION_TYPES = ("ON_DOCK", "ON_ROBOT", "ON_BUFFER", "ON_EQUIPMENT", "OUT")
TASK_STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TASK_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
SLOT_STATUSES = ("EMPTY", "OCCUPIED", "DONE")
EQUIPMENT_STATUSES = ("IDLE", "RUNNING", "FAULT", "OFFLINE")
ALARM_SEVERITIES = ("INFO", "WARNING", "ERROR", "CRITICAL")
ALARM_STATUSES = ("RAISED", "ACKNOWLEDGED", "SHELVED", "CLEARED")
ALARM_ACTIVE = ("RAISED", "ACKNOWLEDGED")  # what the active list shows; SHELVED is hidden
# A machine's state as /api/stats/timeline draws it (docs/stats.md: how it is derived).
MACHINE_STATES = ("PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT")
MANUAL_ACTION_STATUSES = ("OPEN", "RESOLVED")
LOOP_MESSAGE_STATUSES = ("QUEUED", "HANDLED", "REJECTED", "DUPLICATE", "STALE", "FAILED")

AI_JOB_TYPES = (
    "learning_state_analysis", "weak_point_analysis", "next_action_planning",
    "quiz_generation", "flashcard_generation",
)
AI_JOB_STATUSES = ("pending", "locked", "running", "succeeded", "failed", "cancelled", "expired")
AI_TARGET_TYPES = ("user", "material", "knowledge_point")
AI_API_KEY_MODES = ("platform_key", "user_deepseek_key")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _now():
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


# -- line control -------------------------------------------------------------


class WorkOrder(Base):
    __tablename__ = "work_order"
    __table_args__ = (
        CheckConstraint(_in("status", WORK_ORDER_STATUSES), name="status"),
        CheckConstraint("quantity BETWEEN 1 AND 10000", name="quantity"),
        CheckConstraint("priority BETWEEN 0 AND 9", name="priority"),
        CheckConstraint("completed_qty >= 0 AND scrapped_qty >= 0", name="counts"),
        CheckConstraint("completed_qty + scrapped_qty <= quantity", name="counts_le_quantity"),
        Index("ix_work_order_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    code: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    product_id: Mapped[str] = mapped_column(String(64), nullable=False)
    # The product's route, copied at creation: a layout edit never changes a running order.
    route: Mapped[list] = mapped_column(JSONB, nullable=False)
    quantity: Mapped[int] = mapped_column(Integer, nullable=False)
    priority: Mapped[int] = mapped_column(SmallInteger, nullable=False, server_default="5")
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="CREATED")
    completed_qty: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    scrapped_qty: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Job(Base):
    """One workpiece following its order's route.

    Where it is: ``position_type`` / ``position_ref_id`` / ``temp_slot_no``.
    The buffer table has no table of its own: a live job with
    ``temp_slot_no`` set occupies that buffer slot, also while it is on
    equipment (it returns there).
    """

    __tablename__ = "job"
    __table_args__ = (
        CheckConstraint(_in("status", JOB_STATUSES), name="status"),
        CheckConstraint(_in("position_type", POSITION_TYPES), name="position_type"),
        Index("ix_job_work_order_id_seq_no", "work_order_id", "seq_no", unique=True),
        Index("ix_job_status", "status"),
        Index("ix_job_finished_at", "finished_at", postgresql_where=sql_text("finished_at IS NOT NULL")),
        Index("ix_job_temp_slot_no", "temp_slot_no", postgresql_where=sql_text("temp_slot_no IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    work_order_id: Mapped[int] = mapped_column(ForeignKey("work_order.id"), nullable=False)
    seq_no: Mapped[int] = mapped_column(Integer, nullable=False)  # piece number within the order
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="PENDING")
    # The status a PAUSED/SUSPENDED job returns to on resume.
    held_status: Mapped[str | None] = mapped_column(String(16))
    position_type: Mapped[str] = mapped_column(String(16), nullable=False, server_default="ON_DOCK")
    position_ref_id: Mapped[str | None] = mapped_column(String(64))
    temp_slot_no: Mapped[int | None] = mapped_column(SmallInteger)
    step_index: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    context: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    error_code: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Equipment(Base):
    """A machine of the line; rows are synchronised from the layout file."""

    __tablename__ = "equipment"
    __table_args__ = (CheckConstraint(_in("status", EQUIPMENT_STATUSES), name="status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    batch: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    slot_count: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="IDLE")
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    updated_at: Mapped[datetime] = _now()


class Dock(Base):
    """The docking station (接驳台): how many new pieces wait there that no
    refill has claimed yet. One row. ``pieces_waiting`` is NULL until the PLC
    has reported the dock once (then refills are not limited by it); the loop
    sets it from the PLC (start-up check, pallet arrivals, a refill that found
    the dock empty) and takes from it when it assigns a refill. See
    ``docs/scheduler.md`` (Refill)."""

    __tablename__ = "dock"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),
                      CheckConstraint("pieces_waiting >= 0", name="pieces_not_negative"))

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default="1")
    pieces_waiting: Mapped[int | None] = mapped_column(Integer)
    # The hardware's time of the PLC reading last applied: a late, older reading is ignored.
    observed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = _now()


class EquipmentSlot(Base):
    __tablename__ = "equipment_slot"
    __table_args__ = (
        CheckConstraint(_in("status", SLOT_STATUSES), name="status"),
        CheckConstraint("(status = 'EMPTY') = (current_job_id IS NULL)", name="job_iff_not_empty"),
    )

    equipment_id: Mapped[str] = mapped_column(ForeignKey("equipment.id"), primary_key=True)
    slot_no: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="EMPTY")
    current_job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    # When the current piece was loaded: the FIFO order for MachineDone without slotNo.
    occupied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = _now()


class Task(Base):
    """A hardware action the loop asked for; its id is the correlation id."""

    __tablename__ = "task"
    __table_args__ = (
        CheckConstraint(_in("status", TASK_STATUSES), name="status"),
        Index("ix_task_status", "status"),
        Index("ix_task_job_id", "job_id"),
        # A batch task names its first job in job_id and every job in params.jobIds.
        Index("ix_task_job_ids", sql_text("(params -> 'jobIds')"), postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="PENDING")
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    work_order_id: Mapped[int | None] = mapped_column(ForeignKey("work_order.id"))
    equipment_id: Mapped[str | None] = mapped_column(ForeignKey("equipment.id"))
    slot_no: Mapped[int | None] = mapped_column(SmallInteger)
    params: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    result: Mapped[dict | None] = mapped_column(JSONB)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Alarm(Base):
    """raised → acknowledged → cleared, each step with who and when. RAISED or
    ACKNOWLEDGED may be SHELVED for a while (ISA-18.2): hidden from the active
    list, back to ``status_before_shelve`` by hand or when ``shelved_until`` passes."""

    __tablename__ = "alarm"
    __table_args__ = (
        CheckConstraint(_in("status", ALARM_STATUSES), name="status"),
        CheckConstraint(_in("severity", ALARM_SEVERITIES), name="severity"),
        Index("ix_alarm_status", "status"),
        Index("ix_alarm_raised_at", "raised_at"),
        Index("ix_alarm_shelved_until", "shelved_until", postgresql_where=sql_text("status = 'SHELVED'")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    code: Mapped[str] = mapped_column(String(64), nullable=False)
    severity: Mapped[str] = mapped_column(String(16), nullable=False, server_default="ERROR")
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="RAISED")
    message: Mapped[str] = mapped_column(Text, nullable=False)
    equipment_id: Mapped[str | None] = mapped_column(ForeignKey("equipment.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("task.id"))
    raised_at: Mapped[datetime] = _now()
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acknowledged_by: Mapped[str | None] = mapped_column(String(200))
    cleared_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cleared_by: Mapped[str | None] = mapped_column(String(200))
    shelved_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    shelve_reason: Mapped[str | None] = mapped_column(String(200))
    shelved_by: Mapped[str | None] = mapped_column(String(200))
    shelved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status_before_shelve: Mapped[str | None] = mapped_column(String(16))


class MachineStateInterval(Base):
    """The loop's rollup of a machine's state: one row per stretch of PROCESSING,
    IDLE, WAITING_UNLOAD or FAULT, the open one with ``ended_at`` NULL. The loop
    writes it in the transaction that changes the state, so /api/stats never
    scans the event log."""

    __tablename__ = "machine_state_interval"
    __table_args__ = (
        CheckConstraint(_in("state", MACHINE_STATES), name="state"),
        Index("ix_machine_state_interval_equipment_id", "equipment_id", "started_at"),
        Index("ix_machine_state_interval_open", "equipment_id", unique=True,
              postgresql_where=sql_text("ended_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    equipment_id: Mapped[str] = mapped_column(ForeignKey("equipment.id"), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MachineCycle(Base):
    """One cycle of a machine: a piece on a single-piece machine, a batch run on a
    batch machine. Requested when the loop starts it; ``started_at`` is when it
    really began (after the cycle before it on the same machine), ``ended_at``
    when its slots went DONE. A cycle whose pieces left without DONE is ``aborted``.
    ``good_pieces``/``scrapped_pieces`` count its pieces as they finish, so
    quality needs no join."""

    __tablename__ = "machine_cycle"
    __table_args__ = (
        Index("ix_machine_cycle_equipment_id", "equipment_id", "ended_at"),
        Index("ix_machine_cycle_open", "equipment_id", postgresql_where=sql_text("ended_at IS NULL")),
        Index("ix_machine_cycle_job_ids", "job_ids", postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    equipment_id: Mapped[str] = mapped_column(ForeignKey("equipment.id"), nullable=False)
    job_ids: Mapped[list] = mapped_column(ARRAY(BigInteger), nullable=False)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    aborted: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    # Its pieces that have finished since, by outcome (quality), counted in by the loop.
    good_pieces: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    scrapped_pieces: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")


class ManualAction(Base):
    """Something an operator must confirm or decide; resolved with one of ``choices``."""

    __tablename__ = "manual_action"
    __table_args__ = (
        CheckConstraint(_in("status", MANUAL_ACTION_STATUSES), name="status"),
        Index("ix_manual_action_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="OPEN")
    text: Mapped[str] = mapped_column(Text, nullable=False)
    choices: Mapped[list] = mapped_column(JSONB, nullable=False, server_default=sql_text("'[]'::jsonb"))
    context: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    equipment_id: Mapped[str | None] = mapped_column(ForeignKey("equipment.id"))
    alarm_id: Mapped[int | None] = mapped_column(ForeignKey("alarm.id"))
    resolution: Mapped[str | None] = mapped_column(String(64))
    note: Mapped[str | None] = mapped_column(Text)
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()


class EventLog(Base):
    """What changed, in order. ``seq`` is gapless: only the loop writes here and
    numbers rows itself; ``tx_id`` groups the events of one loop transaction."""

    __tablename__ = "event_log"
    __table_args__ = (Index("ix_event_log_tx_id", "tx_id"),)

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    tx_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    type: Mapped[str] = mapped_column(String(64), nullable=False)
    at: Mapped[datetime] = _now()
    payload: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    message_id: Mapped[str | None] = mapped_column(String(64))


class LoopMessage(Base):
    """Every message the loop took in: the inbox for durability and
    de-duplication, and the outcome a command's caller can look up later
    (``GET /api/commands/{id}``)."""

    __tablename__ = "loop_message"
    __table_args__ = (
        CheckConstraint(_in("status", LOOP_MESSAGE_STATUSES), name="status"),
        Index("ix_loop_message_queued", "created_at", postgresql_where=sql_text("status = 'QUEUED'")),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(64), nullable=False)
    category: Mapped[str] = mapped_column(String(16), nullable=False)  # command | external | result
    payload: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    correlation_id: Mapped[str | None] = mapped_column(String(64))
    actor: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="QUEUED")
    result: Mapped[dict | None] = mapped_column(JSONB)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    handled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditLog(Base):
    """Every operator command and decision: who, what, on what, with what outcome."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = _now()
    actor: Mapped[str] = mapped_column(String(200), nullable=False)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(32), nullable=False)
    detail: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))


# -- AI Runtime jobs ------------------------------------------------------------


class AiSnapshot(Base):
    """The input a job names (seed: Snapshot)."""

    __tablename__ = "ai_snapshot"
    __table_args__ = (
        CheckConstraint(_in("target_type", AI_TARGET_TYPES), name="target_type"),
        Index("ix_ai_snapshot_user_id", "user_id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str] = mapped_column(String(200), nullable=False)
    data: Mapped[dict] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = _now()


class AiCredential(Base):
    """A user's own model key (``apiKeyMode=user_deepseek_key``), encrypted at rest."""

    __tablename__ = "ai_credential"
    __table_args__ = (Index("ix_ai_credential_user_id", "user_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), nullable=False)
    provider: Mapped[str] = mapped_column(String(32), nullable=False, server_default="deepseek")
    encrypted_key: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    key_hint: Mapped[str | None] = mapped_column(String(16))  # last characters, for humans
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AiRuntimeJob(Base):
    """Seed 000's ``AiRuntimeJob``, every field and index, plus the protocol's needs."""

    __tablename__ = "ai_runtime_job"
    __table_args__ = (
        CheckConstraint(_in("status", AI_JOB_STATUSES), name="status"),
        CheckConstraint(_in("job_type", AI_JOB_TYPES), name="job_type"),
        CheckConstraint(_in("target_type", AI_TARGET_TYPES), name="target_type"),
        CheckConstraint(_in("api_key_mode", AI_API_KEY_MODES), name="api_key_mode"),
        CheckConstraint("retry_count >= 0 AND max_retry_count >= 0", name="retries"),
        Index("ix_ai_runtime_job_status", "status"),
        Index("ix_ai_runtime_job_job_type", "job_type"),
        Index("ix_ai_runtime_job_user_id", "user_id"),
        Index("ix_ai_runtime_job_target", "target_type", "target_id"),
        Index("ix_ai_runtime_job_lock_until", "lock_until"),
        Index("ix_ai_runtime_job_finished_at", "finished_at",
              postgresql_where=sql_text("finished_at IS NOT NULL")),
        Index("ix_ai_runtime_job_retried_from_job_id", "retried_from_job_id",
              postgresql_where=sql_text("retried_from_job_id IS NOT NULL")),
        # Creation idempotency (spec): scoped to these five.
        Index(
            "uq_ai_runtime_job_idempotency",
            "user_id", "job_type", "target_type", "target_id", "idempotency_key",
            unique=True,
            postgresql_where=sql_text("idempotency_key IS NOT NULL"),
        ),
        # Poll: pending only, by type, priority ASC, created_at ASC.
        Index(
            "ix_ai_runtime_job_poll",
            "job_type", "priority", "created_at",
            postgresql_where=sql_text("status = 'pending'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), nullable=False)
    job_type: Mapped[str] = mapped_column(String(64), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str] = mapped_column(String(200), nullable=False)
    snapshot_id: Mapped[str | None] = mapped_column(ForeignKey("ai_snapshot.id"))
    params: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="pending")
    priority: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    api_key_mode: Mapped[str] = mapped_column(String(32), nullable=False, server_default="platform_key")
    credential_id: Mapped[str | None] = mapped_column(ForeignKey("ai_credential.id"))
    model_provider: Mapped[str] = mapped_column(String(64), nullable=False, server_default="deepseek")
    model_name: Mapped[str] = mapped_column(String(64), nullable=False, server_default="deepseek-chat")
    prompt_version: Mapped[str | None] = mapped_column(String(32))
    output_schema_version: Mapped[str | None] = mapped_column(String(32))
    attempt_no: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    retried_from_job_id: Mapped[str | None] = mapped_column(ForeignKey("ai_runtime_job.id"))
    locked_by: Mapped[str | None] = mapped_column(String(200))
    locked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lock_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    retry_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_retry_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="3")
    timeout_seconds: Mapped[int] = mapped_column(Integer, nullable=False, server_default="120")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    # A retried job is not pollable before this (short back-off after a failure).
    available_at: Mapped[datetime] = _now()
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class AiRuntimeResult(Base):
    """A submitted result. Idempotent on ``job_id:attempt_no:output_hash``;
    at most one succeeded result per job."""

    __tablename__ = "ai_runtime_result"
    __table_args__ = (
        Index("ix_ai_runtime_result_job_id", "job_id"),
        Index(
            "uq_ai_runtime_result_succeeded",
            "job_id",
            unique=True,
            postgresql_where=sql_text("status = 'succeeded'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("ai_runtime_job.id"), nullable=False)
    attempt_no: Mapped[int] = mapped_column(Integer, nullable=False)
    idempotency_key: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    runtime_instance_id: Mapped[str] = mapped_column(String(200), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    output: Mapped[dict | list | None] = mapped_column(JSONB)
    output_hash: Mapped[str | None] = mapped_column(String(64))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()


class AiJobTransition(Base):
    """Every status change of a job, oldest first (``GET /api/ai/jobs/{id}``)."""

    __tablename__ = "ai_job_transition"
    __table_args__ = (Index("ix_ai_job_transition_job_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("ai_runtime_job.id"), nullable=False)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16), nullable=False)
    at: Mapped[datetime] = _now()
    error_code: Mapped[str | None] = mapped_column(String(64))
    runtime_instance_id: Mapped[str | None] = mapped_column(String(200))
    attempt_no: Mapped[int | None] = mapped_column(Integer)



# -- message transport (pgsql://, shared/transport/pgsql/) ---------------------
#
# Exchanges, queues, bindings and messages of the PostgreSQL kombu transport.
# Queue deletion cascades to its bindings, consumers and messages. Storage
# parameters (autovacuum for a queue table) are set in migration 0002.

MQ_EXCHANGE_TYPES = ("direct", "topic", "fanout")


class MqExchange(Base):
    __tablename__ = "mq_exchange"
    __table_args__ = (
        CheckConstraint(f"type IN {MQ_EXCHANGE_TYPES}", name="type"),
    )

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    type: Mapped[str] = mapped_column(String(16), nullable=False)
    durable: Mapped[bool] = mapped_column(Boolean, nullable=False)
    auto_delete: Mapped[bool] = mapped_column(Boolean, nullable=False)


class MqQueue(Base):
    __tablename__ = "mq_queue"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    durable: Mapped[bool] = mapped_column(Boolean, nullable=False)
    auto_delete: Mapped[bool] = mapped_column(Boolean, nullable=False)
    exclusive: Mapped[bool] = mapped_column(Boolean, nullable=False)
    # x-expires: the queue is dropped after this long without consumers.
    expires_ms: Mapped[int | None] = mapped_column(Integer)
    # The declaring backend of an exclusive queue (pid + start tell a live one).
    owner_pid: Mapped[int | None] = mapped_column(Integer)
    owner_started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # NULL while the queue has consumers.
    idle_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MqBinding(Base):
    __tablename__ = "mq_binding"

    exchange: Mapped[str] = mapped_column(
        ForeignKey("mq_exchange.name", ondelete="CASCADE"), primary_key=True
    )
    queue: Mapped[str] = mapped_column(
        ForeignKey("mq_queue.name", ondelete="CASCADE"), primary_key=True
    )
    routing_key: Mapped[str] = mapped_column(Text, primary_key=True)
    # POSIX regex of a topic binding key (NULL for direct/fanout).
    pattern: Mapped[str | None] = mapped_column(Text)


class MqConsumer(Base):
    """A live basic_consume: the consuming backend tells whether it is alive."""

    __tablename__ = "mq_consumer"

    queue: Mapped[str] = mapped_column(
        ForeignKey("mq_queue.name", ondelete="CASCADE"), primary_key=True
    )
    backend_pid: Mapped[int] = mapped_column(Integer, primary_key=True)
    tag: Mapped[str] = mapped_column(Text, primary_key=True)
    backend_started: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    # The backend LISTENing for this consumer's direct replies (NOTIFY payloads);
    # NULL until it listens, and then every message goes through mq_message.
    listener_pid: Mapped[int | None] = mapped_column(Integer)
    listener_started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MqMessage(Base):
    """A message in a queue; leased (lease_pid set) while delivered, deleted on ack."""

    __tablename__ = "mq_message"
    # No index on the lease columns, so that claiming and releasing are HOT updates.
    __table_args__ = (Index("ix_mq_message_queue_id", "queue", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(
        ForeignKey("mq_queue.name", ondelete="CASCADE"), nullable=False
    )
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivery_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    lease_pid: Mapped[int | None] = mapped_column(Integer)
    lease_started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MqDeadLetter(Base):
    """A message whose consumers died ``max_deliveries`` times."""

    __tablename__ = "mq_dead_letter"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    queue: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    delivery_count: Mapped[int] = mapped_column(Integer, nullable=False)
    dead_at: Mapped[datetime] = _now()
