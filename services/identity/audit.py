"""The access audit: one row per command, manual-action answer, sign-in,
sign-out, failed sign-in and user change, naming the person (user name, else
token holder), their role, the source address and the outcome.

Written where the actor is decided (the gateway's edge, ``linectl users``);
read newest first with a keyset cursor."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from sqlalchemy import insert, select

from shared.db.models import PeopleAudit

TABLE = PeopleAudit.__table__
MAX_TEXT = 200


@dataclasses.dataclass(frozen=True)
class AuditEntry:
    actor: str
    role: str | None
    action: str
    outcome: str
    target_type: str = "session"
    target_id: str | None = None
    line_id: str | None = None
    source: str | None = None
    detail: dict = dataclasses.field(default_factory=dict)

    def row(self) -> dict:
        cut = lambda text, n=MAX_TEXT: None if text is None else str(text)[:n]  # noqa: E731
        return {"actor": cut(self.actor) or "unknown", "role": cut(self.role, 16), "action": cut(self.action, 64),
                "outcome": cut(self.outcome, 64), "target_type": cut(self.target_type, 32),
                "target_id": cut(self.target_id), "line_id": cut(self.line_id, 64),
                "source": cut(self.source, 64), "detail": self.detail}


def record(conn, entry: AuditEntry) -> None:
    """Add one row on ``conn`` (inside the caller's transaction)."""
    conn.execute(insert(TABLE).values(**entry.row()))


def record_now(engine, entry: AuditEntry) -> None:
    with engine.begin() as conn:
        record(conn, entry)


@dataclasses.dataclass(frozen=True)
class AuditQuery:
    start: datetime | None = None
    end: datetime | None = None
    actor: str | None = None
    action: str | None = None
    limit: int = 50
    before_id: int | None = None  # the cursor: rows older than this one


def serialize(row) -> dict:
    return {"at": row.at.isoformat().replace("+00:00", "Z"), "actor": row.actor, "role": row.role,
            "action": row.action, "targetType": row.target_type, "targetId": row.target_id,
            "lineId": row.line_id, "outcome": row.outcome, "source": row.source}


def read_page(conn, query: AuditQuery) -> tuple[list[dict], int | None]:
    """Rows newest first (by id: the order they were written), and the cursor
    of the next page (None on the last)."""
    stmt = select(TABLE).order_by(TABLE.c.id.desc()).limit(query.limit)
    if query.start is not None:
        stmt = stmt.where(TABLE.c.at >= query.start)
    if query.end is not None:
        stmt = stmt.where(TABLE.c.at < query.end)
    if query.actor:
        stmt = stmt.where(TABLE.c.actor == query.actor)
    if query.action:
        stmt = stmt.where(TABLE.c.action == query.action)
    if query.before_id is not None:
        stmt = stmt.where(TABLE.c.id < query.before_id)
    rows = conn.execute(stmt).all()
    return [serialize(r) for r in rows], (rows[-1].id if len(rows) == query.limit else None)
