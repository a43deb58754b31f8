"""The event log as the gateway serves it, over REST (``/api/events``) and as
the websocket stream (``/ws``): a page of frames after a seq, the newest seq,
and the events retention purged before a page.

A floor below the views and the stream: it imports nothing from the gateway,
so the app's context can hand :func:`read_log` to the stream hub without
reaching up into the ``/ws`` route."""

from __future__ import annotations

from sqlalchemy import func, select

from shared import serialize
from shared.db.models import EventLog


def page(session, after: int, limit: int, line_id: str | None = None) -> list[dict]:
    """Logged events with ``seq > after``, oldest first, at most ``limit``, as
    frames; each names ``line_id`` (``lineId``) when given. The session's search
    path says whose log it is (``gateway.lines``)."""
    stmt = select(EventLog.__table__).where(EventLog.seq > after).order_by(EventLog.seq).limit(limit)
    frames = [serialize.event_frame(r) for r in session.execute(stmt)]
    if line_id is not None:
        for frame in frames:
            frame["lineId"] = line_id
    return frames


def read_log(db, after: int, limit: int, line_id: str | None = None) -> list[dict]:
    """:func:`page` in a session of its own, from the sessionmaker ``db``."""
    with db() as session:
        return page(session, after, limit, line_id)


def newest_seq(session) -> int:
    """The newest logged seq; 0 when the log is empty."""
    return session.scalar(select(func.coalesce(func.max(EventLog.seq), 0)))


def gap_before(first_seq: int, last: int) -> dict | None:
    """The events a client missed between ``last`` and the first one the log still
    has: seq is gapless, so a jump means retention purged them."""
    if first_seq > last + 1:
        return {"from": last + 1, "to": first_seq - 1}
    return None
