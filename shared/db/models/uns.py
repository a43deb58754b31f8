"""The northbound publisher's own table (``services.uns``): per line, how far
the broker has acknowledged the line's event log, and what a host and the
gateway need to know about its MQTT session."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models.base import Base, moment, now_default


class UnsNode(Base):
    """One line's edge node. ``acked_seq``: every event of the line's log up to it
    was acknowledged by the broker (QoS 1 PUBACK), so retention may purge it and
    a restarted publisher forwards what follows. ``bd_seq``: the birth/death
    sequence of the node's last MQTT CONNECT (Sparkplug's ``bdSeq``, kept across
    restarts and takeovers)."""

    __tablename__ = "uns_node"

    line_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    schema_name: Mapped[str] = mapped_column(String(63), nullable=False)
    acked_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    bd_seq: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    connected: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    messages: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    purged_unpublished: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    publisher: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None] = moment()
    updated_at: Mapped[datetime] = now_default()
