"""A line's states over time, its stops and its planned downtime (PRODUCT.md,
"Shifts, downtime and OEE"; docs/oee.md). Line tables, in every line's schema;
only the line_controller's event loop writes them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, DateTime, Index, String, Text
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models.base import Base, in_list, moment, now_default

LINE_STATES = ("RUNNING", "IDLE", "DOWN")  # what the loop records; the calendar adds the others


class LineStateInterval(Base):
    """One stretch of one line state, with the cause the loop saw for a ``DOWN``
    (and the machine, when one is to blame); the open one has ``ended_at`` NULL.
    The loop writes a change in the transaction of its cause. A ``DOWN`` row is a
    stop (a micro-stop when shorter than ``LINECTL_MICROSTOP_SECONDS``), and the
    operator's reason, comment and name go on it. ``seen_at``: the open row's last
    loop transaction, so a controller that went away is known to have gone then.
    ``split_from``: the stop this one was split off."""

    __tablename__ = "line_state_interval"
    __table_args__ = (
        CheckConstraint(in_list("state", LINE_STATES), name="state"),
        Index("ix_line_state_interval_started_at", "started_at"),
        Index("ix_line_state_interval_open", sql_text("(ended_at IS NULL)"), unique=True,
              postgresql_where=sql_text("ended_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    cause: Mapped[str | None] = mapped_column(String(32))
    equipment_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = moment()
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    reason_code: Mapped[str | None] = mapped_column(String(64))
    comment: Mapped[str | None] = mapped_column(Text)
    assigned_by: Mapped[str | None] = mapped_column(String(200))
    assigned_at: Mapped[datetime | None] = moment()
    split_from: Mapped[int | None] = mapped_column(BigInteger)


class PlannedDowntime(Base):
    """Planned downtime beside the calendar (maintenance, a changeover): its time
    is not planned busy time."""

    __tablename__ = "planned_downtime"
    __table_args__ = (
        CheckConstraint("ended_at > started_at", name="window"),
        Index("ix_planned_downtime_started_at", "started_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    reason: Mapped[str] = mapped_column(String(200), nullable=False)
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = now_default()
