"""The piece records (PRODUCT.md, "Piece traceability"; docs/traceability.md):
piece, piece_step, piece_entry. Line tables, in every line's schema; only the
line_controller's event loop writes them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, DateTime, Index, Integer, SmallInteger, String
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models import vocabularies as vocab
from shared.db.models.base import Base, in_list, moment


class Piece(Base):
    """A piece's record (PRODUCT.md, "Piece traceability"): kept for
    ``LINECTL_PIECE_RETENTION_DAYS``, long after the event log is purged and
    whatever happens to its job row. Self-contained on purpose (no foreign key):
    it names its order and product itself. Written by the loop in the transaction
    of each change it records (``dbstate.piece_tracking``); docs/traceability.md
    says why it is not partitioned by time."""

    __tablename__ = "piece"
    __table_args__ = (
        Index("ix_piece_serial", "serial"),
        Index("ix_piece_created_at", "created_at", "job_id"),
        Index("ix_piece_work_order_id", "work_order_id", "job_id"),
        Index("ix_piece_finished_at", "finished_at", postgresql_where=sql_text("finished_at IS NOT NULL")),
    )

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    serial: Mapped[str] = mapped_column(String(200), nullable=False)
    work_order_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    work_order_code: Mapped[str | None] = mapped_column(String(200))
    product_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    finished_at: Mapped[datetime | None] = moment()


class PieceStep(Base):
    """One run of a route step by a piece: on a machine (from the cycle's start to
    its done) or with a tool (the SCAN or MARK action). A step run again (after a
    fault, a rework) is another row; one that ended without its done says
    ``ABORTED``, an inspection says ``PASS`` / ``FAIL`` / ``UNDECIDED``."""

    __tablename__ = "piece_step"
    __table_args__ = (
        Index("ix_piece_step_job_id", "job_id", "started_at"),
        Index("ix_piece_step_equipment_id", "equipment_id", "started_at"),
        # The steps under way (a few per machine): what each transaction ends looks here.
        Index("ix_piece_step_open", "job_id", postgresql_where=sql_text("ended_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    step_index: Mapped[int] = mapped_column(Integer, nullable=False)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    equipment_id: Mapped[str | None] = mapped_column(String(64))
    slot_no: Mapped[int | None] = mapped_column(SmallInteger)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = moment()
    result: Mapped[str | None] = mapped_column(String(32))
    values: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))


class PieceEntry(Base):
    """Everything else in a piece's history, in order: a robot ``move``, a ``scan``,
    a ``mark``, an ``alarm`` raised while it was in the cell (its own, its machine's,
    the line's), an operator's ``answer`` that touched it. ``detail``: the facts."""

    __tablename__ = "piece_entry"
    __table_args__ = (
        CheckConstraint(in_list("category", vocab.PIECE_ENTRY_CATEGORIES), name="category"),
        Index("ix_piece_entry_job_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    category: Mapped[str] = mapped_column(String(16), nullable=False)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    detail: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"))
