"""The message transport's tables (pgsql://, shared/transport/pgsql/):
exchanges, queues, bindings and messages of the PostgreSQL kombu transport.
Queue deletion cascades to its bindings, consumers and messages. Storage
parameters (autovacuum for a queue table) are set in migration 0002."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models.base import Base, moment, now_default

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
    owner_started: Mapped[datetime | None] = moment()
    # NULL while the queue has consumers.
    idle_since: Mapped[datetime | None] = moment()


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
    listener_started: Mapped[datetime | None] = moment()


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
    expires_at: Mapped[datetime | None] = moment()
    delivery_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    lease_pid: Mapped[int | None] = mapped_column(Integer)
    lease_started: Mapped[datetime | None] = moment()


class MqDeadLetter(Base):
    """A message whose consumers died ``max_deliveries`` times."""

    __tablename__ = "mq_dead_letter"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    queue: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    delivery_count: Mapped[int] = mapped_column(Integer, nullable=False)
    dead_at: Mapped[datetime] = now_default()
