"""The AI Runtime jobs' tables (seed 000): ai_snapshot, ai_credential,
ai_runtime_job, ai_runtime_result and ai_job_transition. Only
``services.ai_jobs.repository`` writes them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models import vocabularies as vocab
from shared.db.models.base import Base, in_list, moment, now_default


class AiSnapshot(Base):
    """The input a job names (seed: Snapshot)."""

    __tablename__ = "ai_snapshot"
    __table_args__ = (
        CheckConstraint(in_list("target_type", vocab.AI_TARGET_TYPES), name="target_type"),
        Index("ix_ai_snapshot_user_id", "user_id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str] = mapped_column(String(200), nullable=False)
    data: Mapped[dict] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = now_default()


class AiCredential(Base):
    """A user's own model key (``apiKeyMode=user_deepseek_key``), encrypted at rest."""

    __tablename__ = "ai_credential"
    __table_args__ = (Index("ix_ai_credential_user_id", "user_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), nullable=False)
    provider: Mapped[str] = mapped_column(String(32), nullable=False, server_default="deepseek")
    encrypted_key: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    key_hint: Mapped[str | None] = mapped_column(String(16))  # last characters, for humans
    created_at: Mapped[datetime] = now_default()
    revoked_at: Mapped[datetime | None] = moment()


class AiRuntimeJob(Base):
    """Seed 000's ``AiRuntimeJob``, every field and index, plus the protocol's needs."""

    __tablename__ = "ai_runtime_job"
    __table_args__ = (
        CheckConstraint(in_list("status", vocab.AI_JOB_STATUSES), name="status"),
        CheckConstraint(in_list("job_type", vocab.AI_JOB_TYPES), name="job_type"),
        CheckConstraint(in_list("target_type", vocab.AI_TARGET_TYPES), name="target_type"),
        CheckConstraint(in_list("api_key_mode", vocab.AI_API_KEY_MODES), name="api_key_mode"),
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
    locked_at: Mapped[datetime | None] = moment()
    lock_until: Mapped[datetime | None] = moment()
    started_at: Mapped[datetime | None] = moment()
    finished_at: Mapped[datetime | None] = moment()
    retry_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_retry_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="3")
    timeout_seconds: Mapped[int] = mapped_column(Integer, nullable=False, server_default="120")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    # A retried job is not pollable before this (short back-off after a failure).
    available_at: Mapped[datetime] = now_default()
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    # A poll's hint, not job state: while it lasts other runtimes' polls skip the
    # job (services.ai_jobs.repository.leases). Not indexed, so setting it is a
    # HOT update where the page has room; never shown in the API.
    offered_to: Mapped[str | None] = mapped_column(String(200))
    offered_until: Mapped[datetime | None] = moment()


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
    created_at: Mapped[datetime] = now_default()


class AiJobTransition(Base):
    """Every status change of a job, oldest first (``GET /api/ai/jobs/{id}``)."""

    __tablename__ = "ai_job_transition"
    __table_args__ = (Index("ix_ai_job_transition_job_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("ai_runtime_job.id"), nullable=False)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16), nullable=False)
    at: Mapped[datetime] = now_default()
    error_code: Mapped[str | None] = mapped_column(String(64))
    runtime_instance_id: Mapped[str | None] = mapped_column(String(200))
    attempt_no: Mapped[int | None] = mapped_column(Integer)
