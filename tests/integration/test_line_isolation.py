"""A line's controller cannot touch another line's rows: PostgreSQL refuses it,
whatever the code does (PRODUCT.md, "Plant", isolation; ``shared.db.lines``).

Proven with the line role's own connection: a login that is a member of
``linectl_line_<id>`` only, as a line on another host connects. It reaches its
own line's tables, and every way to another line's (a qualified name, its own
``search_path``, ``SET ROLE``) is refused. Ids stay unique across the plant,
and each line numbers its own ``seq``.

A line's own login (``set_login``, as ``linectl up`` makes it; "Line
credentials"), with its URL as it is: its own line's tables and the transport's
rows, and nothing of another line, the people, the audit or the AI tables; its
transport's sweep keeps other logins' consumers; ``linectl lines credentials``
prints and rotates it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from services.stack.line_credentials import with_login
from shared.db.engine import make_engine
from shared.db.lines import LineNotPlaced, line_placement, login_role_for, register_lines, set_login
from shared.db.retention import RetentionPolicy, purge

ROOT = Path(__file__).resolve().parents[2]

LINES = ["cell-a", "cell-b", "cell-c"]
ORDER = ("INSERT INTO work_order (code, product_id, route, quantity) VALUES (:c, 'P', '[]', 1) RETURNING id")


def _as_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


@pytest.fixture
def plant(engine):
    with engine.begin() as conn:
        return register_lines(conn, LINES, default="cell-a")


@pytest.fixture
def line_b_login(db_url, engine, plant):
    """A login role that holds line cell-b's role and nothing else."""
    user, password = f"t_line_b_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD '{password}' IN ROLE \"{plant['cell-b'].role}\""))
        conn.execute(text(f"GRANT CONNECT ON DATABASE {urlsplit(db_url).path.lstrip('/')} TO {user}"))
    line_engine = make_engine(_as_user(db_url, user, password), pool_size=1, role=plant["cell-b"].role,
                              schema=plant["cell-b"].schema)
    yield line_engine
    line_engine.dispose()
    with engine.begin() as conn:
        conn.execute(text(f"DROP OWNED BY {user}"))
        conn.execute(text(f"DROP ROLE {user}"))


def _refused(line_engine, sql: str) -> str:
    with pytest.raises(DBAPIError) as caught, line_engine.begin() as conn:
        conn.execute(text(sql))
    return str(caught.value.orig).splitlines()[0]


def test_a_line_role_reaches_its_own_tables_and_no_other_line_s(engine, plant, line_b_login):
    assert plant["cell-a"].schema == "public"  # the first line keeps a one-line database's tables
    assert {p.schema for p in plant.values()} == {"public", "line_cell-b", "line_cell-c"}
    with engine.begin() as conn:  # the other lines have rows to steal
        conn.execute(text(ORDER), {"c": "A-1"})
        conn.execute(text('INSERT INTO "line_cell-c".work_order (code, product_id, route, quantity)'
                          " VALUES ('C-1', 'P', '[]', 1)"))
    with line_b_login.begin() as conn:
        own = conn.execute(text(ORDER), {"c": "B-1"}).scalar()
        assert conn.execute(text("SELECT code FROM work_order")).scalars().all() == ["B-1"]
        assert conn.execute(text("SELECT count(*) FROM dock")).scalar() == 1
        # a generated order code's number comes from the plant's id sequence, in its own schema too
        assert conn.execute(text("SELECT next_work_order_number()")).scalar() > own
    for sql in ("SELECT * FROM public.work_order", 'SELECT * FROM "line_cell-c".work_order',
                "UPDATE public.work_order SET priority = 1", 'DELETE FROM "line_cell-c".job',
                "INSERT INTO public.event_log (seq, tx_id, type) VALUES (99, 1, 'X')",
                "SET search_path = public; SELECT * FROM work_order"):
        assert "permission denied" in _refused(line_b_login, sql), sql
    for other_role in ("linectl_controller", plant["cell-c"].role, "linectl_gateway"):
        assert "permission denied to set role" in _refused(line_b_login, f'SET ROLE "{other_role}"')
    with engine.connect() as conn:  # ids are the plant's: the line's order took the next one
        ids = conn.execute(text("SELECT id FROM public.work_order UNION ALL SELECT id FROM \"line_cell-c\".work_order"
                                " UNION ALL SELECT id FROM \"line_cell-b\".work_order")).scalars().all()
    assert own in ids and len(set(ids)) == 3


def test_each_line_numbers_its_own_seq_and_keeps_its_own_keys(engine, plant):
    with engine.begin() as conn:
        for schema in ("public", '"line_cell-b"'):
            conn.execute(text(f"INSERT INTO {schema}.event_log (seq, tx_id, type) VALUES (1, 1, 'X')"))
            conn.execute(text(f"INSERT INTO {schema}.equipment (id, name, kind, slot_count)"
                              " VALUES ('MC1', 'MC1', 'MACHINE', 1)"))  # both lines may have an MC1
    with pytest.raises(DBAPIError), engine.begin() as conn:  # a line's own keys still hold
        conn.execute(text('INSERT INTO "line_cell-b".event_log (seq, tx_id, type) VALUES (1, 2, \'Y\')'))
    with pytest.raises(DBAPIError), engine.begin() as conn:  # and so do its foreign keys, in its schema
        conn.execute(text('INSERT INTO "line_cell-b".equipment_slot (equipment_id, slot_no) VALUES (\'MC9\', 1)'))


def test_registering_again_changes_nothing_and_keeps_each_line_where_it_is(engine, plant):
    with engine.begin() as conn:  # the plant file reordered: the default line is now cell-c
        again = register_lines(conn, list(reversed(LINES)) + ["cell-d"], default="cell-c")
    assert {k: again[k] for k in LINES} == plant
    assert again["cell-d"].schema == "line_cell-d"


def test_retention_purges_every_line_s_old_events_and_keeps_each_line_s_newest(engine, plant):
    with engine.begin() as conn:
        for schema in ("public", '"line_cell-b"'):
            conn.execute(text(f"INSERT INTO {schema}.event_log (seq, tx_id, type, at) VALUES"
                              " (1, 1, 'Old', now() - interval '400 days'),"
                              " (2, 2, 'Old', now() - interval '400 days')"))
    counts = purge(engine, RetentionPolicy(event_days=30))
    assert counts["event_log"] == 2
    with engine.connect() as conn:
        for schema in ("public", '"line_cell-b"'):
            assert conn.execute(text(f"SELECT seq FROM {schema}.event_log")).scalars().all() == [2]


# -- a line's own login (PRODUCT.md, "Line credentials") --------------------------------------------
# Roles are the server's: these lines' ids are the test's own, so a test of another shard
# on a shared server never sets the same role's password.

def _line_ids() -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"a{tag}", f"b{tag}", f"c{tag}"]


def _drop_logins(engine, line_ids) -> None:
    with engine.begin() as conn:
        for line_id in line_ids:
            role = f'"linectl_line_{line_id}"'
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))


@pytest.fixture
def logins(db_url, engine):
    """Three registered lines, each with its login and password (as ``linectl up`` sets them)."""
    ids = _line_ids()
    urls = {}
    with engine.begin() as conn:
        placed = register_lines(conn, ids, default=ids[0])
        for line_id in ids:
            password = uuid.uuid4().hex
            set_login(conn, placed[line_id], password)
            urls[line_id] = with_login(db_url, login_role_for(line_id), password)
    yield placed, urls
    _drop_logins(engine, ids)


def _try(url: str, sql: str) -> str | None:
    """None when ``sql`` succeeded (rolled back), else PostgreSQL's first line."""
    line_engine = make_engine(url, pool_size=1)
    try:
        with line_engine.connect() as conn:
            try:
                conn.execute(text(sql))
                return None
            finally:
                conn.rollback()
    except DBAPIError as exc:  # refused at login too
        return str(exc.orig).strip().splitlines()[0]
    finally:
        line_engine.dispose()


def _server_checks_passwords(db_url: str) -> bool:
    """False on a server with trust auth (CI's shared PostgreSQL): any password logs in."""
    user = urlsplit(db_url).username
    return _try(with_login(db_url, user, "not-" + uuid.uuid4().hex), "SELECT 1") is not None


def test_a_line_s_login_writes_its_own_line_and_the_transport_only(engine, logins):
    placed, urls = logins
    a, b, c = placed
    qualified = {line_id: ("public" if p.schema == "public" else f'"{p.schema}"') for line_id, p in placed.items()}
    others = ["people_user", "people_session", "people_audit", "ai_snapshot", "ai_runtime_job", "ai_credential"]
    for line_id, url in urls.items():  # the URL as it is, as a line's transport connects
        own = qualified[line_id]
        assert _try(url, f"INSERT INTO {own}.work_order (code, product_id, route, quantity)"
                         " VALUES ('X', 'P', '[]', 1)") is None, line_id
        assert _try(url, f"UPDATE {own}.audit_log SET actor = actor; DELETE FROM {own}.event_log") is None
        for other in set(placed) - {line_id}:
            for table in ("work_order", "audit_log", "event_log"):
                refused = _try(url, f"INSERT INTO {qualified[other]}.{table} DEFAULT VALUES")
                assert refused and "permission denied" in refused, (line_id, other, table)
            refused = _try(url, f"UPDATE {qualified[other]}.work_order SET priority = 1")
            assert refused and "permission denied" in refused
        for table in others:
            for sql in (f"INSERT INTO {table} DEFAULT VALUES", f"DELETE FROM {table}"):
                refused = _try(url, sql)
                assert refused and "permission denied" in refused, (line_id, sql)
        # The transport's tables: its rows, nothing more.
        assert _try(url, "INSERT INTO mq_exchange (name, type, durable, auto_delete)"
                         " VALUES ('x', 'topic', true, false); DELETE FROM mq_exchange WHERE name = 'x'") is None
        for sql in ("TRUNCATE mq_message", "ALTER TABLE mq_message ADD COLUMN x int", "DROP TABLE mq_binding",
                    "CREATE TABLE public.mine (x int)", "SET ROLE linectl_gateway", "SET ROLE postgres",
                    f'SET ROLE "linectl_line_{b if line_id != b else c}"'):
            refused = _try(url, sql)
            assert refused and ("permission denied" in refused or "must be owner" in refused), (line_id, sql)
    # The line in public takes linectl_controller, as its controller's connections do.
    assert _try(urls[a], "SET ROLE linectl_controller; INSERT INTO work_order (code, product_id, route, quantity)"
                         " VALUES ('Y', 'P', '[]', 1)") is None
    # A controller finds its line's place with its login; a line not registered yet it may not make.
    assert line_placement(urls[b], b, default=False) == placed[b]
    with pytest.raises(LineNotPlaced, match="its login may not make them: run `linectl migrate`"):
        line_placement(urls[b], "unregistered", default=False)


def test_a_line_s_transport_sees_other_logins_consumers_alive(engine, logins):
    """The dead-consumer sweep, run by a line's login, keeps the consumers of the
    gateway's login (another user's backends: PostgreSQL shows their start time to
    no one else) and of another line's."""
    from shared.transport.pgsql.sql import SWEEP_SQL

    _placed, urls = logins
    line_a, line_b = list(urls)[:2]
    holders = [engine.connect(), make_engine(urls[line_a], pool_size=1).connect()]
    try:
        for n, holder in enumerate(holders):  # a live backend of each login holds a consumer
            holder.execute(text(
                "INSERT INTO mq_queue (name, durable, auto_delete, exclusive) VALUES (:q, false, true, false);"
                "INSERT INTO mq_consumer (queue, backend_pid, tag, backend_started)"
                " SELECT :q, pid, 't', backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"),
                {"q": f"q{n}"})
            holder.commit()
        sweeper = make_engine(urls[line_b], pool_size=1)
        with sweeper.connect() as conn:
            conn.exec_driver_sql(SWEEP_SQL, {"max_deliveries": 5})
            conn.commit()
        sweeper.dispose()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT queue FROM mq_consumer ORDER BY queue")).scalars().all() == ["q0", "q1"]
            assert conn.execute(text("SELECT count(*) FROM mq_queue WHERE name IN ('q0', 'q1')")).scalar() == 2
    finally:
        for holder in holders:
            holder.close()


def test_lines_credentials_prints_and_rotates_a_line_s_url(db_url, engine, tmp_path):
    ids = _line_ids()[:2]
    layouts = ROOT / "deploy" / "lines"
    for line_id, source in zip(ids, ("cell-a", "cell-b"), strict=True):
        (tmp_path / f"{line_id}.yaml").write_text(
            (layouts / f"{source}.yaml").read_text().replace(f"id: {source}", f"id: {line_id}", 1))
    plant = tmp_path / "plant.yaml"
    plant.write_text("plant: {id: p, name: P}\nlines:\n" + "".join(f"  - {{layout: {i}.yaml}}\n" for i in ids))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")},
           "LINECTL_DATABASE_URL": db_url, "LINECTL_PLANT_FILE": str(plant), "LINECTL_DATA_DIR": str(tmp_path / "d")}

    def credentials(*args):
        done = subprocess.run([sys.executable, "-m", "services.stack.cli", "lines", "credentials", *args],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done

    try:
        line_b = ids[1]
        first = credentials(line_b).stdout.strip()
        assert urlsplit(first).username == f"linectl_line_{line_b}"
        stored = tmp_path / "d" / "lines" / f"{line_b}.password"
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        assert urlsplit(first).password == stored.read_text().strip()
        assert credentials(line_b).stdout.strip() == first  # printing changes nothing
        assert _try(first, 'INSERT INTO public.work_order DEFAULT VALUES').startswith("permission denied")

        rotated = credentials(line_b, "--rotate")
        second = rotated.stdout.strip()
        assert second != first and urlsplit(second).password == stored.read_text().strip()
        assert "restart" in rotated.stderr
        assert _try(second, f'SELECT count(*) FROM "line_{line_b}".work_order') is None
        if _server_checks_passwords(db_url):
            assert "password authentication failed" in _try(first, "SELECT 1")
        refused = subprocess.run([sys.executable, "-m", "services.stack.cli", "lines", "credentials", "nope"],
                                 env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and refused.stderr.strip() == (
            f"linectl lines: nope: the plant has no such line (its lines: {', '.join(ids)})")
    finally:
        _drop_logins(engine, [i for i in ids if _role_exists(engine, f"linectl_line_{i}")])


def _role_exists(engine, role: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar())
