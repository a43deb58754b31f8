"""Server-side sign-in sessions.

The cookie holds a random secret; the table keeps only its SHA-256 (a copy
of the table lets no one in). Each sign-in makes a new one (no fixation). A
session ends on sign-out, on a change to its user (disabled, new password),
after ``idle`` without a request, or ``max_age`` after it began. A resumed
session is touched in the same statement that checks it."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import func, insert, select, update

from shared.db.models import PeopleSession

TABLE = PeopleSession.__table__
MAX_COOKIE = 128
# ended_at is its transaction's start: one that commits after a poll may carry an
# earlier time. Polls look back this far (a session reported twice closes nothing more).
ENDED_OVERLAP = timedelta(seconds=10)  # longer cookie values are not ours and are not hashed


@dataclasses.dataclass(frozen=True)
class Person:
    """Who signed in: the name audit rows record, the role, the lines (empty: every line)."""

    name: str
    display_name: str
    role: str
    lines: tuple[str, ...] = ()
    source: str = "local"

    def as_json(self) -> dict:
        return {"name": self.name, "displayName": self.display_name or self.name, "role": self.role,
                "lines": list(self.lines)}


@dataclasses.dataclass(frozen=True)
class Session:
    key: str  # the digest: what the table and a websocket keep
    person: Person
    csrf_token: str
    expires_at: datetime  # the earlier of the idle and the absolute limit


def session_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _session(row, idle: timedelta) -> Session:
    person = Person(row.user_name, row.display_name, row.role, tuple(row.lines), row.source)
    return Session(row.id, person, row.csrf_token, min(row.expires_at, row.last_seen_at + idle))


class SessionStore:
    def __init__(self, engine, idle: timedelta, max_age: timedelta):
        self.engine = engine
        self.idle = idle
        self.max_age = max_age

    @classmethod
    def from_settings(cls, engine, settings) -> SessionStore:
        return cls(engine, timedelta(minutes=settings.session_idle_minutes),
                   timedelta(hours=settings.session_max_hours))

    def begin(self, conn, person: Person) -> tuple[str, Session]:
        """A new session on ``conn``; returns the cookie's secret and the session."""
        secret = secrets.token_urlsafe(32)
        row = conn.execute(insert(TABLE).values(
            id=session_key(secret), user_name=person.name, display_name=person.display_name,
            role=person.role, lines=list(person.lines), source=person.source,
            csrf_token=secrets.token_urlsafe(32), expires_at=func.now() + self.max_age,
        ).returning(TABLE)).one()
        return secret, _session(row, self.idle)

    def resume(self, secret: str | None) -> Session | None:
        """The live session of this cookie value, touched; None if there is none."""
        if not secret or len(secret) > MAX_COOKIE:
            return None
        now = func.now()
        stmt = (update(TABLE).where(TABLE.c.id == session_key(secret), TABLE.c.ended_at.is_(None),
                                    TABLE.c.expires_at > now, TABLE.c.last_seen_at > now - self.idle)
                .values(last_seen_at=now).returning(TABLE))
        with self.engine.begin() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _session(row, self.idle)

    def end(self, key: str) -> bool:
        with self.engine.begin() as conn:
            ended = conn.execute(update(TABLE).where(TABLE.c.id == key, TABLE.c.ended_at.is_(None))
                                 .values(ended_at=func.now())).rowcount
        return bool(ended)

    @staticmethod
    def end_for_user(conn, user_name: str) -> int:
        """End every live session of ``user_name`` (on ``conn``, in the change's transaction)."""
        return conn.execute(update(TABLE).where(TABLE.c.user_name == user_name, TABLE.c.ended_at.is_(None))
                            .values(ended_at=func.now())).rowcount

    def ended_since(self, since: datetime | None) -> tuple[list[str], datetime]:
        """Keys of sessions ended at or after ``since``, and the database's time now
        (the next call's ``since``): what closes their websockets."""
        with self.engine.connect() as conn:
            now = conn.scalar(select(func.clock_timestamp()))
            keys = [] if since is None else conn.execute(
                select(TABLE.c.id).where(TABLE.c.ended_at >= since - ENDED_OVERLAP)).scalars().all()
        return keys, now
