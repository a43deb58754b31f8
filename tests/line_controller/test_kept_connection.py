"""The loop keeps one connection, and a quiet line (no tick while nothing is due,
issue 55) may not use it for minutes: a server restarted meanwhile must cost the
next message a new connection, not the message itself (test_up's first command
after a PostgreSQL restart was answered 503)."""

from __future__ import annotations

from sqlalchemy import text

from services.line_controller import unit_of_work


def test_the_first_message_after_the_servers_restart_is_handled(harness, engine, monkeypatch):
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    kept = harness.loop.uow._conn.connection.dbapi_connection.info.backend_pid
    with engine.begin() as conn:  # what a restart does to every session
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": kept}).scalar()
    monkeypatch.setattr(unit_of_work, "KEPT_IDLE_CHECK_SECONDS", 0.0)  # as after a quiet spell
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 2})
    assert harness.loop.uow._conn.connection.dbapi_connection.info.backend_pid != kept
    assert harness.rows("SELECT quantity FROM work_order ORDER BY id") == [(1,), (2,)]
