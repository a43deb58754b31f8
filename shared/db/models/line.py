"""Line control's tables: work_order, job, equipment, dock, equipment_slot,
task, alarm, the machine statistics' rollups (machine_state_interval,
machine_cycle), manual_action, event_log, loop_message, audit_log, and the
piece records (piece, piece_step, piece_entry: :mod:`.pieces`). Only the
line_controller's event loop writes them."""

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
    SmallInteger,
    String,
    Text,
)
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models import vocabularies as vocab
from shared.db.models.base import AuditRecord, Base, in_list, moment, now_default


class WorkOrder(Base):
    __tablename__ = "work_order"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.WORK_ORDER_STATUSES), name="status"),
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
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    started_at: Mapped[datetime | None] = moment()
    finished_at: Mapped[datetime | None] = moment()


class Job(Base):
    """One workpiece following its order's route.

    Where it is: ``position_type`` / ``position_ref_id`` / ``temp_slot_no``.
    The buffer table has no table of its own: a live job with
    ``temp_slot_no`` set occupies that buffer slot, also while it is on
    equipment (it returns there).
    """

    __tablename__ = "job"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.JOB_STATUSES), name="status"),
        CheckConstraint(in_list("position_type", vocab.POSITION_TYPES), name="position_type"),
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
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    finished_at: Mapped[datetime | None] = moment()
    # The piece's serial (PRODUCT.md, "Piece traceability"): the code its SCAN read,
    # else ``<lineId>-<order code>-<seqNo>`` given at creation. NULL only for a job
    # made before revision 0012 whose line has not started since.
    serial: Mapped[str | None] = mapped_column(String(200))


class Equipment(Base):
    """A machine of the line; rows are synchronised from the layout file."""

    __tablename__ = "equipment"
    __table_args__ = (CheckConstraint(in_list("status", vocab.EQUIPMENT_STATUSES), name="status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    batch: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    slot_count: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="IDLE")
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    updated_at: Mapped[datetime] = now_default()


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
    observed_at: Mapped[datetime | None] = moment()
    updated_at: Mapped[datetime] = now_default()


class EquipmentSlot(Base):
    __tablename__ = "equipment_slot"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.SLOT_STATUSES), name="status"),
        CheckConstraint("(status = 'EMPTY') = (current_job_id IS NULL)", name="job_iff_not_empty"),
    )

    equipment_id: Mapped[str] = mapped_column(ForeignKey("equipment.id"), primary_key=True)
    slot_no: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="EMPTY")
    current_job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    # When the current piece was loaded: the FIFO order for MachineDone without slotNo.
    occupied_at: Mapped[datetime | None] = moment()
    updated_at: Mapped[datetime] = now_default()


class Task(Base):
    """A hardware action the loop asked for; its id is the correlation id."""

    __tablename__ = "task"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.TASK_STATUSES), name="status"),
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
    deadline_at: Mapped[datetime | None] = moment()
    created_at: Mapped[datetime] = now_default()
    started_at: Mapped[datetime | None] = moment()
    finished_at: Mapped[datetime | None] = moment()


class Alarm(Base):
    """raised → acknowledged → cleared, each step with who and when. RAISED or
    ACKNOWLEDGED may be SHELVED for a while (ISA-18.2): hidden from the active
    list, back to ``status_before_shelve`` by hand or when ``shelved_until`` passes."""

    __tablename__ = "alarm"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.ALARM_STATUSES), name="status"),
        CheckConstraint(in_list("severity", vocab.ALARM_SEVERITIES), name="severity"),
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
    raised_at: Mapped[datetime] = now_default()
    acknowledged_at: Mapped[datetime | None] = moment()
    acknowledged_by: Mapped[str | None] = mapped_column(String(200))
    cleared_at: Mapped[datetime | None] = moment()
    cleared_by: Mapped[str | None] = mapped_column(String(200))
    shelved_until: Mapped[datetime | None] = moment()
    shelve_reason: Mapped[str | None] = mapped_column(String(200))
    shelved_by: Mapped[str | None] = mapped_column(String(200))
    shelved_at: Mapped[datetime | None] = moment()
    # What fills ``message`` (machine, job, error code, …), camelCase: the page renders from it.
    facts: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    status_before_shelve: Mapped[str | None] = mapped_column(String(16))


class MachineStateInterval(Base):
    """The loop's rollup of a machine's state: one row per stretch of PROCESSING,
    IDLE, WAITING_UNLOAD or FAULT, the open one with ``ended_at`` NULL. The loop
    writes it in the transaction that changes the state, so /api/stats never
    scans the event log."""

    __tablename__ = "machine_state_interval"
    __table_args__ = (
        CheckConstraint(in_list("state", vocab.MACHINE_STATES), name="state"),
        Index("ix_machine_state_interval_equipment_id", "equipment_id", "started_at"),
        Index("ix_machine_state_interval_open", "equipment_id", unique=True,
              postgresql_where=sql_text("ended_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    equipment_id: Mapped[str] = mapped_column(ForeignKey("equipment.id"), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = moment()


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
    started_at: Mapped[datetime | None] = moment()
    ended_at: Mapped[datetime | None] = moment()
    aborted: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    # Its pieces that have finished since, by outcome (quality), counted in by the loop.
    good_pieces: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    scrapped_pieces: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")


class ManualAction(Base):
    """Something an operator must confirm or decide; resolved with one of ``choices``."""

    __tablename__ = "manual_action"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.MANUAL_ACTION_STATUSES), name="status"),
        Index("ix_manual_action_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="OPEN")
    text: Mapped[str] = mapped_column(Text, nullable=False)
    choices: Mapped[list] = mapped_column(JSONB, nullable=False, server_default=sql_text("'[]'::jsonb"))
    context: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    # What fills ``text`` (job, slot, machine, error code, …), camelCase: the page renders from it.
    facts: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    equipment_id: Mapped[str | None] = mapped_column(ForeignKey("equipment.id"))
    alarm_id: Mapped[int | None] = mapped_column(ForeignKey("alarm.id"))
    resolution: Mapped[str | None] = mapped_column(String(64))
    note: Mapped[str | None] = mapped_column(Text)
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolved_at: Mapped[datetime | None] = moment()
    created_at: Mapped[datetime] = now_default()


class EventLog(Base):
    """What changed, in order. ``seq`` is gapless: only the loop writes here and
    numbers rows itself; ``tx_id`` groups the events of one loop transaction."""

    __tablename__ = "event_log"
    __table_args__ = (Index("ix_event_log_tx_id", "tx_id"),)

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    tx_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    type: Mapped[str] = mapped_column(String(64), nullable=False)
    at: Mapped[datetime] = now_default()
    payload: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
    message_id: Mapped[str | None] = mapped_column(String(64))


class LoopMessage(Base):
    """Every message the loop took in: the inbox for durability and
    de-duplication, and the outcome a command's caller can look up later
    (``GET /api/commands/{id}``)."""

    __tablename__ = "loop_message"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.LOOP_MESSAGE_STATUSES), name="status"),
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
    created_at: Mapped[datetime] = now_default()
    handled_at: Mapped[datetime | None] = moment()


class AuditLog(AuditRecord, Base):
    """Every operator command and decision: who, what, on what, with what outcome."""

    __tablename__ = "audit_log"

    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(32), nullable=False)


# The piece records are line tables too, declared beside the others' registry.
from shared.db.models.pieces import Piece, PieceEntry, PieceStep  # noqa: E402, F401
