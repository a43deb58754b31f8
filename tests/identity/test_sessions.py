"""Session limits: idle (LINECTL_SESSION_IDLE_MINUTES) and absolute
(LINECTL_SESSION_MAX_HOURS), on the server; a new password ends them too."""

from __future__ import annotations

from sqlalchemy import text

from services.identity.sessions import Person, session_key
from tests.identity.conftest import CONSOLE, PASSWORD


def _age(engine, secret: str, column: str, minutes: int) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE people_session SET {column} = now() - make_interval(mins => :m) WHERE id = :id"),
                     {"m": minutes, "id": session_key(secret)})


def test_a_session_ends_after_its_idle_and_its_absolute_limit(engine, sign_in, people_settings):
    sessions = sign_in.sessions
    assert people_settings.session_idle_minutes == 60 and people_settings.session_max_hours == 12
    with engine.begin() as conn:
        idle, _ = sessions.begin(conn, Person("ann", "", "operator"))
        old, _ = sessions.begin(conn, Person("ben", "", "operator"))
    _age(engine, idle, "last_seen_at", 59)
    assert sessions.resume(idle) is not None  # in time: and the request counts as activity
    _age(engine, idle, "last_seen_at", 61)
    assert sessions.resume(idle) is None
    _age(engine, old, "expires_at", 1)  # begun 12 hours ago, however busy since
    assert sessions.resume(old) is None


def test_a_new_password_ends_the_users_sessions(users, sign_in):
    users.add("cid", "operator", PASSWORD, CONSOLE)
    secret, _ = sign_in.attempt("cid", PASSWORD, "127.0.0.1")
    assert sign_in.sessions.resume(secret) is not None
    users.set_password("cid", "another long password", CONSOLE)
    assert sign_in.sessions.resume(secret) is None
