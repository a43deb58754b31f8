"""People (issue 39): users, their sign-in sessions, failed sign-ins (the
throttle counts them here, so every gateway worker counts alike) and the
access audit (who did what, decided at the gateway). Only ``services.identity``
(in the gateway and ``linectl users``) writes them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, DateTime, Index, String, Text
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models.base import AuditRecord, Base, in_list, moment, now_default

USER_ROLES = ("operator", "platform", "runtime", "admin")
SESSION_SOURCES = ("local", "ldap")


class PeopleUser(Base):
    """A local user: the password only as an argon2id hash."""

    __tablename__ = "people_user"
    __table_args__ = (CheckConstraint(in_list("role", USER_ROLES), name="role"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    display_name: Mapped[str] = mapped_column(String(200), nullable=False, server_default="")
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    lines: Mapped[list] = mapped_column(JSONB, nullable=False, server_default=sql_text("'[]'::jsonb"))
    password_hash: Mapped[str] = mapped_column(Text, nullable=False)
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=sql_text("false"))
    created_at: Mapped[datetime] = now_default()
    changed_at: Mapped[datetime] = now_default()


class PeopleSession(Base):
    """A signed-in browser. ``id`` is a digest of the cookie's secret: the table
    alone does not let anyone in. Ended by sign-out, a user change, or its limits."""

    __tablename__ = "people_session"
    __table_args__ = (
        CheckConstraint(in_list("source", SESSION_SOURCES), name="source"),
        Index("ix_people_session_user_name", "user_name"),
        Index("ix_people_session_ended_at", "ended_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_name: Mapped[str] = mapped_column(String(64), nullable=False)
    display_name: Mapped[str] = mapped_column(String(200), nullable=False, server_default="")
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    lines: Mapped[list] = mapped_column(JSONB, nullable=False, server_default=sql_text("'[]'::jsonb"))
    source: Mapped[str] = mapped_column(String(8), nullable=False)
    csrf_token: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = now_default()
    last_seen_at: Mapped[datetime] = now_default()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = moment()


class PeopleSignInFailure(Base):
    """One failed sign-in for a user name (known or not)."""

    __tablename__ = "people_sign_in_failure"
    __table_args__ = (Index("ix_people_sign_in_failure_user_name", "user_name", "at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_name: Mapped[str] = mapped_column(String(200), nullable=False)
    at: Mapped[datetime] = now_default()


class PeopleAudit(AuditRecord, Base):
    """Who did what: a command, a manual-action answer, a sign-in or -out, a user change."""

    __tablename__ = "people_audit"

    role: Mapped[str | None] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target_type: Mapped[str] = mapped_column(String(32), nullable=False)
    target_id: Mapped[str | None] = mapped_column(String(200))
    line_id: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(64), nullable=False)
    source: Mapped[str | None] = mapped_column(String(64))
