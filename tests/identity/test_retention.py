"""Retention covers people: old access-audit rows and sessions ended a day ago
go; live sessions and recent rows stay."""

from __future__ import annotations

from sqlalchemy import text

from services.identity.sessions import Person
from shared.db.retention import RetentionPolicy, purge


def test_purge_removes_old_access_audit_rows_and_long_ended_sessions(engine, sign_in):
    sessions = sign_in.sessions
    with engine.begin() as conn:
        _, live = sessions.begin(conn, Person("ann", "", "operator"))
        _, ended = sessions.begin(conn, Person("ben", "", "operator"))
        _, recent = sessions.begin(conn, Person("cid", "", "operator"))
        conn.execute(text("UPDATE people_session SET ended_at = now() - interval '2 days' WHERE id = :id"),
                     {"id": ended.key})
        conn.execute(text("UPDATE people_session SET ended_at = now() - interval '1 hour' WHERE id = :id"),
                     {"id": recent.key})
        conn.execute(text("INSERT INTO people_audit (at, actor, action, target_type, outcome) VALUES"
                          " (now() - interval '400 days', 'old', 'SignIn', 'session', 'DONE'),"
                          " (now(), 'new', 'SignIn', 'session', 'DONE')"))
    counts = purge(engine, RetentionPolicy(audit_days=365))
    assert counts["people_audit"] == 1 and counts["people_session"] == 1
    with engine.connect() as conn:
        assert set(conn.execute(text("SELECT id FROM people_session")).scalars()) == {live.key, recent.key}
        assert conn.execute(text("SELECT actor FROM people_audit")).scalars().all() == ["new"]
