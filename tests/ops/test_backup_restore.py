"""``linectl backup`` and ``linectl restore`` on an external database (the suite's
server, and a PostgreSQL of another major when one answers on 127.0.0.1:5432),
as real ``linectl`` processes. The drill on the embedded server, with an order
running, is tests/ops/test_restore_drill.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from services.stack.backup import tool_major
from tests.support.db import admin_execute, with_database

REPO = Path(__file__).resolve().parents[2]
OTHER_SERVER = os.environ.get("LINECTL_TEST_OTHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def linectl(*args: str, database_url: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LINECTL_DATABASE_URL": database_url, "LINECTL_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "services.stack.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def execute(url: str, sql: str, params=None):
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def add_order(url: str, code: str) -> None:
    execute(url, "INSERT INTO work_order (code, product_id, route, quantity, status) "
                 "VALUES (%s, 'SHAFT-B', '[]', 3, 'RUNNING')", (code,))


def add_piece_record(url: str, serial: str) -> None:
    """A finished piece's record: the piece, a step and an answer (PRODUCT.md, "Piece traceability")."""
    execute(url, "INSERT INTO piece (job_id, serial, work_order_id, status, created_at, finished_at) "
                 "VALUES (900001, %s, 1, 'COMPLETED', now() - interval '1 hour', now());"
                 "INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, ended_at, "
                 "  result) VALUES (900001, 0, 'inspection', 'INSP1', 1, now() - interval '50 minutes', "
                 "  now() - interval '49 minutes', 'PASS');"
                 "INSERT INTO piece_entry (job_id, category, at, detail) VALUES (900001, 'answer', now(), "
                 "  '{\"resolution\": \"RETRY\", \"by\": \"ola\"}')", (serial,))


PIECE_RECORD = ("SELECT p.serial, s.equipment_id, s.result, e.detail->>'by' FROM piece p "
                "JOIN piece_step s USING (job_id) JOIN piece_entry e USING (job_id)")


def add_message_in_flight(url: str) -> None:
    execute(url, "INSERT INTO mq_queue (name, durable, auto_delete, exclusive) VALUES ('hw', true, false, false);"
                 "INSERT INTO mq_message (queue, payload) VALUES ('hw', '{}')")


def orders(url: str) -> list[str]:
    return [r[0] for r in execute(url, "SELECT code FROM work_order ORDER BY code")]


def table_rows(url: str) -> dict[str, int]:
    tables = [r[0] for r in execute(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    return {t: execute(url, f'SELECT count(*) FROM "{t}"')[0][0] for t in sorted(tables)}


def backed_up(source_url: str, tmp_path: Path) -> Path:
    dump = tmp_path / "linectl.dump"
    out = linectl("backup", str(dump), database_url=source_url, data_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    assert dump.is_file() and dump.stat().st_mode & 0o777 == 0o600
    assert not dump.with_name(dump.name + ".partial").exists()
    return dump


def test_backup_and_restore_on_an_external_database(db_url, empty_db_url, tmp_path):
    add_order(db_url, "WO-BACKED-UP")
    add_message_in_flight(db_url)
    add_piece_record(db_url, "SN-BACKED-UP")
    dump = backed_up(db_url, tmp_path)

    out = linectl("restore", str(dump), database_url=empty_db_url, data_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "schema " in out.stdout
    source, restored = table_rows(db_url), table_rows(empty_db_url)
    # Everything but the transport's messages in flight and the consumers that held them.
    assert restored == {**source, "mq_message": 0, "mq_consumer": 0}
    assert orders(empty_db_url) == ["WO-BACKED-UP"]
    assert execute(empty_db_url, PIECE_RECORD) == execute(db_url, PIECE_RECORD) == [
        ("SN-BACKED-UP", "INSP1", "PASS", "ola")]  # piece records are kept
    assert execute(empty_db_url, "SELECT name FROM mq_queue") == [("hw",)]  # its declaration stays
    assert execute(empty_db_url, "SELECT version_num FROM alembic_version") == \
        execute(db_url, "SELECT version_num FROM alembic_version")
    # The dump carries no grants; the restore gives the writer roles theirs again.
    assert execute(empty_db_url, "SELECT has_table_privilege('linectl_gateway', 'work_order', 'SELECT'),"
                                 " has_table_privilege('linectl_controller', 'work_order', 'UPDATE')") \
        == [(True, True)]


def test_restore_refuses_a_database_that_is_not_empty_unless_forced(db_url, test_databases, tmp_path):
    add_order(db_url, "WO-BACKED-UP")
    dump = backed_up(db_url, tmp_path)
    target = test_databases.fresh()  # at head, as after `linectl up`
    try:
        add_order(target, "WO-ALREADY-THERE")
        before = table_rows(target)

        refused = linectl("restore", str(dump), database_url=target, data_dir=tmp_path)
        assert refused.returncode == 1
        assert "not empty" in refused.stderr and "--force" in refused.stderr, refused.stderr
        assert (orders(target), table_rows(target)) == (["WO-ALREADY-THERE"], before)  # nothing changed

        # --force still waits for the services to be gone.
        session = psycopg2.connect(target)
        try:
            busy = linectl("restore", "--force", str(dump), database_url=target, data_dir=tmp_path)
        finally:
            session.close()
        assert busy.returncode == 1 and "other session" in busy.stderr, busy.stderr
        assert orders(target) == ["WO-ALREADY-THERE"]

        forced = linectl("restore", "--force", str(dump), database_url=target, data_dir=tmp_path)
        assert forced.returncode == 0, forced.stderr
        assert orders(target) == ["WO-BACKED-UP"]
    finally:
        test_databases.drop(target)


def test_a_restore_that_fails_changes_nothing(db_url, test_databases, tmp_path):
    broken = tmp_path / "broken.dump"
    broken.write_bytes(b"PGDMP not really")
    target = test_databases.fresh()
    try:
        add_order(target, "WO-ALREADY-THERE")
        out = linectl("restore", "--force", str(broken), database_url=target, data_dir=tmp_path)
        assert out.returncode == 1 and "not a backup" in out.stderr, out.stderr
        assert orders(target) == ["WO-ALREADY-THERE"]
    finally:
        test_databases.drop(target)


def test_backup_without_client_tools_of_the_servers_major_fails_clearly(db_url, tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    out = linectl("backup", str(tmp_path / "x.dump"), "--pg-bin", str(empty_bin),
                  database_url=db_url, data_dir=tmp_path)
    assert out.returncode == 1
    assert "the server runs PostgreSQL" in out.stderr and "--pg-bin" in out.stderr, out.stderr
    assert list(tmp_path.glob("x.dump*")) == []


def _other_server() -> str | None:
    try:
        psycopg2.connect(OTHER_SERVER, connect_timeout=2).close()
    except psycopg2.OperationalError:
        return None
    return OTHER_SERVER


def test_backup_and_restore_on_an_external_server_use_its_own_major(test_databases, tmp_path):
    """The system's PostgreSQL (15 here) beside the suite's (the embedded 18): the
    tools are found by the server's major, not taken from the wheel."""
    server = _other_server()
    if server is None:
        pytest.skip(f"no PostgreSQL answers at {OTHER_SERVER}")
    major = int(execute(server, "SHOW server_version_num")[0][0]) // 10000
    names = [f"{test_databases.prefix}_other_{n}" for n in ("src", "dst")]
    admin_execute(server, *[f'CREATE DATABASE "{n}"' for n in names])
    source, target = (with_database(server, n) for n in names)
    try:
        from services.stack.migrate import upgrade
        upgrade(source)
        add_order(source, "WO-ON-THE-OTHER-SERVER")
        dump = tmp_path / "other.dump"
        out = linectl("backup", str(dump), database_url=source, data_dir=tmp_path)
        assert out.returncode == 0, out.stderr
        used = out.stdout.split("(with ", 1)[1].split(")", 1)[0]
        assert tool_major(used) == major, out.stdout
        out = linectl("restore", str(dump), database_url=target, data_dir=tmp_path)
        assert out.returncode == 0, out.stderr
        assert orders(target) == ["WO-ON-THE-OTHER-SERVER"]
    finally:
        admin_execute(server, *[f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)' for n in names])
